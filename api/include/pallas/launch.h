// How an entry point runs: on which backend, and on which CUDA stream.
#pragma once

#include <array>
#include <cstdint>

#include "pallas/status.h"

struct CUstream_st;  // cudaStream_t is CUstream_st*; users need no CUDA headers.

namespace pallas {

using Stream = CUstream_st*;

// The backend is always chosen by the caller, never silently:
//   kCuda: the cubin for the current device's architecture, launched on `stream`.
//   kHost: the block-level semantics on host memory ("interpret mode"), run synchronously
//          on the calling thread; all pointers must be host pointers; `stream` is ignored.
//   kEmulator: the code each GPU thread runs (the NVVM-level form the cubin is made from),
//          executed on the CPU with one fiber per GPU thread, checking every global access
//          against the launch's buffers, shared memory for races and the schedule for
//          deadlocks; host pointers, synchronous, `stream` is ignored. For testing and
//          debugging GPU lowerings on machines without a GPU.
enum class Backend { kCuda, kHost, kEmulator };

// "cuda", "host", "emulator"
const char* to_string(Backend backend);

// How the emulator backend schedules GPU threads.
struct EmulatorOptions {
  int concurrent_programs = 4;  // CTAs resident at once
  uint64_t schedule_seed = 0;   // 0: round-robin; else a random order per pass from this seed
  // The GPU the emulator stands for (major * 10 + minor): from 90 it runs the TMA forms of
  // kernels with blocks staged in shared memory, below 90 their sm_80 forms (cp.async), as a
  // device of that generation would.
  int compute_capability = 90;
  // The shared memory one program may have on that GPU (its opt-in maximum per block), which
  // decides, as on a device, whether a staged instance fits or gives way (to a smaller tile, or
  // to its direct twin). 0: the compute capability's: 163 KiB for 80 and 87, 99 KiB for 86,
  // 89 and from 120, 227 KiB for 90 to 119.
  int64_t shared_bytes_per_block = 0;
};

// What a call launched (Launch::record): which instance its entry point chose among its
// variants and paths, and the grid it computed. For tests and benchmarks that check a choice,
// and for users asking which kernel ran. Worked example: matmul_bt of bf16 [16, 4096] x
// [4096, 4096] records "matmul_bt_bf16_bf16_splitk", grid {1, 64, 4}: one row and 64 columns
// of 128 x 64 tiles, 4 splits of K (the host runs its direct twin, "..._splitk_direct").
struct LaunchRecord {
  const char* instance = nullptr;  // the kernel instance's name; null: not written
  std::array<int64_t, 3> grid{};   // programs along x, y, z (a persistent grid: its tiles, x)
  int cluster = 1;  // programs per cluster asked for (after max_cluster; a device may run 1)
  bool persistent = false;  // grid counts tiles that resident programs walk
  // A persistent grid's programs (0 otherwise, and for an empty grid): how many walked its
  // grid[0] tiles (CUDA: one per resident CTA, at most one per tile, three for a stream-K walk
  // in thirds; the host: 1; the emulator: at most its concurrent programs). E.g. 448 tiles of
  // matmul_bt's 128 x 256 (1024 x 14336 x 4096) on a 132-SM H100: 132 programs in 66 clusters
  // of two, each cluster walking 4 rounds of tile pairs (Spec.h's Persistent).
  int64_t programs = 0;
  // Why a direct twin ran instead of the staged instance its entry point prefers (null: it
  // did not), e.g. fallback_operand "a", fallback "a stride is not a multiple of 16 bytes"
  // (TMA's rules, naming the operand), or "the host backend has no TMA" (no operand).
  const char* fallback = nullptr;
  const char* fallback_operand = nullptr;
  // CUDA: launched with programmatic stream serialization (Launch::programmatic_dependent_launch
  // asked, the kernel's cubin waits for its predecessor, the device is sm_90 or newer).
  bool programmatic = false;
  // Programs per cluster launched: `cluster`, or 1 where the backend, device or its room for
  // clusters ran none (the host, sm_80, too few resident; see kernel_image.h's launch_kernel).
  int launched_cluster = 1;
};

// How to launch a call. On the CUDA backend the call may be captured into a CUDA graph (the
// stream capturing, in any capture mode, the call its first of that op or not): the graph
// then owns the call's semaphore and workspace memory, which no other work uses until the
// graph and its instantiations are destroyed, and its replays read and write the same
// operands and that memory, as any captured kernel does: two copies of one graph (two
// instantiations, clones) must not run at the same time. A call whose kernel checks device
// data (check_device_errors below) refuses that option while capturing.
struct Launch {
  Backend backend = Backend::kCuda;
  Stream stream = nullptr;  // the legacy default stream when null
  EmulatorOptions emulator = {};
  // kCuda, kernels with run-time checks of device data (e.g. cross_entropy's labels): after
  // launching, synchronize `stream` and return a failed check as the status, as
  // take_device_errors would. A debugging aid that costs a host round trip; without it the
  // launch never synchronizes and failures wait for take_device_errors. The host and emulator
  // backends always report failed checks as the launch's status. On a stream that is capturing
  // a graph such a call is refused (kInvalidArgument) before anything is captured; capture
  // without it and call take_device_errors after a replay.
  bool check_device_errors = false;
  // kCuda and kEmulator: at most this many programs per thread-block cluster, for kernels that
  // run in clusters; 0: as many as the kernel asks for, 1: no clusters. A persistent grid in
  // clusters (spec.persistent's cluster) halves its size until it fits; a grid clustered along
  // its first axis (spec.cluster_first_axis: the deep split-K instances, whose splits sum in a
  // cluster) runs clusters of one when its size does not fit (the splits then sum through
  // the workspace). The results are the same either way: for measuring what clusters give,
  // or ruling them out. (With the environment variable PALLAS_LOG_LAUNCH set, a CUDA launch
  // that asked for clusters and runs without them says so on stderr.)
  int max_cluster = 0;
  // kCuda and kEmulator: the device's shared memory per block as the entry points' variant
  // choosers see it is at most this (the matmul family's 128 x 256 tiles, a 193 KiB pipeline,
  // give way to 128 x 128 below it); 0: the device's own. It steers the choice only: what
  // runs still needs the device's memory. For measuring the smaller instance on a device that
  // fits both; the results are the same either way.
  int64_t max_shared_bytes_per_block = 0;
  // Where the call writes the last kernel it launched (null: nowhere): written when the
  // launch succeeds (an empty grid included: nothing runs then; on CUDA, launched is not yet
  // finished); a call that fails leaves it as it was.
  LaunchRecord* record = nullptr;
  // kCuda: launch with programmatic stream serialization (programmatic dependent launch, sm_90
  // and up) where the kernel is written for it (its cubin opens with griddepcontrol wait:
  // every kernel's sm_90a form, none of the sm_80 forms): it may start
  // while the kernel before it on the stream is still running, its launch and its programs'
  // scheduling overlapping that kernel's last wave, and it touches no memory before that
  // kernel has finished. Results are the same either way; for a stream of dependent launches
  // (a model's layers, decode steps, also when captured into a graph). Off by default until
  // measured on a device (bench: pallas_matmul_bench --pdl).
  bool programmatic_dependent_launch = false;
};

// Synchronizes `stream`, then reports the checks that failed on the current device (values a
// kernel found invalid, e.g. a label outside the vocabulary) in any launch since the last
// report, clearing them: kInvalidArgument naming the kernel, the check and the values of the
// first program that failed, with how many programs failed; Ok when none did. Launches still
// running on other streams may record failures after this reads: synchronize them first.
// Errors of the synchronization itself are kCudaError; a stream that is capturing a CUDA graph
// is kInvalidArgument (synchronizing it would break the capture): call it after a replay.
// Like any synchronizing CUDA call, not while another stream of this process captures in
// cudaStreamCaptureModeGlobal (CUDA would invalidate that capture).
[[nodiscard]] Status take_device_errors(Stream stream = nullptr);

// True when a usable CUDA device exists (cudaGetDeviceCount succeeds and reports at least one).
bool cuda_device_available();

}  // namespace pallas

// The SIMT runtime of the emulator backend: runs the thread-level GPU code of a
// kernel (lowered by codegen's convert-nvvm-to-emulator) on the CPU, one fiber
// per GPU thread, with checks real GPUs do not give you:
//   - every global load/store inside a buffer of the launch (out-of-bounds),
//   - shared-memory races (a write and another thread's access to the same
//     bytes with no barrier in between),
//   - deadlock (a full scheduling pass without progress), naming who waits on what,
//   - buffers that must be zero when the kernel ends (semaphores).
// Each failure is reported with kernel, block, thread and address.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace pallas::emulator {

/// Runs one GPU thread of a kernel: args[i] points at kernel parameter i.
using ThreadEntry = void (*)(void** args);

/// A global-memory range the kernel may access.
struct Buffer {
  const char* name;
  const void* begin;
  uint64_t bytes;
  /// Must hold only zeros when the kernel ends (semaphores, DESIGN.md section 5).
  bool must_end_zero = false;
};

struct Options {
  /// CTAs resident at once; programs that wait on each other need enough of them.
  int concurrent_ctas = 4;
  /// 0: threads run round-robin in order; otherwise each scheduling pass runs
  /// them in an order drawn from this seed (race-free kernels must not care).
  uint64_t schedule_seed = 0;
  /// Stack of each thread's fiber (only the pages a thread uses are
  /// touched; overflows fail the launch: check_stack in Scheduler.h). The
  /// emulator forms are compiled at -O0 (pallas-codegen's emitEmulatorObject),
  /// whose frames are large: matmul's splitk_deep takes 74 KiB a thread.
  uint64_t stack_bytes = 256 * 1024;
};

struct LaunchConfig {
  const char* kernel;
  ThreadEntry entry;
  void** args;
  std::array<int64_t, 3> grid;
  std::array<int, 3> block;
  int64_t shared_bytes = 0;  // static + dynamic shared memory per CTA
  /// CTAs per thread-block cluster, along x (grid[0] is a multiple of it):
  /// a cluster's CTAs are resident together, reach each other's shared
  /// memory (mapa, remote mbarrier arrivals, multicast TMA loads) and meet
  /// at barrier.cluster.
  int cluster = 1;
  std::span<const Buffer> buffers;
  Options options;
};

/// Runs the whole grid; returns false with `error` describing the first failed check.
bool launch(const LaunchConfig& config, std::string& error);

}  // namespace pallas::emulator

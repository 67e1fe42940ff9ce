// How an entry point runs: on which backend, and on which CUDA stream.
#pragma once

#include <cstdint>

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
};

struct Launch {
  Backend backend = Backend::kCuda;
  Stream stream = nullptr;  // the legacy default stream when null
  EmulatorOptions emulator = {};
};

// True when a usable CUDA device exists (cudaGetDeviceCount succeeds and reports at least one).
bool cuda_device_available();

}  // namespace pallas

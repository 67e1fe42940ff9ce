// How an entry point runs: on which backend, and on which CUDA stream.
#pragma once

struct CUstream_st;  // cudaStream_t is CUstream_st*; users need no CUDA headers.

namespace pallas {

using Stream = CUstream_st*;

// The backend is always chosen by the caller, never silently:
//   kCuda: the cubin for the current device's architecture, launched on `stream`.
//   kHost: the block-level semantics on host memory ("interpret mode"), run synchronously
//          on the calling thread; all pointers must be host pointers; `stream` is ignored.
//   kEmulator: the thread-level code that runs on the GPU (same thread layout, index
//          formulas, masks and vector accesses as the cubin), executed on the CPU, program
//          after program and thread after thread; host pointers, synchronous, `stream` is
//          ignored. For testing and debugging GPU lowerings on machines without a GPU.
enum class Backend { kCuda, kHost, kEmulator };

// "cuda", "host", "emulator"
const char* to_string(Backend backend);

struct Launch {
  Backend backend = Backend::kCuda;
  Stream stream = nullptr;  // the legacy default stream when null
};

// True when a usable CUDA device exists (cudaGetDeviceCount succeeds and reports at least one).
bool cuda_device_available();

}  // namespace pallas

// How the CUDA backend turns a failing CUDA runtime call into a Status
// (internal to api/src).
#ifndef PALLAS_API_SRC_CUDA_STATUS_H
#define PALLAS_API_SRC_CUDA_STATUS_H

#include "pallas/status.h"

#include <cuda_runtime.h>

#include <string>

namespace pallas::detail {

/// Errors that mean "there is no usable device here", as opposed to a failing call.
bool is_no_device_error(cudaError_t err);

/// Errors that an earlier asynchronous failure (a kernel's fault) leaves in
/// the context: every later call returns them, whoever made it.
bool is_sticky_error(cudaError_t err);

/// "<name>: <text>", and for a sticky error that it may come from an earlier launch.
std::string cuda_text(cudaError_t err);

/// "<kernel>: cudaXxx failed: <name>: <text>" as kNoDevice or kCudaError. The
/// error is reported through the Status, so it is cleared from
/// cudaGetLastError (sticky errors stay).
Status cuda_failure(const char* kernel, const char* call, cudaError_t err);

/// Zeroes `bytes` of device memory at `ptr` on a private non-blocking stream and waits for it:
/// launches on any stream see zeros afterwards, and no caller's stream is synchronized or
/// captured. Call in RelaxedCaptureMode where a capture may be under way.
cudaError_t zero_device_memory_now(void* ptr, size_t bytes);

/// For its lifetime, lets this thread make the CUDA calls that a graph capture in
/// cudaStreamCaptureModeGlobal (the default, on this thread or any other) forbids as
/// "potentially unsafe": cudaMalloc, cudaEventQuery, loading a library, synchronizing a
/// private stream. The runtime's one-time work (loading a kernel, allocating a pool region or
/// an error record) is such a call but is no part of the work being captured, so it must
/// neither fail nor invalidate a capture: a user who captures a model's first call (kernels
/// not yet loaded) gets a valid graph. The previous mode comes back on destruction.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode();
  ~RelaxedCaptureMode();
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;

 private:
  cudaStreamCaptureMode previous_ = cudaStreamCaptureModeRelaxed;
  bool exchanged_ = false;
};

}  // namespace pallas::detail

#endif  // PALLAS_API_SRC_CUDA_STATUS_H

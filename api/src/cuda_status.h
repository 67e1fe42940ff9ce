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

}  // namespace pallas::detail

#endif  // PALLAS_API_SRC_CUDA_STATUS_H

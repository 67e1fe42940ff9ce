// CUDA runtime errors as Statuses (cuda_status.h).

#include "cuda_status.h"

namespace pallas::detail {

bool is_no_device_error(cudaError_t err) {
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInitializationError:
    case cudaErrorStubLibrary:
    case cudaErrorCallRequiresNewerDriver:
    case cudaErrorDevicesUnavailable:
    case cudaErrorSystemNotReady:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
      return true;
    default:
      return false;
  }
}

bool is_sticky_error(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

std::string cuda_text(cudaError_t err) {
  std::string text = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  if (is_sticky_error(err))
    text +=
        " (a sticky error: an earlier asynchronous launch may have failed, not this call; the "
        "CUDA context is unusable)";
  return text;
}

Status cuda_failure(const char* kernel, const char* call, cudaError_t err) {
  (void)cudaGetLastError();
  const bool no_device = is_no_device_error(err);
  std::string message = kernel;
  message += no_device ? ": no usable CUDA device: " : ": ";
  message += call;
  message += " failed: ";
  message += cuda_text(err);
  return Status::Error(no_device ? StatusCode::kNoDevice : StatusCode::kCudaError,
                       std::move(message));
}

cudaError_t zero_device_memory_now(void* ptr, size_t bytes) {
  cudaStream_t zeroing = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&zeroing, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaMemsetAsync(ptr, 0, bytes, zeroing);
  if (e == cudaSuccess) e = cudaStreamSynchronize(zeroing);
  if (zeroing != nullptr) (void)cudaStreamDestroy(zeroing);
  return e;
}

RelaxedCaptureMode::RelaxedCaptureMode() {
  exchanged_ = cudaThreadExchangeStreamCaptureMode(&previous_) == cudaSuccess;
  if (!exchanged_) (void)cudaGetLastError();  // no runtime: the calls that follow fail anyway
}

RelaxedCaptureMode::~RelaxedCaptureMode() {
  if (exchanged_) (void)cudaThreadExchangeStreamCaptureMode(&previous_);
}

}  // namespace pallas::detail

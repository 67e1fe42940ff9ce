// Run-time checks of device data (spec.check / pallas.check): turning a kernel's error record
// into a Status, and the per-device records of the CUDA backend.
//
// The record is 8 int32 (codegen/lib/Transforms/ErrorRecord.h):
//   [0] programs that failed a check, [1] check + 1 of the first, [2..7] its 3 values as
//   (low, high) halves. {2, 1, 5, 0, -3, -1, 1000, 0} with check 0 "operand 'labels' element
//   {0} is {1}, outside [0, {2})" reads "operand 'labels' element 5 is -3, outside [0, 1000)
//   (2 programs failed a check; the first is reported)".

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_status.h"
#include "pallas/detail/kernel_image.h"

namespace pallas::detail {
namespace {

constexpr int kRecordInts = 8;

const char* kernel_name(const KernelImage& image) {
  if (image.metadata && image.metadata->entry) return image.metadata->entry;
  return image.metadata && image.metadata->name ? image.metadata->name : image.symbol;
}

// Ok when no check failed, else the message of the first failure.
Status status_of(const KernelImage& image, const int32_t (&record)[kRecordInts]) {
  if (record[0] == 0) return Status::Ok();
  const std::string kernel = kernel_name(image);
  const int check = record[1] - 1;
  const auto& checks = image.metadata ? image.metadata->checks : std::span<const char* const>{};
  if (check < 0 || static_cast<size_t>(check) >= checks.size() || checks[check] == nullptr)
    return Status::Error(StatusCode::kInvalidArgument,
                         kernel + ": its error record names check " + std::to_string(check) +
                             ", which the kernel does not declare (a corrupted record)");
  int64_t values[3];
  for (int k = 0; k < 3; ++k)
    values[k] = static_cast<int64_t>(static_cast<uint32_t>(record[2 + 2 * k])) |
                (static_cast<int64_t>(record[3 + 2 * k]) << 32);
  std::string message = kernel + ": ";
  for (const char* c = checks[check]; *c != '\0'; ++c) {
    if (c[0] == '{' && c[1] >= '0' && c[1] <= '2' && c[2] == '}') {
      message += std::to_string(values[c[1] - '0']);
      c += 2;
      continue;
    }
    message += *c;
  }
  if (record[0] > 1)
    message +=
        " (" + std::to_string(record[0]) + " programs failed a check; the first is reported)";
  return Status::Error(StatusCode::kInvalidArgument, std::move(message));
}

struct DeviceRecord {
  const KernelImage* image;
  int device;
  void* data;  // 8 int32 of device memory
};

std::mutex records_mutex;
std::vector<DeviceRecord>& records() {
  static auto* all = new std::vector<DeviceRecord>();  // kept for the process
  return *all;
}

// Reads and clears the records of `device` (clearing on `stream`, synchronized, so that no
// later launch on any stream races the clear); the first failure.
Status take_records(int device, Stream stream) {
  std::lock_guard<std::mutex> lock(records_mutex);
  Status first = Status::Ok();
  for (const DeviceRecord& r : records()) {
    if (r.device != device) continue;
    int32_t record[kRecordInts];
    if (cudaError_t e = cudaMemcpy(record, r.data, sizeof record, cudaMemcpyDeviceToHost);
        e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status::Error(StatusCode::kCudaError,
                           std::string(kernel_name(*r.image)) +
                               ": reading its error record failed: " + cuda_text(e));
    }
    if (record[0] == 0) continue;
    cudaError_t e = cudaMemsetAsync(r.data, 0, sizeof record, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status::Error(StatusCode::kCudaError,
                           std::string(kernel_name(*r.image)) +
                               ": clearing its error record failed: " + cuda_text(e));
    }
    if (first.ok()) first = status_of(*r.image, record);
  }
  return first;
}

}  // namespace

Status device_error_record(const KernelImage& image, int device, void*& record) {
  std::lock_guard<std::mutex> lock(records_mutex);
  for (const DeviceRecord& r : records())
    if (r.image == &image && r.device == device) {
      record = r.data;
      return Status::Ok();
    }
  // Zeroed on a private stream, waited for at once: launches on any stream see it zero, and
  // the caller's stream is not synchronized. In RelaxedCaptureMode: a kernel's first launch may
  // be one being captured into a graph, whose replays then write failures here.
  RelaxedCaptureMode relaxed;
  void* data = nullptr;
  cudaError_t e = cudaMalloc(&data, kRecordInts * sizeof(int32_t));
  if (e == cudaSuccess) e = zero_device_memory_now(data, kRecordInts * sizeof(int32_t));
  if (e != cudaSuccess) {
    if (data != nullptr) (void)cudaFree(data);
    (void)cudaGetLastError();
    return Status::Error(
        StatusCode::kCudaError,
        std::string(kernel_name(image)) + ": allocating its error record failed: " + cuda_text(e));
  }
  records().push_back({&image, device, data});
  record = data;
  return Status::Ok();
}

Status report_checks(const KernelImage& image, const Launch& launch, const void* errors) {
  if (launch.backend != Backend::kCuda) {
    if (errors == nullptr) return Status::Ok();  // nothing ran (an empty grid)
    int32_t record[kRecordInts];
    std::memcpy(record, errors, sizeof record);
    return status_of(image, record);
  }
  if (!launch.check_device_errors) return Status::Ok();
  return take_device_errors(launch.stream);
}

}  // namespace pallas::detail

namespace pallas {

Status take_device_errors(Stream stream) {
  int device = 0;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Error(StatusCode::kNoDevice,
                         "take_device_errors: no usable CUDA device: " + detail::cuda_text(e));
  }
  // Synchronizing a stream that is capturing a graph fails and invalidates the capture.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaError_t e = cudaStreamIsCapturing(stream, &capture); e != cudaSuccess) {
    (void)cudaGetLastError();
    if (e == cudaErrorStreamCaptureImplicit)  // the legacy stream, a blocking one capturing
      return Status::Error(StatusCode::kInvalidArgument,
                           "take_device_errors: the legacy default stream cannot be synchronized "
                           "while a blocking stream is capturing a CUDA graph; call it once the "
                           "capture has ended");
    return Status::Error(
        StatusCode::kCudaError,
        "take_device_errors: cudaStreamIsCapturing failed: " + detail::cuda_text(e));
  }
  if (capture != cudaStreamCaptureStatusNone)
    return Status::Error(StatusCode::kInvalidArgument,
                         "take_device_errors: the stream is capturing a CUDA graph, and "
                         "synchronizing it would break the capture; call it once the graph "
                         "has run");
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Error(
        StatusCode::kCudaError,
        "take_device_errors: cudaStreamSynchronize failed: " + detail::cuda_text(e));
  }
  return detail::take_records(device, stream);
}

}  // namespace pallas

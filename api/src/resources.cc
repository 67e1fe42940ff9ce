// pallas::detail::acquire_resources: semaphore and workspace memory per launch,
// from a per-device pool on the CUDA backend (see kernel_image.h).

#include "cuda_status.h"
#include "pallas/detail/kernel_image.h"

#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

namespace pallas::detail {

namespace {

struct Region {
  int device = 0;
  void* ptr = nullptr;
  uint64_t bytes = 0;
  bool semaphores = false;
  bool busy = false;
  cudaEvent_t done = nullptr;  // recorded after the last launch that used it
};

std::mutex pool_mutex;
std::vector<std::unique_ptr<Region>>& pool() {
  static auto* regions = new std::vector<std::unique_ptr<Region>>();  // kept for the process
  return *regions;
}

/// A free region of the pool with room for `bytes`, or a new one. A new
/// semaphore region is zeroed on `stream`, ahead of the launch that takes it:
/// cudaMemset would run on the legacy default stream, which a non-blocking
/// stream does not wait for.
Status take_region(int device, uint64_t bytes, bool semaphores, Stream stream, const char* kernel,
                   Region*& out) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  for (auto& r : pool()) {
    if (r->device != device || r->semaphores != semaphores || r->busy || r->bytes < bytes) continue;
    if (r->done && cudaEventQuery(r->done) != cudaSuccess) continue;  // still in flight
    r->busy = true;
    out = r.get();
    return Status::Ok();
  }
  auto r = std::make_unique<Region>();
  r->device = device;
  r->semaphores = semaphores;
  r->bytes = (bytes + 255) / 256 * 256;
  if (cudaError_t e = cudaMalloc(&r->ptr, r->bytes); e != cudaSuccess) {
    const std::string call =
        "cudaMalloc of " + std::to_string(r->bytes) + " bytes for semaphores/workspace";
    Status s = cuda_failure(kernel, call.c_str(), e);
    return e == cudaErrorMemoryAllocation ? Status::Error(StatusCode::kOutOfMemory, s.message())
                                          : s;
  }
  if (semaphores)
    if (cudaError_t e = cudaMemsetAsync(r->ptr, 0, r->bytes, stream); e != cudaSuccess) {
      Status s = cuda_failure(kernel, "cudaMemsetAsync (zeroing semaphores)", e);
      (void)cudaFree(r->ptr);
      (void)cudaGetLastError();
      return s;
    }
  r->busy = true;
  out = r.get();
  pool().push_back(std::move(r));
  return Status::Ok();
}

}  // namespace

LaunchResources::~LaunchResources() {
  // A region is free for another launch once this stream has passed its event. Where the
  // event cannot be recorded, once this stream has drained: that synchronization runs without
  // the pool's lock (other threads take other regions meanwhile; these stay busy), and if the
  // stream failed they stay busy for good (leaked, never shared).
  std::vector<Region*> unrecorded;
  {
    std::lock_guard<std::mutex> lock(pool_mutex);
    for (Item& item : items_) {
      auto* r = static_cast<Region*>(item.pool_region);
      if (!r) continue;
      bool recorded = r->done != nullptr ||
                      cudaEventCreateWithFlags(&r->done, cudaEventDisableTiming) == cudaSuccess;
      if (recorded) recorded = cudaEventRecord(r->done, stream_) == cudaSuccess;
      if (recorded) {
        r->busy = false;
        continue;
      }
      (void)cudaGetLastError();
      unrecorded.push_back(r);
    }
  }
  if (unrecorded.empty()) return;
  const bool drained = cudaStreamSynchronize(stream_) == cudaSuccess;
  (void)cudaGetLastError();
  if (!drained) return;
  std::lock_guard<std::mutex> lock(pool_mutex);
  for (Region* r : unrecorded) {
    if (r->done) (void)cudaEventDestroy(r->done);  // it marks an older launch
    (void)cudaGetLastError();
    r->done = nullptr;
    r->busy = false;
  }
}

Status acquire_resources(const KernelImage& image, const Launch& launch,
                         std::span<const ResourceRequest> requests, LaunchResources& out) {
  const char* name = image.metadata ? image.metadata->name : image.symbol;
  out.stream_ = launch.stream;
  for (const ResourceRequest& req : requests) {
    LaunchResources::Item item;
    if (req.bytes == 0) {
      out.items_.push_back(std::move(item));
      continue;
    }
    if (launch.backend != Backend::kCuda) {  // zeroed heap memory, 16-byte aligned
      // A size no allocator can serve (or one that would wrap) fails like one that it cannot.
      if (req.bytes < (uint64_t{1} << 48))
        item.host.reset(new (std::nothrow) std::byte[req.bytes + 16]);
      if (!item.host)
        return Status::Error(StatusCode::kOutOfMemory,
                             std::string(name) + ": allocating " + std::to_string(req.bytes) +
                                 " bytes of launch memory (workspace, semaphores) failed");
      auto addr = reinterpret_cast<uintptr_t>(item.host.get());
      item.data = reinterpret_cast<void*>((addr + 15) / 16 * 16);
      std::fill(item.host.get(), item.host.get() + req.bytes + 16, std::byte{0});
      out.items_.push_back(std::move(item));
      continue;
    }
    int device = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
      cudaGetLastError();
      return Status::Error(StatusCode::kNoDevice,
                           std::string(name) + ": no usable CUDA device: " + cuda_text(e));
    }
    if (req.kind == ResourceKind::kErrors) {  // one record per kernel and device, kept
      if (Status s = device_error_record(image, device, item.data); !s.ok()) return s;
      out.items_.push_back(std::move(item));
      continue;
    }
    const bool semaphores = req.kind == ResourceKind::kSemaphores;
    Region* region = nullptr;
    if (Status s = take_region(device, req.bytes, semaphores, launch.stream, name, region); !s.ok())
      return s;
    item.data = region->ptr;
    item.pool_region = region;
    out.items_.push_back(std::move(item));
  }
  return Status::Ok();
}

}  // namespace pallas::detail

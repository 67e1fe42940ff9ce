// pallas::detail::acquire_resources: semaphore and workspace memory per launch,
// from a per-device pool on the CUDA backend (see kernel_image.h).

#include "cuda_status.h"
#include "pallas/detail/kernel_image.h"

#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <vector>

namespace pallas::detail {

namespace {

// The pool's regions are handed out under one lock. A region used by a launch on stream S is
// free again:
//  - at once for S's next launch: a stream runs its work in order, so that launch touches
//    memory only after the one that used the region has completed (and left its semaphores at
//    zero; with programmatic dependent launch it may start earlier, but waits at its entry);
//  - for any other stream once S has passed the fence recorded after the launch.
// Streams are told apart by cudaStreamGetId, unique for the life of the process: a stream
// destroyed and another created at the same address, or two threads' cudaStreamPerThread,
// are different streams. Worked example, one stream queueing 100 split-K matmuls (a workspace
// and a semaphore region each) without waiting: launch 0 allocates two regions; launches
// 1..99 take the same two again, with no event queried and no allocation, so the pool stays
// at two regions however deep the queue (when every stream waited on events instead, each
// launch found the earlier regions in flight and allocated two more).
//
// A launch captured into a CUDA graph runs whenever the graph is replayed, on whatever stream,
// with the addresses it was captured with. Its regions therefore belong to the graph: taken
// only among regions no launch is using (never by the same-stream rule: the graph may replay
// on another stream while this one still runs), or newly allocated and zeroed at once, and
// kept out of the pool (Region::graph_owned) until CUDA destroys the graph's user object,
// which it does once the graph and every instantiation of it are destroyed and their last
// replays have finished (CUDA C++ Programming Guide, "User Objects"). Nothing is added to the
// graph: no allocation, memset or event node, so a replay runs the kernels alone, and the
// graph has none of the limits of graphs with memory nodes. Its copies (instantiations,
// clones, child-graph nodes) share its regions as they share its operands: like two launches
// writing one output, two copies must not run at the same time. Worked example: a decoder
// layer captured once, with two split-K matmuls, holds four regions for the life of its
// graph; eager calls meanwhile take others.

// An event recorded on a stream after a launch, shared by the regions that launch held: one
// cudaEventRecord per launch whatever its number of regions. Its event goes back to
// its device's free_events when no region refers to it any more (always under pool_mutex).
// An event belongs to the device current at its creation: recorded on another device's stream
// it fails, so each device keeps its own free events.
struct Fence {
  cudaEvent_t event = nullptr;
  int device = 0;
  ~Fence();
};

struct Region {
  int device = 0;
  void* ptr = nullptr;
  uint64_t bytes = 0;
  bool semaphores = false;
  bool busy = false;
  unsigned long long stream_id = 0;  // the stream of its last launch; 0: none or unknown
  std::shared_ptr<Fence> done;       // recorded after that launch
  // Held by a captured graph: set while the capturing launch holds the region (busy), cleared
  // without the lock by the graph's user object's destructor on CUDA's internal thread.
  std::atomic<bool> graph_owned{false};
};

std::mutex pool_mutex;
std::vector<std::unique_ptr<Region>>& pool() {
  static auto* regions = new std::vector<std::unique_ptr<Region>>();  // kept for the process
  return *regions;
}
std::vector<cudaEvent_t>& free_events(int device) {
  static auto* events = new std::map<int, std::vector<cudaEvent_t>>();  // kept for the process
  return (*events)[device];
}

Fence::~Fence() {
  if (event) free_events(device).push_back(event);
}

// A fence for a launch on `stream` of `device` (the current device): an event from that
// device's free_events (or a new one) recorded there; null when the event cannot be created
// or recorded.
std::shared_ptr<Fence> record_fence(Stream stream, int device) {
  auto fence = std::make_shared<Fence>();
  fence->device = device;
  std::vector<cudaEvent_t>& free = free_events(device);
  if (!free.empty()) {
    fence->event = free.back();
    free.pop_back();
  } else if (RelaxedCaptureMode relaxed;  // "unsafe" while another stream captures
             cudaEventCreateWithFlags(&fence->event, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    fence->event = nullptr;
    return nullptr;
  }
  if (cudaEventRecord(fence->event, stream) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;  // its event goes back to the free events, unrecorded
  }
  return fence;
}

// The stream's process-wide id, or 0 (no same-stream reuse) when CUDA cannot say. Never
// asked of a capturing stream (it would invalidate the capture, see acquire_resources); asked
// in relaxed mode, since another stream may be capturing in the global mode.
unsigned long long stream_id_of(Stream stream) {
  unsigned long long id = 0;
  RelaxedCaptureMode relaxed;
  if (cudaStreamGetId(stream, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return id;
}

bool fits(const Region& r, int device, uint64_t bytes, bool semaphores) {
  return r.device == device && r.semaphores == semaphores && !r.busy && r.bytes >= bytes &&
         !r.graph_owned.load(std::memory_order_acquire);
}

/// A free region of the pool with room for `bytes` (the stream's own first, then one whose
/// fence has passed), or a new one. A new semaphore region is zeroed on `stream`, ahead of
/// the launch that takes it: cudaMemset would run on the legacy default stream, which a
/// non-blocking stream does not wait for. For a launch being captured (`captured`), no region
/// of the stream's in-flight launches, and a new one is zeroed at once on a private stream:
/// the graph's replays find it zero, and nothing is captured.
Status take_region(int device, uint64_t bytes, bool semaphores, Stream stream,
                   unsigned long long stream_id, bool captured, const char* kernel, Region*& out) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  Region* found = nullptr;
  if (stream_id != 0 && !captured)
    for (auto& r : pool())
      if (fits(*r, device, bytes, semaphores) && r->stream_id == stream_id) {
        found = r.get();
        break;
      }
  // Querying events and allocating are "unsafe" calls while a capture in the global mode is
  // under way (here or on any thread), yet no part of what is captured.
  std::optional<RelaxedCaptureMode> relaxed;
  if (!found) relaxed.emplace();
  if (!found)
    for (auto& r : pool()) {
      if (!fits(*r, device, bytes, semaphores)) continue;
      if (r->done && cudaEventQuery(r->done->event) != cudaSuccess) {
        (void)cudaGetLastError();  // cudaErrorNotReady: still in flight
        continue;
      }
      found = r.get();
      break;
    }
  if (found) {
    found->busy = true;
    found->done.reset();
    out = found;
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
    if (cudaError_t e = captured ? zero_device_memory_now(r->ptr, r->bytes)
                                 : cudaMemsetAsync(r->ptr, 0, r->bytes, stream);
        e != cudaSuccess) {
      Status s = cuda_failure(kernel,
                              captured ? "zeroing semaphores on a private stream"
                                       : "cudaMemsetAsync (zeroing semaphores)",
                              e);
      (void)cudaFree(r->ptr);
      (void)cudaGetLastError();
      return s;
    }
  r->busy = true;
  out = r.get();
  pool().push_back(std::move(r));
  return Status::Ok();
}

// The regions of one captured launch, owned by a CUDA user object that the graph holds.
struct GraphRegions {
  std::vector<Region*> regions;
};

// The user object's destructor, on CUDA's internal thread once the graph, its instantiations
// and their replays are gone: the regions go back to the pool. It must not call CUDA, and
// does not take pool_mutex (a thread holding it may be inside a CUDA call).
void release_graph_regions(void* owner) {
  std::unique_ptr<GraphRegions> owned(static_cast<GraphRegions*>(owner));
  for (Region* r : owned->regions) r->graph_owned.store(false, std::memory_order_release);
}

/// Hands `regions` to `graph`, the graph being captured, through a user object that it
/// holds: no other launch takes them until CUDA destroys that object.
Status give_to_graph(cudaGraph_t graph, const std::vector<Region*>& regions, const char* kernel) {
  auto owned = std::make_unique<GraphRegions>(GraphRegions{regions});
  for (Region* r : regions) r->graph_owned.store(true, std::memory_order_release);
  cudaUserObject_t object = nullptr;
  if (cudaError_t e = cudaUserObjectCreate(&object, owned.get(), release_graph_regions, 1,
                                           cudaUserObjectNoDestructorSync);
      e != cudaSuccess) {
    for (Region* r : regions) r->graph_owned.store(false, std::memory_order_release);
    return cuda_failure(kernel, "cudaUserObjectCreate (the captured graph's workspace)", e);
  }
  owned.release();  // the user object's now: release_graph_regions deletes it
  if (cudaError_t e = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove);
      e != cudaSuccess) {
    Status s =
        cuda_failure(kernel, "cudaGraphRetainUserObject (the captured graph's workspace)", e);
    (void)cudaUserObjectRelease(object, 1);  // its destructor frees the regions again
    (void)cudaGetLastError();
    return s;
  }
  return Status::Ok();
}

}  // namespace

size_t pooled_regions(int device) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  size_t n = 0;
  for (auto& r : pool()) n += r->device == device;
  return n;
}

size_t graph_owned_regions(int device) {
  std::lock_guard<std::mutex> lock(pool_mutex);
  size_t n = 0;
  for (auto& r : pool()) n += r->device == device && r->graph_owned.load(std::memory_order_acquire);
  return n;
}

LaunchResources::~LaunchResources() {
  // The regions are free for this stream's next launch at once, for other streams once the
  // stream has passed the fence. Where no fence can be recorded, once this stream has drained:
  // that synchronization runs without the pool's lock (other threads take other regions
  // meanwhile; these stay busy), and if the stream failed they stay busy for good (leaked,
  // never shared).
  std::vector<Region*> regions;
  for (Item& item : items_)
    if (item.pool_region) regions.push_back(static_cast<Region*>(item.pool_region));
  if (regions.empty()) return;
  if (captured_) {  // the graph's now (graph_owned), or unused if handing them over failed
    std::lock_guard<std::mutex> lock(pool_mutex);
    for (Region* r : regions) {
      r->done.reset();
      r->stream_id = 0;
      r->busy = false;
    }
    return;
  }
  {
    std::lock_guard<std::mutex> lock(pool_mutex);
    if (std::shared_ptr<Fence> fence = record_fence(stream_, device_)) {
      for (Region* r : regions) {
        r->done = fence;
        r->stream_id = stream_id_;
        r->busy = false;
      }
      return;
    }
  }
  RelaxedCaptureMode relaxed;  // another stream may be capturing in the global mode
  const bool drained = cudaStreamSynchronize(stream_) == cudaSuccess;
  (void)cudaGetLastError();
  if (!drained) return;
  std::lock_guard<std::mutex> lock(pool_mutex);
  for (Region* r : regions) {
    r->done.reset();
    r->stream_id = 0;
    r->busy = false;
  }
}

Status acquire_resources(const KernelImage& image, const Launch& launch,
                         std::span<const ResourceRequest> requests, LaunchResources& out) {
  const char* name = image.metadata ? image.metadata->name : image.symbol;
  out.stream_ = launch.stream;
  bool stream_known = false;
  std::vector<Region*> graph_regions;  // taken for the graph being captured, if any
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
    if (!stream_known) {
      out.device_ = device;
      // The capture status first: cudaStreamGetId on a stream capturing in the global mode
      // fails (cudaErrorStreamCaptureUnsupported) and invalidates the capture (seen on an
      // H200, driver 580, CUDA 13.0). A captured launch needs no stream id: it never takes
      // its stream's in-flight regions (take_region).
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      if (cudaError_t e = cudaStreamGetCaptureInfo(launch.stream, &capture); e != cudaSuccess)
        return cuda_failure(name, "cudaStreamGetCaptureInfo", e);
      if (capture == cudaStreamCaptureStatusInvalidated)
        return Status::Error(StatusCode::kCudaError,
                             std::string(name) +
                                 ": the stream's graph capture has been invalidated by an "
                                 "earlier call; end it (cudaStreamEndCapture) and capture again");
      out.captured_ = capture == cudaStreamCaptureStatusActive;
      if (!out.captured_) out.stream_id_ = stream_id_of(launch.stream);
      stream_known = true;
    }
    if (req.kind == ResourceKind::kErrors) {  // one record per kernel and device, kept
      if (launch.check_device_errors && out.captured_)
        return Status::Error(StatusCode::kInvalidArgument,
                             std::string(name) +
                                 ": Launch::check_device_errors synchronizes the stream, which "
                                 "is capturing a CUDA graph; capture without it and call "
                                 "take_device_errors after a replay");
      if (Status s = device_error_record(image, device, item.data); !s.ok()) return s;
      out.items_.push_back(std::move(item));
      continue;
    }
    const bool semaphores = req.kind == ResourceKind::kSemaphores;
    Region* region = nullptr;
    if (Status s = take_region(device, req.bytes, semaphores, launch.stream, out.stream_id_,
                               out.captured_, name, region);
        !s.ok())
      return s;
    item.data = region->ptr;
    item.pool_region = region;
    out.items_.push_back(std::move(item));
    if (out.captured_) graph_regions.push_back(region);
  }
  if (graph_regions.empty()) return Status::Ok();
  // The graph, asked for now: an error elsewhere (another thread's forbidden call) may have
  // invalidated the capture since its status was read.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  cudaGraph_t capture_graph = nullptr;
  if (cudaError_t e = cudaStreamGetCaptureInfo(launch.stream, &capture, nullptr, &capture_graph);
      e != cudaSuccess)
    return cuda_failure(name, "cudaStreamGetCaptureInfo", e);
  if (capture != cudaStreamCaptureStatusActive)
    return Status::Error(StatusCode::kCudaError,
                         std::string(name) +
                             ": the stream's graph capture ended or was invalidated while its "
                             "workspace was being allocated");
  return give_to_graph(capture_graph, graph_regions, name);
}

}  // namespace pallas::detail

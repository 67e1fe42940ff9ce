// pallas::detail::launch_kernel: cubin selection, lazy loading and launch on the CUDA runtime.
#include "pallas/launch.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_status.h"
#include "pallas/detail/kernel_image.h"
#include "pallas/emulator/simt.h"

static_assert(std::is_same_v<pallas::Stream, cudaStream_t>,
              "pallas::Stream must be the same type as cudaStream_t");

namespace pallas {

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kCuda:
      return "cuda";
    case Backend::kHost:
      return "host";
    case Backend::kEmulator:
      return "emulator";
  }
  return "unknown backend";
}

bool cuda_device_available() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // the answer is `false`; leave no error behind for the caller
    return false;
  }
  return count > 0;
}

}  // namespace pallas

namespace pallas::detail {
namespace {

constexpr int64_t kMaxGridX = 2147483647;  // 2^31 - 1
constexpr int64_t kMaxGridYZ = 65535;
constexpr int kDefaultDynamicSharedBytes = 48 * 1024;

const char* kernel_name(const KernelImage& image) {
  // What the user called (a variant's or a TMA kernel's twin's entry point), else the instance.
  if (image.metadata != nullptr && image.metadata->entry != nullptr) return image.metadata->entry;
  if (image.metadata != nullptr && image.metadata->name != nullptr) return image.metadata->name;
  return image.symbol != nullptr ? image.symbol : "<unnamed kernel>";
}

std::string arch_name(int sm, bool arch_specific) {
  return "sm_" + std::to_string(sm) + (arch_specific ? "a" : "");
}

struct DeviceInfo {
  bool known = false;
  int sm = 0;                // 10 * major + minor
  int max_shared_optin = 0;  // bytes of shared memory per block with opt-in
  int sms = 0;               // multiprocessors
};

struct LoadedKernel {
  cudaKernel_t kernel = nullptr;
  int shared_bytes_raised = kDefaultDynamicSharedBytes;  // on this device
  int resident_per_sm = 0;  // a persistent grid's programs per SM (0: not asked yet)
  // Clusters of c CTAs resident at once (cudaOccupancyMaxActiveClusters), by c (2..8): -1
  // not asked yet, 0 none fit (launch without clusters).
  std::array<int, 9> resident_clusters = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
  // Whether a launch that asked for clusters of c and ran without them was logged (once).
  std::array<bool, 9> logged_without_clusters{};
  cudaError_t cluster_query_error = cudaSuccess;  // why none fit, when the query failed
};

// Process-lifetime cache of devices, libraries and kernels. Never destroyed: the handles stay
// valid until exit and no static destructor races a launch from another thread.
struct LoadCache {
  std::mutex mutex;
  std::vector<DeviceInfo> devices;
  std::map<const unsigned char*, cudaLibrary_t> libraries;  // by cubin data
  // by (cubin data, symbol, device)
  std::map<std::tuple<const unsigned char*, const void*, int>, LoadedKernel> kernels;
};

LoadCache& load_cache() {
  static LoadCache* cache = new LoadCache;
  return *cache;
}

std::string device_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return "device " + std::to_string(device);
  }
  return prop.name;
}

Status device_info(LoadCache& cache, const char* kernel, int device, DeviceInfo& info) {
  if (device < 0) {
    return Status::Error(
        StatusCode::kCudaError,
        std::string(kernel) + ": cudaGetDevice returned device " + std::to_string(device));
  }
  const auto index = static_cast<size_t>(device);
  if (index >= cache.devices.size()) cache.devices.resize(index + 1);
  DeviceInfo& cached = cache.devices[index];
  if (!cached.known) {
    int major = 0, minor = 0, optin = 0, sms = 0;
    cudaError_t err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device);
    }
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    }
    if (err == cudaSuccess) {
      err = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    if (err != cudaSuccess) return cuda_failure(kernel, "cudaDeviceGetAttribute", err);
    cached = DeviceInfo{true, 10 * major + minor, optin, sms};
  }
  info = cached;
  return Status::Ok();
}

Status no_binary(const KernelImage& image, int device, int sm) {
  std::string targets;
  for (const Cubin& cubin : image.cubins) {
    if (!targets.empty()) targets += ", ";
    targets += arch_name(cubin.sm, cubin.arch_specific);
  }
  if (targets.empty()) targets = "none";
  return Status::Error(StatusCode::kNoBinaryForArch,
                       std::string(kernel_name(image)) + ": no binary for " + device_name(device) +
                           " (" + arch_name(sm, false) + "); built targets: " + targets);
}

// Loads (once) the kernel of `cubin` for `device` and raises its dynamic shared memory limit
// when this image needs more than has been raised so far. Called with the cache locked. The
// one-time calls here and in the occupancy queries below run in RelaxedCaptureMode: a first
// call of an op under graph capture loads its kernel without breaking the capture.
Status load_kernel(LoadCache& cache, const KernelImage& image, const Cubin& cubin, int device,
                   const DeviceInfo& info, cudaKernel_t& kernel) {
  const char* name = kernel_name(image);
  LoadedKernel& loaded = cache.kernels[{cubin.data, image.symbol, device}];
  if (loaded.kernel == nullptr) {
    RelaxedCaptureMode relaxed;
    auto [it, inserted] = cache.libraries.try_emplace(cubin.data, nullptr);
    if (inserted) {
      const cudaError_t err =
          cudaLibraryLoadData(&it->second, cubin.data, nullptr, nullptr, 0, nullptr, nullptr, 0);
      if (err != cudaSuccess) {
        cache.libraries.erase(it);
        return cuda_failure(name, "cudaLibraryLoadData", err);
      }
    }
    const cudaError_t err = cudaLibraryGetKernel(&loaded.kernel, it->second, image.symbol);
    if (err != cudaSuccess) {
      loaded.kernel = nullptr;
      return cuda_failure(name, "cudaLibraryGetKernel", err);
    }
    // Loaded on this device now (lazy loading would wait for its first launch, which may be
    // under capture, outside RelaxedCaptureMode).
    cudaFuncAttributes attributes{};
    if (const cudaError_t e =
            cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(loaded.kernel));
        e != cudaSuccess) {
      loaded.kernel = nullptr;
      return cuda_failure(name, "cudaFuncGetAttributes (loading the kernel)", e);
    }
  }
  if (image.dynamic_shared_bytes > loaded.shared_bytes_raised) {
    if (image.dynamic_shared_bytes > info.max_shared_optin) {
      return Status::Error(
          StatusCode::kNoBinaryForArch,
          std::string(name) + ": needs " + std::to_string(image.dynamic_shared_bytes) +
              " bytes of dynamic shared memory per program, but " + device_name(device) + " (" +
              arch_name(info.sm, false) + ") allows " + std::to_string(info.max_shared_optin));
    }
    RelaxedCaptureMode relaxed;
    const cudaError_t err =
        cudaKernelSetAttributeForDevice(loaded.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        image.dynamic_shared_bytes, device);
    if (err != cudaSuccess) return cuda_failure(name, "cudaKernelSetAttributeForDevice", err);
    loaded.shared_bytes_raised = image.dynamic_shared_bytes;
  }
  kernel = loaded.kernel;
  return Status::Ok();
}

// A persistent kernel's programs per SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor), asked
// once into `loaded`. Called with the cache locked.
Status resident_per_sm(const KernelImage& image, cudaKernel_t kernel, int threads, int device,
                       LoadedKernel& loaded) {
  if (loaded.resident_per_sm != 0) return Status::Ok();
  const char* name = kernel_name(image);
  RelaxedCaptureMode relaxed;
  int per_sm = 0;
  if (const cudaError_t err = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, reinterpret_cast<const void*>(kernel), threads,
          static_cast<size_t>(image.dynamic_shared_bytes));
      err != cudaSuccess) {
    return cuda_failure(name, "cudaOccupancyMaxActiveBlocksPerMultiprocessor", err);
  }
  if (per_sm < 1) {
    return Status::Error(StatusCode::kNoBinaryForArch,
                         std::string(name) + ": no program of " + std::to_string(threads) +
                             " threads and " + std::to_string(image.dynamic_shared_bytes) +
                             " bytes of dynamic shared memory fits an SM of " +
                             device_name(device));
  }
  loaded.resident_per_sm = per_sm;
  return Status::Ok();
}

// The device's info, the image's cubin for it and its kernel, loaded once. Called with the
// cache locked.
Status kernel_for_device(LoadCache& cache, const KernelImage& image, int device, DeviceInfo& info,
                         const Cubin*& cubin, cudaKernel_t& kernel) {
  if (Status s = device_info(cache, kernel_name(image), device, info); !s.ok()) return s;
  cubin = select_cubin(image.cubins, info.sm);
  if (cubin == nullptr) return no_binary(image, device, info.sm);
  return load_kernel(cache, image, *cubin, device, info, kernel);
}

// The most programs a persistent grid of `tiles` launches, however many are resident: one
// per tile, or three for a stream-K walk in thirds (KernelImage::programs_per_tile).
int64_t most_programs(const KernelImage& image, int64_t tiles) {
  return tiles * std::max(image.programs_per_tile, 1);
}

// The programs launch_cuda gives a persistent grid of `tiles` without clusters: one per
// resident CTA, at most most_programs.
Status cuda_persistent_programs(const KernelImage& image, int64_t tiles, int64_t& programs) {
  const char* name = kernel_name(image);
  int device = -1;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess)
    return cuda_failure(name, "cudaGetDevice", err);
  LoadCache& cache = load_cache();
  std::lock_guard<std::mutex> lock(cache.mutex);
  DeviceInfo info;
  const Cubin* cubin = nullptr;
  cudaKernel_t kernel = nullptr;
  if (Status s = kernel_for_device(cache, image, device, info, cubin, kernel); !s.ok()) return s;
  const int threads = cubin->threads > 0 && cubin->threads <= 1024 ? cubin->threads : image.threads;
  LoadedKernel& loaded = cache.kernels[{cubin->data, image.symbol, device}];
  if (Status s = resident_per_sm(image, kernel, threads, device, loaded); !s.ok()) return s;
  programs =
      std::min<int64_t>(most_programs(image, tiles), int64_t{loaded.resident_per_sm} * info.sms);
  return Status::Ok();
}

// How many clusters of `cluster` programs of `kernel` the device keeps resident at once
// (cudaOccupancyMaxActiveClusters), asked once per kernel, device and size: `clusters`, 0 when
// none fit or the query failed for a reason that leaves the context usable.
// `asked` (when given): whether this call asked the device (the first for this size).
Status resident_clusters(const KernelImage& image, cudaKernel_t kernel, int threads, int cluster,
                         LoadedKernel& loaded, int& clusters, bool* asked = nullptr) {
  int& known = loaded.resident_clusters[static_cast<size_t>(cluster)];
  if (asked) *asked = known < 0;
  if (known < 0) {
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeClusterDimension;
    attribute.val.clusterDim.x = static_cast<unsigned>(cluster);
    attribute.val.clusterDim.y = 1;
    attribute.val.clusterDim.z = 1;
    cudaLaunchConfig_t query{};
    query.gridDim = dim3(static_cast<unsigned>(cluster), 1, 1);
    query.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
    query.dynamicSmemBytes = static_cast<size_t>(image.dynamic_shared_bytes);
    query.attrs = &attribute;
    query.numAttrs = 1;
    int fit = 0;
    RelaxedCaptureMode relaxed;
    if (const cudaError_t err =
            cudaOccupancyMaxActiveClusters(&fit, reinterpret_cast<const void*>(kernel), &query);
        err != cudaSuccess) {
      if (is_sticky_error(err))
        return cuda_failure(kernel_name(image), "cudaOccupancyMaxActiveClusters", err);
      (void)cudaGetLastError();  // not sticky: the launch goes on without clusters
      fit = 0;
      loaded.cluster_query_error = err;
    }
    known = fit;
  }
  clusters = known;
  return Status::Ok();
}

// Once per kernel, device and cluster size (PALLAS_LOG_LAUNCH): a launch that asked for
// clusters runs without them, and why.
void log_without_clusters(const char* name, int cluster, int clusters, LoadedKernel& loaded,
                          int64_t programs) {
  if (!std::getenv("PALLAS_LOG_LAUNCH")) return;
  bool& logged = loaded.logged_without_clusters[static_cast<size_t>(cluster)];
  if (logged) return;
  logged = true;
  std::fprintf(
      stderr,
      "pallas: %s: launching without clusters (clusters of %d: %d resident%s%s, "
      "%lld programs)\n",
      name, cluster, clusters,
      loaded.cluster_query_error == cudaSuccess ? "" : "; cudaOccupancyMaxActiveClusters failed: ",
      loaded.cluster_query_error == cudaSuccess ? "" : cudaGetErrorName(loaded.cluster_query_error),
      static_cast<long long>(programs));
}

// `grid` becomes the grid launched (a persistent grid: its programs, not its tiles).
// `programmatic`: set when launched with programmatic stream serialization; `launched_cluster`
// to the programs per cluster launched (1: without clusters).
Status launch_cuda(const KernelImage& image, void** args, std::array<int64_t, 3>& grid,
                   const Launch& launch, int cluster, bool& programmatic, int& launched_cluster) {
  const Stream stream = launch.stream;
  const char* name = kernel_name(image);
  static constexpr const char* kAxisNames[3] = {"x", "y", "z"};
  for (size_t axis = 0; axis < 3; ++axis) {
    const int64_t limit = axis == 0 ? kMaxGridX : kMaxGridYZ;
    if (grid[axis] > limit) {
      return Status::Error(StatusCode::kInvalidArgument,
                           std::string(name) + ": grid axis " + std::to_string(axis) + " has " +
                               std::to_string(grid[axis]) + " programs; CUDA allows at most " +
                               std::to_string(limit) + " on axis " + std::to_string(axis) + " (" +
                               kAxisNames[axis] + ")");
    }
  }
  if (image.threads < 1 || image.threads > 1024) {
    return Status::Error(StatusCode::kInvalidArgument,
                         std::string(name) + ": " + std::to_string(image.threads) +
                             " threads per program; CUDA allows 1 to 1024");
  }
  if (image.dynamic_shared_bytes < 0) {
    return Status::Error(StatusCode::kInvalidArgument,
                         std::string(name) + ": negative dynamic shared memory size " +
                             std::to_string(image.dynamic_shared_bytes));
  }
  if (image.symbol == nullptr) {
    return Status::Error(StatusCode::kInvalidArgument,
                         std::string(name) + ": the kernel image has no entry symbol");
  }

  int device = -1;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) {
    return cuda_failure(name, "cudaGetDevice", err);
  }

  cudaKernel_t kernel = nullptr;
  int threads = image.threads;
  {
    LoadCache& cache = load_cache();
    std::lock_guard<std::mutex> lock(cache.mutex);
    DeviceInfo info;
    const Cubin* cubin = nullptr;
    if (Status s = kernel_for_device(cache, image, device, info, cubin, kernel); !s.ok()) return s;
    programmatic = launch.programmatic_dependent_launch && cubin->waits_for_prerequisite_grids &&
                   info.sm >= 90;
    if (cubin->threads < 0 || cubin->threads > 1024) {
      return Status::Error(StatusCode::kInvalidArgument,
                           std::string(name) + ": its " +
                               arch_name(cubin->sm, cubin->arch_specific) + " cubin has " +
                               std::to_string(cubin->threads) +
                               " threads per program; CUDA allows 1 to 1024");
    }
    if (cubin->threads != 0) threads = cubin->threads;  // e.g. no producer warpgroup on sm_80
    if (image.persistent) {  // one program per resident CTA, at most most_programs
      LoadedKernel& loaded = cache.kernels[{cubin->data, image.symbol, device}];
      if (Status s = resident_per_sm(image, kernel, threads, device, loaded); !s.ok()) return s;
      grid[0] = std::min<int64_t>(most_programs(image, grid[0]),
                                  int64_t{loaded.resident_per_sm} * info.sms);
      // Clusters need sm_90 (a form that reads %cluster_*: not the sm_80 cubin) and the
      // device's word on how many fit at once; else clusters of 1.
      if (cluster > 1 && (info.sm < 90 || cubin->sm < 90)) cluster = 1;
      int clusters = 0;
      bool asked = false;
      if (cluster > 1) {
        if (Status s = resident_clusters(image, kernel, threads, cluster, loaded, clusters, &asked);
            !s.ok())
          return s;
        // Once per kernel: whether clusters cost SMs (a GPC whose SMs do not pair up idles one).
        if (asked && std::getenv("PALLAS_LOG_LAUNCH"))
          std::fprintf(stderr,
                       "pallas: %s: clusters of %d: %d resident (%d programs), %d programs "
                       "without clusters (%d per SM x %d SMs)\n",
                       name, cluster, clusters, clusters * cluster,
                       loaded.resident_per_sm * info.sms, loaded.resident_per_sm, info.sms);
      }
      if (cluster > 1 && (clusters < 1 || grid[0] < cluster)) {
        log_without_clusters(name, cluster, clusters, loaded, grid[0]);
        cluster = 1;
      }
      if (cluster > 1) grid[0] = std::min<int64_t>(grid[0] / cluster, int64_t{clusters}) * cluster;
    } else if (cluster > 1) {
      // Clusters along x (KernelSpec::cluster_first_axis): every cluster of the grid resident at
      // once (the entry point sized the grid to one wave), else clusters of 1, which the kernel
      // handles too.
      LoadedKernel& loaded = cache.kernels[{cubin->data, image.symbol, device}];
      int clusters = 0;
      if (info.sm >= 90 && cubin->sm >= 90 && grid[0] % cluster == 0)
        if (Status s = resident_clusters(image, kernel, threads, cluster, loaded, clusters);
            !s.ok())
          return s;
      if (clusters < grid[0] / cluster * grid[1] * grid[2]) {
        log_without_clusters(name, cluster, clusters, loaded, grid[0] * grid[1] * grid[2]);
        cluster = 1;
      }
    }
  }
  launched_cluster = cluster;

  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>(grid[0]), static_cast<unsigned>(grid[1]),
                        static_cast<unsigned>(grid[2]));
  config.blockDim = dim3(static_cast<unsigned>(threads), 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(image.dynamic_shared_bytes);
  config.stream = stream;
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (cluster > 1) {
    cudaLaunchAttribute& a = attributes[count++];
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = static_cast<unsigned>(cluster);
    a.val.clusterDim.y = 1;
    a.val.clusterDim.z = 1;
  }
  if (programmatic) {  // the kernel waits for the one before it (griddepcontrol) itself
    cudaLaunchAttribute& a = attributes[count++];
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
  }
  config.attrs = count > 0 ? attributes : nullptr;
  config.numAttrs = count;
  if (const cudaError_t err =
          cudaLaunchKernelExC(&config, reinterpret_cast<const void*>(kernel), args);
      err != cudaSuccess) {
    return cuda_failure(name, "cudaLaunchKernelExC", err);
  }
  return Status::Ok();
}

}  // namespace

const Cubin* select_cubin(std::span<const Cubin> cubins, int device_sm) {
  const Cubin* best = nullptr;
  for (const Cubin& cubin : cubins) {
    if (cubin.arch_specific) {
      if (cubin.sm == device_sm) return &cubin;  // the exact match always wins
      continue;
    }
    const bool compatible = cubin.sm / 10 == device_sm / 10 && cubin.sm % 10 <= device_sm % 10;
    if (compatible && (best == nullptr || cubin.sm > best->sm)) best = &cubin;
  }
  return best;
}

namespace {

// The buffers of a launch for the emulator's bounds checks: each array operand's
// memref descriptor (allocated, aligned, offset, sizes[rank], strides[rank]) in
// `args`, in metadata order, spans the elements from its first to its last one.
// Worked example: a [3, 4] f32 view with row stride 6 spans (2*6 + 3*1 + 1) * 4 = 64 bytes.
std::vector<emulator::Buffer> launch_buffers(const KernelImage& image, void** args) {
  std::vector<emulator::Buffer> buffers;
  size_t k = 0;
  for (const OperandMetadata& op : image.metadata->operands) {
    if (op.role == OperandRole::kScalar) {
      ++k;
      continue;
    }
    const auto* aligned = *static_cast<char* const*>(args[k + 1]);
    const int64_t offset = *static_cast<const int64_t*>(args[k + 2]);
    int64_t last = 0;
    bool empty = false;
    for (int d = 0; d < op.rank; ++d) {
      const int64_t size = *static_cast<const int64_t*>(args[k + 3 + static_cast<size_t>(d)]);
      const int64_t stride =
          *static_cast<const int64_t*>(args[k + 3 + static_cast<size_t>(op.rank + d)]);
      empty |= size == 0;
      last += (size - 1) * stride;
    }
    const auto element = static_cast<int64_t>(size_of(op.dtype));
    buffers.push_back({op.name, aligned + offset * element,
                       empty ? 0 : static_cast<uint64_t>((last + 1) * element),
                       /*must_end_zero=*/op.role == OperandRole::kSemaphores});
    k += 3 + 2 * static_cast<size_t>(op.rank);
  }
  return buffers;
}

// The first semaphore wait of a host launch that could not be satisfied (see
// pallas_host_semaphore_stuck below); host launches run on the calling thread.
struct StuckWait {
  bool stuck = false;
  int32_t operand = 0;
  int64_t index = 0;
  int32_t want = 0;
  int32_t have = 0;
};
thread_local StuckWait t_stuck_wait;

Status launch_host(const KernelImage& image, void** args, std::array<int64_t, 3> grid) {
  t_stuck_wait = {};
  image.host_entry(args, grid[0], grid[1], grid[2]);
  if (!t_stuck_wait.stuck) return Status::Ok();
  const StuckWait w = t_stuck_wait;
  const char* name = kernel_name(image);
  // Appended, not "#" + std::to_string(...): GCC 12 warns (-Wrestrict, a false positive in
  // operator+(const char*, string&&)) on the prepend.
  std::string semaphores = "#";
  semaphores += std::to_string(w.operand);
  if (image.metadata && w.operand >= 0 &&
      static_cast<size_t>(w.operand) < image.metadata->operands.size())
    semaphores = image.metadata->operands[static_cast<size_t>(w.operand)].name;
  return Status::Error(
      StatusCode::kInvalidArgument,
      std::string(name) + ": a program waits for semaphore '" + semaphores + "'[" +
          std::to_string(w.index) + "] to reach " + std::to_string(w.want) + " but it is " +
          std::to_string(w.have) +
          "; the host backend runs programs one after another in grid order, so only earlier "
          "programs can signal it");
}

// `grid` becomes the grid launched, as launch_cuda's.
Status launch_emulated(const KernelImage& image, void** args, std::array<int64_t, 3>& grid,
                       const EmulatorOptions& options, int cluster, int& launched_cluster) {
  const char* name = image.metadata ? image.metadata->name : image.symbol;
  if (image.emulator_entry == nullptr || image.metadata == nullptr) {
    return Status::Error(StatusCode::kUnsupportedBackend,
                         std::string(name) + ": no emulator form was built for this kernel");
  }
  std::vector<emulator::Buffer> buffers = launch_buffers(image, args);
  emulator::LaunchConfig config;
  config.kernel = name;
  config.entry = image.emulator_entry;
  const int64_t* static_shared = image.emulator_shared_bytes;
  int threads = image.threads;
  if (options.compute_capability < 90 && image.emulator_cp_async_entry != nullptr) {
    config.entry = image.emulator_cp_async_entry;  // a staged kernel's sm_80 form
    static_shared = image.emulator_cp_async_shared_bytes;
    if (image.cp_async_threads != 0) threads = image.cp_async_threads;
  }
  if (options.compute_capability < 90) cluster = 1;  // an sm_8x device has no clusters
  if (image.persistent && cluster > 1) {  // whole clusters, as many as are resident at once
    const int64_t clusters = std::min<int64_t>(grid[0], options.concurrent_programs) / cluster;
    if (clusters < 1)
      cluster = 1;
    else
      grid[0] = clusters * cluster;
  }
  // Clusters along x (KernelSpec::cluster_first_axis): whole clusters resident at once.
  if (!image.persistent && (grid[0] % cluster != 0 || options.concurrent_programs < cluster))
    cluster = 1;
  launched_cluster = cluster;
  config.cluster = cluster;
  config.args = args;
  config.grid = grid;
  config.block = {threads, 1, 1};
  config.shared_bytes = (static_shared ? *static_shared : 0) + image.dynamic_shared_bytes;
  config.buffers = buffers;
  config.options.concurrent_ctas = options.concurrent_programs;
  config.options.schedule_seed = options.schedule_seed;
  std::string error;
  if (!emulator::launch(config, error))
    return Status::Error(StatusCode::kEmulatorCheckFailed, error);
  return Status::Ok();
}

/// launch_kernel's launch, its arguments checked: on the backend `launch` names. `grid`
/// becomes the grid launched (a persistent grid's x: the programs that walk its tiles);
/// `record` gets how it launched (programmatic, launched_cluster).
Status launch_on_backend(const KernelImage& image, void** args, std::array<int64_t, 3>& grid,
                         const Launch& launch, int cluster, const char* name,
                         LaunchRecord& record) {
  if (grid[0] == 0 || grid[1] == 0 || grid[2] == 0) return Status::Ok();
  // A persistent grid's programs walk its grid[0] tiles: as many as run at once (CUDA: the
  // device's count, in launch_cuda), so that each walks several on the emulator too.
  if (image.persistent && launch.backend == Backend::kHost) grid[0] = 1;
  if (image.persistent && launch.backend == Backend::kEmulator)
    grid[0] = std::min<int64_t>(most_programs(image, grid[0]), launch.emulator.concurrent_programs);

  switch (launch.backend) {
    case Backend::kHost:
      if (image.host_entry == nullptr) {
        return Status::Error(StatusCode::kUnsupportedBackend,
                             std::string(name) + ": no host form was built for this kernel");
      }
      return launch_host(image, args, grid);
    case Backend::kEmulator:
      return launch_emulated(image, args, grid, launch.emulator, cluster, record.launched_cluster);
    case Backend::kCuda:
      return launch_cuda(image, args, grid, launch, cluster, record.programmatic,
                         record.launched_cluster);
  }
  return Status::Error(
      StatusCode::kUnsupportedBackend,
      std::string(name) + ": unknown backend " + std::to_string(static_cast<int>(launch.backend)));
}

}  // namespace

Status persistent_programs(const KernelImage& image, int64_t tiles, const Launch& launch,
                           int64_t& programs) {
  programs = std::max<int64_t>(tiles, 0);
  if (tiles <= 0) return Status::Ok();  // nothing launches
  switch (launch.backend) {
    case Backend::kHost:
      programs = 1;
      return Status::Ok();
    case Backend::kEmulator:  // launch_kernel refuses fewer than 1
      programs = std::min<int64_t>(most_programs(image, tiles),
                                   std::max(launch.emulator.concurrent_programs, 1));
      return Status::Ok();
    case Backend::kCuda:
      return cuda_persistent_programs(image, tiles, programs);
  }
  return Status::Ok();  // launch_kernel names the unknown backend
}

Status launch_kernel(const KernelImage& image, void** args, std::array<int64_t, 3> grid,
                     const Launch& launch, int cluster) {
  const char* name = kernel_name(image);
  if (cluster < 1 || cluster > 8 || (image.persistent && (cluster & (cluster - 1)) != 0))
    return Status::Error(StatusCode::kInvalidArgument,
                         std::string(name) + ": clusters of " + std::to_string(cluster) +
                             " programs; 1 to 8 (CUDA's portable sizes), and for a persistent "
                             "grid 1, 2, 4 or 8 (sizes that halve to each other)");
  if (launch.max_cluster < 0)
    return Status::Error(StatusCode::kInvalidArgument, std::string(name) +
                                                           ": Launch::max_cluster is " +
                                                           std::to_string(launch.max_cluster) +
                                                           "; 0 (no limit) or a positive bound");
  if (launch.max_shared_bytes_per_block < 0)
    return Status::Error(StatusCode::kInvalidArgument,
                         std::string(name) + ": Launch::max_shared_bytes_per_block is " +
                             std::to_string(launch.max_shared_bytes_per_block) +
                             "; 0 (the device's) or a positive bound");
  // Halving keeps a size that divides what the entry point checked (the tile rows). A cluster
  // along all of x (KernelSpec::cluster_first_axis) is all of it or nothing.
  while (image.persistent && launch.max_cluster > 0 && cluster > launch.max_cluster) cluster /= 2;
  if (!image.persistent && launch.max_cluster > 0 && cluster > launch.max_cluster) cluster = 1;
  if (launch.backend == Backend::kEmulator) {  // options the emulator cannot stand for
    if (launch.emulator.concurrent_programs <= 0)
      return Status::Error(StatusCode::kInvalidArgument,
                           std::string(name) + ": Launch::emulator.concurrent_programs is " +
                               std::to_string(launch.emulator.concurrent_programs) +
                               "; at least 1 program must be resident");
    if (launch.emulator.compute_capability < 80 || launch.emulator.compute_capability > 129)
      return Status::Error(StatusCode::kInvalidArgument,
                           std::string(name) + ": Launch::emulator.compute_capability is " +
                               std::to_string(launch.emulator.compute_capability) +
                               "; the emulator stands for sm_80 to sm_12x (80 to 129)");
    if (launch.emulator.shared_bytes_per_block < 0)
      return Status::Error(StatusCode::kInvalidArgument,
                           std::string(name) + ": Launch::emulator.shared_bytes_per_block is " +
                               std::to_string(launch.emulator.shared_bytes_per_block) +
                               "; 0 (the compute capability's) or a positive size");
  }
  for (size_t axis = 0; axis < 3; ++axis) {
    if (grid[axis] < 0) {
      return Status::Error(StatusCode::kInvalidArgument,
                           std::string(name) + ": grid axis " + std::to_string(axis) +
                               " has negative extent " + std::to_string(grid[axis]));
    }
  }
  // What the call launched, for Launch::record once the launch succeeded.
  LaunchRecord record{image.metadata != nullptr && image.metadata->name != nullptr
                          ? image.metadata->name
                          : image.symbol,
                      grid, cluster, image.persistent};
  std::array<int64_t, 3> launched = grid;
  Status status = launch_on_backend(image, args, launched, launch, cluster, name, record);
  if (image.persistent && grid[0] > 0 && grid[1] > 0 && grid[2] > 0) record.programs = launched[0];
  if (status.ok() && launch.record != nullptr) *launch.record = record;
  return status;
}

}  // namespace pallas::detail

// Called by host kernels (convert-pallas-to-loops) when a semaphore wait cannot be satisfied:
// remembers the first such wait of the launch for launch_host's status.
extern "C" void pallas_host_semaphore_stuck(int32_t operand, int64_t index, int32_t want,
                                            int32_t have) {
  auto& w = pallas::detail::t_stuck_wait;
  if (!w.stuck) w = {true, operand, index, want, have};
}

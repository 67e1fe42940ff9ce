// TMA descriptors for kernels with blocks staged in shared memory: built at launch from the
// run-time shapes and strides, for the CUDA backend (CUtensorMap, through the driver entry
// point the runtime hands out) or the emulator (EmuTensorMap).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_status.h"
#include "pallas/detail/kernel_image.h"
#include "pallas/emulator/abi.h"

namespace pallas::detail {
namespace {

static_assert(sizeof(TmaDescriptor) == sizeof(CUtensorMap), "a TmaDescriptor is a CUtensorMap");
static_assert(alignof(TmaDescriptor) == alignof(CUtensorMap));

constexpr uint64_t kMaxExtent = uint64_t{1} << 32;

Status invalid(const char* kernel, const TmaOperand& op, const std::string& why) {
  return Status::Error(StatusCode::kInvalidArgument, std::string(kernel) + ": operand '" + op.name +
                                                         "' cannot be copied by TMA: " + why);
}

// A driver entry point of the given ABI version, or null with the reason in `error`.
void* driver_function(const char* name, unsigned version, cudaError_t& error) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  error = cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &found);
  if (error == cudaSuccess && found != cudaDriverEntryPointSuccess) error = cudaErrorSymbolNotFound;
  if (error != cudaSuccess) (void)cudaGetLastError();
  return error == cudaSuccess ? p : nullptr;
}

// The driver's cuTensorMapEncodeTiled, looked up once.
PFN_cuTensorMapEncodeTiled_v12000 encode_function(cudaError_t& error) {
  static cudaError_t lookup_error = cudaSuccess;
  static auto fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(
      driver_function("cuTensorMapEncodeTiled", 12000, lookup_error));
  error = lookup_error;
  return fn;
}

// The driver encodes in the calling thread's current context. A thread whose first CUDA call
// is this launch has none: make the device's primary context current there (cudaSetDevice
// does since CUDA 12, without synchronizing), but never replace a context the caller made
// current (a driver-API context the arrays may live in).
cudaError_t ensure_current_context() {
  static cudaError_t lookup_error = cudaSuccess;
  static auto get_current = reinterpret_cast<PFN_cuCtxGetCurrent_v4000>(
      driver_function("cuCtxGetCurrent", 4000, lookup_error));
  if (!get_current) return lookup_error;
  CUcontext current = nullptr;
  if (get_current(&current) == CUDA_SUCCESS && current != nullptr) return cudaSuccess;
  int device = 0;
  cudaError_t e = cudaGetDevice(&device);
  return e == cudaSuccess ? cudaSetDevice(device) : e;
}

// Descriptors of repeated launches, by everything that goes into one.
using CacheKey = std::tuple<const void*, int, int, int, std::vector<int64_t>>;
struct Cache {
  std::mutex mutex;
  std::map<CacheKey, TmaDescriptor> entries;
};
Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: no static destructor races a launch
  return *c;
}
constexpr size_t kMaxCached = 1024;
std::atomic<uint64_t> handed_out{0};

CacheKey key(const TmaOperand& op, Backend backend) {
  std::vector<int64_t> dims;
  for (int d = 0; d < op.rank; ++d) {
    dims.push_back(op.shape[d]);
    dims.push_back(op.strides[d]);
    dims.push_back(op.box[d]);
  }
  dims.push_back(static_cast<int64_t>(backend));
  dims.push_back(static_cast<int64_t>(op.element));
  return {op.data, op.element_bytes, op.swizzle, op.rank, std::move(dims)};
}

Status encode_cuda(const char* kernel, const TmaOperand& op, TmaDescriptor& out) {
  cudaError_t err = cudaSuccess;
  PFN_cuTensorMapEncodeTiled_v12000 encode = encode_function(err);
  if (encode == nullptr)
    return Status::Error(StatusCode::kCudaError,
                         std::string(kernel) +
                             ": cudaGetDriverEntryPointByVersion(cuTensorMapEncodeTiled) failed: " +
                             cudaGetErrorName(err));
  // TMA numbers dims innermost first.
  cuuint64_t dims[5], strides[4];
  cuuint32_t box[5], element_strides[5];
  for (int d = 0; d < op.rank; ++d) {
    const int from = op.rank - 1 - d;
    dims[d] = static_cast<cuuint64_t>(op.shape[from]);
    box[d] = static_cast<cuuint32_t>(op.box[from]);
    element_strides[d] = 1;
    if (d > 0) strides[d - 1] = static_cast<cuuint64_t>(op.strides[from] * op.element_bytes);
  }
  // A dim of extent 1 is never stepped along, so tma_rule_broken lets its stride be anything
  // (one row of 2050 floats: a row stride of 8200 bytes), but the driver wants every stride
  // a multiple of 16: give it the span of the dims inside, rounded up to 16 bytes.
  for (int d = 1; d < op.rank; ++d) {
    if (dims[d] != 1) continue;
    const cuuint64_t inside =
        d == 1 ? dims[0] * static_cast<cuuint64_t>(op.element_bytes) : strides[d - 2] * dims[d - 1];
    strides[d - 1] = (inside + 15) / 16 * 16;
  }
  // Copies move bits; a reduction (copy_smem_to_gmem with add) adds by this type.
  const CUtensorMapDataType type =
      op.element == TmaOperand::Element::kF32    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
      : op.element == TmaOperand::Element::kF16  ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
      : op.element == TmaOperand::Element::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                 : CU_TENSOR_MAP_DATA_TYPE_INT32;
  const CUtensorMapSwizzle swizzle = op.swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                     : op.swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                     : op.swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                        : CU_TENSOR_MAP_SWIZZLE_NONE;
  auto* map = reinterpret_cast<CUtensorMap*>(&out);
  const CUresult r =
      encode(map, type, static_cast<cuuint32_t>(op.rank), const_cast<void*>(op.data), dims, strides,
             box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
             CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    return invalid(kernel, op, "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(r));
  return Status::Ok();
}

void encode_emulator(const TmaOperand& op, TmaDescriptor& out) {
  emulator::EmuTensorMap map{};
  map.magic = emulator::kEmuTensorMapMagic;
  map.rank = static_cast<uint8_t>(op.rank);
  map.element_bytes = static_cast<uint8_t>(op.element_bytes);
  map.swizzle = static_cast<uint16_t>(op.swizzle);
  map.base = op.data;
  for (int d = 0; d < op.rank; ++d) {
    const int from = op.rank - 1 - d;
    map.dims[d] = static_cast<uint32_t>(op.shape[from]);
    map.box[d] = static_cast<uint16_t>(op.box[from]);
    if (d > 0) map.strides[d - 1] = static_cast<uint64_t>(op.strides[from] * op.element_bytes);
  }
  map.name = op.name;
  map.is_float = op.element != TmaOperand::Element::kI32;
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, &map, sizeof map);
}

int64_t emulated_shared_bytes(const EmulatorOptions& emulator) {
  if (emulator.shared_bytes_per_block > 0) return emulator.shared_bytes_per_block;
  const int cc = emulator.compute_capability;
  if (cc >= 120 || cc == 86 || cc == 89) return 99 * 1024;  // sm_86, sm_89, sm_12x
  if (cc >= 90) return 227 * 1024;                          // sm_90, sm_10x
  return 163 * 1024;                                        // sm_80, sm_87
}

int64_t backend_shared_bytes(const Launch& launch) {
  switch (launch.backend) {
    case Backend::kHost:
      return INT64_MAX;
    case Backend::kEmulator:
      return emulated_shared_bytes(launch.emulator);
    case Backend::kCuda:
      break;
  }
  int device = 0, shared = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    (void)cudaGetLastError();  // the launch that follows reports it
    return INT64_MAX;
  }
  return shared;
}

}  // namespace

int64_t device_shared_bytes(const Launch& launch) {
  const int64_t device = backend_shared_bytes(launch);
  return launch.max_shared_bytes_per_block > 0
             ? std::min<int64_t>(device, launch.max_shared_bytes_per_block)
             : device;
}

const char* tma_path_unavailable(const KernelImage& image, const Launch& launch) {
  switch (launch.backend) {
    case Backend::kHost:
      return "the host backend has no TMA";
    case Backend::kEmulator: {
      // The plan plus the form's static shared memory, as launch_kernel gives a program.
      const bool tma = launch.emulator.compute_capability >= 90;
      const int64_t* static_bytes =
          tma ? image.emulator_shared_bytes : image.emulator_cp_async_shared_bytes;
      if (image.dynamic_shared_bytes + (static_bytes ? *static_bytes : 0) >
          emulated_shared_bytes(launch.emulator))
        return "the staged plan needs more shared memory per block than the GPU has";
      if ((tma ? image.emulator_entry : image.emulator_cp_async_entry) == nullptr)
        return "no emulator form of the staged instance was built";
      return nullptr;
    }
    case Backend::kCuda:
      break;
  }
  int device = 0, major = 0, minor = 0, shared = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&shared, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    (void)cudaGetLastError();  // the direct instance's launch reports the error
    return "the device could not be queried";
  }
  if (select_cubin(image.cubins, 10 * major + minor) == nullptr)
    return "no staged cubin for the device's architecture";
  // A device with less shared memory than the staged instance's plan (sm_86 / sm_89:
  // 99 KiB against a 193 KiB matmul pipeline) runs the direct instance instead.
  if (image.dynamic_shared_bytes > shared)
    return "the staged plan needs more shared memory per block than the GPU has";
  return nullptr;
}

const char* tma_rule_broken(const TmaOperand& op) {
  if (reinterpret_cast<uintptr_t>(op.data) % 16 != 0) return "its data is not 16-byte aligned";
  for (int d = 0; d < op.rank; ++d) {
    if (op.shape[d] <= 0 || static_cast<uint64_t>(op.shape[d]) >= kMaxExtent)
      return "an extent is 0 or not below 2^32";
    if (d + 1 < op.rank && op.shape[d] > 1 && (op.strides[d] * op.element_bytes) % 16 != 0)
      return "a stride is not a multiple of 16 bytes";
    if (d + 1 < op.rank && op.shape[d] > 1 &&
        static_cast<uint64_t>(op.strides[d] * op.element_bytes) >= (uint64_t{1} << 40))
      return "a stride is 2^40 bytes or more";
  }
  // A TMA store (or reduction) writes whole 16-byte pieces of a row: where a row ends inside
  // one, the bytes after it (the padding up to the next row, or past the array) are written
  // too. Worked example, seen on an H200: out [70, 161] f32 with row stride 164 ends each row
  // at byte 644, inside the piece 640..655, and the store wrote columns 161..163.
  if (op.written && op.rank > 0 && (op.shape[op.rank - 1] * op.element_bytes) % 16 != 0)
    return "it is written and its rows are not a multiple of 16 bytes (a TMA store writes the "
           "16-byte piece that ends a row whole)";
  // A tensor map's dims do not overlap: each stride steps past the dims inside it (cuda.h's
  // model is stride[i] = stride[i - 1] * (extent[i] + padding[i]); the strides need not grow
  // in dim order, only each be a multiple of 16 bytes below 2^40). A broadcast input
  // (stride 0) or one whose dims overlap is read by the direct twin. Worked example: a
  // [4, 64, 64] batch of B with batch stride 0 steps 0 elements past the 64 * 64 inside.
  int64_t span = op.rank > 0 ? op.shape[op.rank - 1] : 0;
  for (int d = op.rank - 2; d >= 0; --d) {
    if (op.shape[d] == 1) continue;
    if (op.strides[d] < span) {
      // Dims in another order that do not overlap are a tensor map too (FlashAttention-3's
      // Q of [seq, d, heads, batch] over [batch, seq, heads, d] memory).
      if (dims_disjoint_by_stride(op.rank, op.shape, op.strides)) return nullptr;
      return "a stride overlaps the dims inside it (a broadcast view)";
    }
    int64_t extent = 0;
    if (__builtin_mul_overflow(op.shape[d] - 1, op.strides[d], &extent) ||
        __builtin_add_overflow(span, extent, &span))
      return "the dims span more than 2^63 elements";
  }
  return nullptr;
}

Status encode_tma(const char* kernel, const TmaOperand& op, const Launch& launch,
                  TmaDescriptor& out) {
  if (const char* why = tma_rule_broken(op)) return invalid(kernel, op, why);
  if (launch.backend == Backend::kHost) return invalid(kernel, op, "the host backend has no TMA");
  ++handed_out;
  // An sm_8x device runs the kernel's cp.async form, which takes the descriptor parameters but
  // never reads them; tensor maps are defined from sm_90 only, so none is encoded (nor cached:
  // the next launch may be on another device).
  if (launch.backend == Backend::kCuda) {
    int device = 0, major = 0;
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
      return cuda_failure(kernel, "cudaGetDevice (for TMA descriptors)", e);
    if (cudaError_t e = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
        e != cudaSuccess)
      return cuda_failure(kernel, "cudaDeviceGetAttribute (for TMA descriptors)", e);
    if (major < 9) {
      std::memset(&out, 0, sizeof out);
      return Status::Ok();
    }
  }
  CacheKey k = key(op, launch.backend);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    if (auto it = c.entries.find(k); it != c.entries.end()) {
      out = it->second;
      return Status::Ok();
    }
  }
  if (launch.backend == Backend::kEmulator) {
    encode_emulator(op, out);
  } else {
    if (cudaError_t e = ensure_current_context(); e != cudaSuccess)
      return cuda_failure(kernel, "making a CUDA context current (to encode TMA descriptors)", e);
    if (Status s = encode_cuda(kernel, op, out); !s.ok()) return s;
  }
  std::lock_guard<std::mutex> lock(c.mutex);
  if (c.entries.size() >= kMaxCached) c.entries.clear();
  c.entries.emplace(std::move(k), out);
  return Status::Ok();
}

uint64_t tma_descriptors_handed_out() { return handed_out.load(); }

}  // namespace pallas::detail

// The runtime interface of generated code. Not for users: include pallas/pallas.h instead.
//
// A generated kernel instance is a KernelImage (its metadata, its cubins, its host form) plus a
// typed entry point that checks its operands (check_operand, check_dim), computes the grid from
// run-time shapes and calls launch_kernel.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pallas/launch.h"
#include "pallas/metadata.h"
#include "pallas/status.h"

namespace pallas::detail {

// The sequential CPU form of a kernel: runs every program of the grid on the calling thread.
// `args` are the kernel parameters, laid out exactly as for the CUDA form.
using HostEntry = void (*)(void** args, int64_t grid0, int64_t grid1, int64_t grid2);

// Runs one GPU thread of a kernel on the host (the emulator backend); args as for launch.
using ThreadEntry = void (*)(void** args);

struct Cubin {
  int sm;              // 90 for sm_90 / sm_90a, 100 for sm_100a, ...
  bool arch_specific;  // an 'a' target: runs only on exactly this architecture
  const unsigned char* data;
  size_t size;
  // The block size this cubin was compiled for (a warp-specialized kernel launches its
  // producer warpgroup only where it copies with TMA); 0: KernelImage::threads.
  int threads = 0;
  // The kernel opens with griddepcontrol wait (codegen's pallas-wait-for-prerequisite-grids):
  // it touches no memory before the kernel ahead of it on the stream has finished, so it may
  // be launched with programmatic stream serialization (Launch::programmatic_dependent_launch).
  bool waits_for_prerequisite_grids = false;
};

struct KernelImage {
  const KernelMetadata* metadata;
  const char* symbol;  // the entry symbol in each cubin
  std::span<const Cubin> cubins;
  HostEntry host_entry;  // null when the kernel has no host form
  int threads;           // threads per program (CUDA block size, x), unless a cubin says otherwise
  int dynamic_shared_bytes;  // raised once per device when above the 48 KiB default
  // Backend::kEmulator: one GPU thread of the kernel's NVVM-level code, compiled for the host
  // and run by the SIMT runtime (emulator/), and its static shared memory; null when not built.
  ThreadEntry emulator_entry = nullptr;
  const int64_t* emulator_shared_bytes = nullptr;
  // A kernel with blocks staged in shared memory: its sm_80 form (cp.async copies instead of
  // TMA), which the emulator runs when EmulatorOptions::compute_capability is below 90.
  ThreadEntry emulator_cp_async_entry = nullptr;
  const int64_t* emulator_cp_async_shared_bytes = nullptr;
  // The sm_80 form's block size (no producer warpgroup); 0: threads.
  int cp_async_threads = 0;
  // A persistent grid (KernelSpec::persistent): grid[0] is its tile count, and launch_kernel
  // launches min(programs_per_tile x tiles, resident programs) programs that walk the tiles
  // (resident: CUDA, SMs x the blocks per SM occupancy allows; emulator,
  // EmulatorOptions::concurrent_programs; host: 1).
  bool persistent = false;
  // 1, or 3 for a stream-K walk in up to three parts a tile (Persistent::stream_k_parts),
  // whose runs may be a third of a tile: 86 tiles on 132 SMs launch 132 programs, not 86.
  int programs_per_tile = 1;
};

// The cubin to run on a device of compute capability sm / 10 . sm % 10, or null when there is
// none. An arch-specific cubin (sm_90a) runs only on exactly its sm; a generic one (sm_80) on
// devices with the same major version and a minor version at least its own. The arch-specific
// exact match is preferred, else the generic cubin with the highest sm.
const Cubin* select_cubin(std::span<const Cubin> cubins, int device_sm);

// Launches `image` over `grid` programs with kernel parameters `args` (args[i] points at the
// i-th parameter, as for cudaLaunchKernel).
//
// A persistent image (KernelImage::persistent) gets grid = {tiles, 1, 1} and launches at most
// as many programs as the device keeps resident.
//
// `cluster` > 1 asks for thread-block clusters of that many programs along x (a persistent
// grid in clusters, KernelSpec::persistent: the entry point asks when the tile rows divide by
// it). The launch is then a multiple of `cluster` programs: on CUDA devices of sm_90 and up,
// as many clusters as cudaOccupancyMaxActiveClusters keeps resident; on the emulator (an
// sm_90 form) EmulatorOptions::concurrent_programs rounded down to whole clusters. Where
// there are no clusters (the host, sm_8x devices and forms, fewer resident programs than a
// cluster) it launches clusters of 1, which the kernel handles too (%cluster_nctarank).
// A kernel clustered along x (KernelSpec::cluster_first_axis; not persistent) asks for clusters
// of grid[0] programs (1 to 8, any size): on sm_90 devices it gets them where every cluster of
// the grid is resident at once (cudaOccupancyMaxActiveClusters), on the emulator where
// EmulatorOptions::concurrent_programs holds one; else clusters of 1. LaunchRecord's
// launched_cluster says which ran.
//
// A grid with an extent of 0 launches nothing and returns Ok; a negative extent is
// kInvalidArgument. The host backend calls image.host_entry synchronously (the stream is
// ignored; kUnsupportedBackend when there is no host form); the emulator backend likewise
// calls image.emulator_entry. The CUDA backend runs on the
// current device: it selects a cubin (kNoBinaryForArch naming the device and the built
// targets when none fits), loads it lazily once per image and device (thread-safe; handles are
// kept for the life of the process), raises the dynamic shared memory limit when needed and
// launches with cudaLaunchKernelExC on launch.stream. It never synchronizes. Without a usable
// device it returns kNoDevice; other CUDA failures are kCudaError with the CUDA error text.
// Semaphore and workspace memory of one launch. On the CUDA backend it comes from a per-device
// pool: semaphore regions are zeroed when first allocated and, since every kernel leaves its
// semaphores at zero, reused without clearing. A region is free again at once for the next
// launch on the same stream (the stream orders them), and for other streams when the launch
// that held it has completed (one event per launch, recorded on its stream), so launches in
// flight on different streams never share one, and a stream that queues many launches reuses
// the same regions. A launch captured into a CUDA graph gets regions that no launch is using,
// and the graph keeps them (a user object it holds) until it and its instantiations are
// destroyed: its replays use them, nothing else does (so copies of one graph, like two
// launches writing one output, must not run at the same time). On the host and emulator backends it
// is zeroed heap memory. Released (event recorded, or memory freed) when destroyed, after the
// launch, with the launch's device still current.
class LaunchResources {
 public:
  LaunchResources() = default;
  LaunchResources(const LaunchResources&) = delete;
  LaunchResources& operator=(const LaunchResources&) = delete;
  ~LaunchResources();
  void* data(size_t i) const { return items_.at(i).data; }

  struct Item {
    void* data = nullptr;
    void* pool_region = nullptr;  // CUDA: the pool's region, returned on release
    std::unique_ptr<std::byte[]> host;
  };
  std::vector<Item> items_;
  Stream stream_ = nullptr;
  unsigned long long stream_id_ = 0;  // cudaStreamGetId of stream_; 0: unknown
  int device_ = 0;                    // CUDA: the device of the pooled regions
  bool captured_ = false;             // CUDA: the stream is capturing a graph, which owns them
};

// The regions the CUDA pool holds for `device` (free or in use): what a test of the pool's
// reuse reads.
size_t pooled_regions(int device);
// Those of them that captured graphs hold (given back when CUDA destroys the graph's user
// object, asynchronously, after the graph and its instantiations are destroyed).
size_t graph_owned_regions(int device);

enum class ResourceKind {
  kWorkspace,   // uninitialised
  kSemaphores,  // zero, and must be left at zero by the kernel
  kErrors,      // the error record of spec.check (8 int32), zero when no check has failed;
                // CUDA: one per kernel and device, read by take_device_errors
};

struct ResourceRequest {
  uint64_t bytes;
  ResourceKind kind;
};

// Fills `out` with one region per request for a launch of `image` on `launch.backend`.
Status acquire_resources(const KernelImage& image, const Launch& launch,
                         std::span<const ResourceRequest> requests, LaunchResources& out);

Status launch_kernel(const KernelImage& image, void** args, std::array<int64_t, 3> grid,
                     const Launch& launch, int cluster = 1);

// After a launch of a kernel with run-time checks: the status its error record `errors` says.
// Host and emulator: the launch has run, so the record is read (and left as is: it is this
// launch's memory). CUDA: Ok unless launch.check_device_errors, which synchronizes the stream
// and reports (and clears) what take_device_errors would.
Status report_checks(const KernelImage& image, const Launch& launch, const void* errors);

// CUDA: the error record of `image` on `device` (device memory, kept for the process), where
// its launches record failed checks. Made at the first launch and zeroed on a private stream
// that is waited for at once, so launches on every stream see it zero and the caller's
// stream is never synchronized.
Status device_error_record(const KernelImage& image, int device, void*& record);

// Checks one tensor operand of an entry point. In order:
//   a negative extent                    -> kInvalidArgument
//   (a view with zero elements is accepted as it is, null data included)
//   null data                            -> kNullPointer
//   data not aligned to element_size     -> kMisaligned
//   last dim stride != 1                 -> kInvalidArgument
//   `written` (an output, or an input the kernel updates in place): a dim whose stride is
//   smaller than the span of the dims inside it (the dims would overlap; negative strides
//   included), unless the dims in order of stride do not overlap either (a permuted view,
//   dims_disjoint_by_stride) -> kInvalidArgument
//   an input: a negative stride -> kInvalidArgument. An input's dims may overlap: a stride
//   of 0 broadcasts (PyTorch's expand(), cuBLAS's batch stride 0), e.g. a [4, 10] view with
//   strides {0, 1} reads one row four times. (Staged paths need TMA's non-overlapping
//   strides, tma_rule_broken: such a call runs the direct twin.)
// Dims of extent 1 are never indexed, so their strides are not checked. Messages name the
// kernel and the operand: "add_f32: operand 'x' is a null pointer".
Status check_operand(const char* kernel, const char* operand, const void* data, size_t element_size,
                     int rank, const int64_t* shape, const int64_t* strides, bool written);

// Whether no two indices of a view reach the same element, whatever the order of its dims:
// taken by increasing stride, each dim stepped along (extent > 1) steps past every offset
// the dims before it reach (and the span does not overflow). A permuted view passes, e.g.
// [2, 3, 4, 8] with strides {96, 8, 24, 1} ([batch, heads, seq, d] of [batch, seq, heads,
// d] memory: heads step 8 past d's 8 elements, seq 24 past heads' 24); a broadcast (stride
// 0) or overlapping one does not.
bool dims_disjoint_by_stride(int rank, const int64_t* shape, const int64_t* strides);

// Checks that a view made from a container (TensorView::storage_elements() >= 0) reaches no
// element past the container's end -> kInvalidArgument:
//   "add_f32: operand 'x' reaches element 1000 of its storage, which holds 1000 elements"
// A view made from a pointer (storage_elements -1) and an empty view pass. The view passed
// check_operand.
Status check_storage(const char* kernel, const char* operand, int rank, const int64_t* shape,
                     const int64_t* strides, int64_t storage_elements);

// Checks that output `a` shares no byte with operand `b` (another input or output of the
// call that the spec does not declare as an alias of it) -> kInvalidArgument naming both:
//   "add_f32: output 'out' overlaps operand 'x' in memory (only an operand the kernel
//    declares in-place may share memory with an output)"
// What counts as overlap: two views whose address ranges intersect. Views that are rows of
// one matrix (rank 1 or 2 after merging contiguous dims, the same row stride when both have
// several rows) are compared row by row, so column blocks of one matrix, or alternate rows,
// do not overlap; any other pair of views whose ranges intersect does, even where their
// elements interleave without touching. Both views passed check_operand; an empty view
// overlaps nothing.
Status check_no_overlap(const char* kernel, const char* a_name, const void* a, size_t a_element,
                        int a_rank, const int64_t* a_shape, const int64_t* a_strides,
                        const char* b_name, const void* b, size_t b_element, int b_rank,
                        const int64_t* b_shape, const int64_t* b_strides);

// Checks that every element of the operand lies within 2^31 - 1 elements of its first one:
// the kernels index and mask in 32 bits. -> kInvalidArgument
//   "row_sum_f32: operand 'x' spans 2147483648 elements; its kernel indexes in 32 bits, at
//    most 2147483647"
Status check_index_range(const char* kernel, const char* operand, int rank, const int64_t* shape,
                         const int64_t* strides);

// A scalar as a message shows it: printf's %g ("-1e-09", "0.5", "-1"), not
// std::to_string's fixed six decimals ("-0.000000").
std::string number_text(double value);

// Checks that dim `dim` of `operand` equals the value of the named dim, which was set by
// dim `set_by_dim` of `set_by_operand` (null when the value is fixed by the kernel):
//   "add_f32: operand 'y' dim 0 is 100, but dim 'n' is 1000 (set by operand 'x' dim 0)"
// -> kShapeMismatch.
Status check_dim(const char* kernel, const char* operand, int dim, int64_t actual,
                 const char* dim_name, int64_t expected, const char* set_by_operand,
                 int set_by_dim);

// ---- TMA (kernels with blocks staged in shared memory, sm_90a) ----

// A TMA descriptor as a kernel parameter, passed by value (__grid_constant__): a CUtensorMap
// on the CUDA backend (aligned as CUDA 13 aligns one), the emulator's EmuTensorMap (emulator/abi.h)
// on the emulator backend.
struct alignas(128) TmaDescriptor {
  unsigned char bytes[128];
};

// One staged operand of a launch: its array and the box (the block shape, squeezed dims 1).
struct TmaOperand {
  const char* name;
  const void* data;
  int element_bytes;       // 2 or 4
  int rank;                // 1..5
  const int64_t* shape;    // outermost first, as the TensorView
  const int64_t* strides;  // in elements, outermost first
  const int64_t* box;      // outermost first
  int swizzle;             // bytes: 0, 32, 64, 128
  // What the elements are, for TMA reductions (cp.reduce.async.bulk .add adds by type).
  enum class Element : int { kF32, kF16, kBF16, kI32 };
  Element element;
  // Whether the kernel writes it (an output or an in-place operand): TMA stores and reductions
  // write a row's last 16-byte piece whole, so such an operand needs rows of a multiple of 16
  // bytes (tma_rule_broken).
  bool written = false;
};

// The programs launch_kernel launches for a persistent `image` (KernelImage::persistent) of
// `tiles` tiles without clusters, into `programs` (DimExpr::persistent_programs(), which an
// entry point evaluates before it asks for the launch's memory): CUDA, min(tiles, SMs x the
// programs an SM keeps resident); the emulator, min(tiles, EmulatorOptions::concurrent_programs);
// the host, 1; 0 for no tiles. Errors as launch_kernel's (no cubin for the device, ...).
Status persistent_programs(const KernelImage& image, int64_t tiles, const Launch& launch,
                           int64_t& programs);

// Why the TMA instance `image` cannot run for `launch`, or null when it can: CUDA when the
// current device has one of its cubins (sm_90a, or its cp.async form) and the shared memory
// its pipeline needs, the emulator when the GPU it stands for has that shared memory, the
// host never (it runs the direct instance, whose block semantics are the same). The reasons
// are static strings ("the host backend has no TMA", "the staged plan needs more shared
// memory per block than the GPU has", ...): LaunchRecord::fallback.
const char* tma_path_unavailable(const KernelImage& image, const Launch& launch);

// The bytes of shared memory one program may have where `launch` runs (a variant chooser's
// DimExpr::device_shared_bytes()): CUDA, the current device's opt-in maximum per block (a
// query that fails gives INT64_MAX: the launch that follows reports the error); the emulator,
// EmulatorOptions::shared_bytes_per_block or the GPU its compute capability stands for; the
// host, INT64_MAX. At most Launch::max_shared_bytes_per_block when that is set.
int64_t device_shared_bytes(const Launch& launch);

// TMA's rules for an operand: data 16-byte aligned, every stride but the last a multiple of 16
// bytes and past the dims inside it (no broadcast), every extent below 2^32; and for an operand
// the kernel writes, rows (the last dim) of a multiple of 16 bytes: the GPU writes the 16-byte
// piece that holds a row's last element whole (an H200 overwrote columns 161..163 of a [70, 161]
// f32 output with row stride 164, the padding between rows). Returns null when they hold, else
// the rule broken (for the entry point, which then launches the direct instance instead).
const char* tma_rule_broken(const TmaOperand& operand);

// Builds the descriptor of `operand` for `launch.backend` (CUDA: cuTensorMapEncodeTiled through
// cudaGetDriverEntryPointByVersion, never linking the driver; cached per process for repeated
// shapes). kInvalidArgument naming the kernel, operand and rule when TMA cannot copy it.
Status encode_tma(const char* kernel, const TmaOperand& operand, const Launch& launch,
                  TmaDescriptor& out);

// How many descriptors encode_tma has handed out in this process (cached ones included): tests
// use it to tell the TMA instance's launches from the direct twin's.
uint64_t tma_descriptors_handed_out();

}  // namespace pallas::detail

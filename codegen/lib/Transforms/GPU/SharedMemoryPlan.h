//===- SharedMemoryPlan.h - one dynamic shared-memory buffer per kernel -*- C++ -*-===//
//
// Every shared-memory buffer of a kernel (scratch, reduction slots, layout
// conversions) is a `memref.view` into one `gpu.dynamic_shared_memory`
// buffer. The lowering records each buffer with its size, alignment and live
// interval (in the order ops are lowered); once the kernel is lowered the
// plan gives each an offset, first fit in decreasing size, so that buffers
// whose intervals overlap never share bytes, and patches the offsets in.
//
// Worked example: a kernel with a 64 KiB scratch (live all kernel) and two
// reductions, each needing 16 bytes of slots during its own op: the scratch
// is at [0, 65536); both slot buffers at [65536, 65552), since no two of them
// are live at once. The kernel asks for 65552 bytes at launch.
//
//===----------------------------------------------------------------------===//
#ifndef PALLAS_TRANSFORMS_GPU_SHAREDMEMORYPLAN_H
#define PALLAS_TRANSFORMS_GPU_SHAREDMEMORYPLAN_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Location.h"

#include <string>
#include <vector>

namespace mlir::pallas::gpu_lowering {

/// How long a buffer lives: during the rule that asked for it, the whole
/// kernel, or a scope (GpuLowering::openScope to closeScope: a run_scoped region).
enum class SharedLifetime { kRule, kKernel, kScope };

struct SharedAllocation {
  std::string purpose;  // "scratch 'acc'", "row reduction slots", ...
  int64_t bytes;
  int64_t align;
  int64_t begin, end;               // live interval, inclusive, in lowering order
  arith::ConstantIndexOp offsetOp;  // patched with the offset
  int64_t offset = -1;
};

class SharedMemoryPlan {
 public:
  /// Most dynamic shared memory a program may opt in to on sm_90 (227 KiB).
  static constexpr int64_t kMaxBytes = 227 * 1024;

  /// Records a buffer; returns its entry (for setEnd).
  size_t add(SharedAllocation allocation) {
    allocations_.push_back(std::move(allocation));
    return allocations_.size() - 1;
  }
  /// Ends the live interval of entry `entry` at `end`.
  void setEnd(size_t entry, int64_t end) { allocations_[entry].end = end; }
  /// Assigns offsets, patches them in, and returns the buffer's size.
  int64_t assign();
  /// The largest alignment any buffer asked for (the buffer's own alignment).
  int64_t maxAlign() const;
  /// One line per buffer, largest first: "scratch 'acc': 163840 bytes at 0".
  std::string describe() const;

 private:
  std::vector<SharedAllocation> allocations_;
};

}  // namespace mlir::pallas::gpu_lowering

#endif  // PALLAS_TRANSFORMS_GPU_SHAREDMEMORYPLAN_H

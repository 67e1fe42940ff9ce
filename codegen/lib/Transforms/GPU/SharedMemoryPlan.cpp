//===- SharedMemoryPlan.cpp - offsets by liveness in one dynamic buffer ---===//

#include "SharedMemoryPlan.h"

#include "mlir/IR/Builders.h"

#include <algorithm>
#include <numeric>

namespace mlir::pallas::gpu_lowering {

int64_t SharedMemoryPlan::assign() {
  std::vector<size_t> order(allocations_.size());
  std::iota(order.begin(), order.end(), 0);
  // Largest first (ties: first asked first), so big buffers pack at low offsets.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return allocations_[a].bytes > allocations_[b].bytes;
  });
  int64_t total = 0;
  std::vector<size_t> placed;
  for (size_t i : order) {
    SharedAllocation& a = allocations_[i];
    // The ranges taken by placed buffers live at the same time, by offset.
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (size_t j : placed) {
      const SharedAllocation& p = allocations_[j];
      if (p.begin <= a.end && a.begin <= p.end) taken.push_back({p.offset, p.offset + p.bytes});
    }
    std::sort(taken.begin(), taken.end());
    int64_t offset = 0;
    for (auto [lo, hi] : taken) {
      offset = (offset + a.align - 1) / a.align * a.align;
      if (offset + a.bytes <= lo) break;
      offset = std::max(offset, hi);
    }
    a.offset = (offset + a.align - 1) / a.align * a.align;
    total = std::max(total, a.offset + a.bytes);
    placed.push_back(i);
    OpBuilder b(a.offsetOp);
    a.offsetOp->setAttr("value", b.getIndexAttr(a.offset));
  }
  return total;
}

int64_t SharedMemoryPlan::maxAlign() const {
  int64_t align = 16;
  for (const SharedAllocation& a : allocations_) align = std::max(align, a.align);
  return align;
}

std::string SharedMemoryPlan::describe() const {
  std::vector<const SharedAllocation*> sorted;
  for (const SharedAllocation& a : allocations_) sorted.push_back(&a);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](auto* a, auto* b) { return a->bytes > b->bytes; });
  std::string text;
  for (const SharedAllocation* a : sorted)
    text += "\n  " + a->purpose + ": " + std::to_string(a->bytes) + " bytes" +
            (a->offset >= 0 ? " at " + std::to_string(a->offset) : "");
  return text;
}

}  // namespace mlir::pallas::gpu_lowering

//===- Splats.h - block values that are one scalar repeated -------*- C++ -*-===//
#ifndef PALLAS_TRANSFORMS_GPU_SPLATS_H
#define PALLAS_TRANSFORMS_GPU_SPLATS_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

namespace mlir::pallas {

/// A splat: a broadcast scalar or a splat constant. It is made again in
/// whatever layout a use needs (GpuLowering::operandIn), so it never needs a
/// layout conversion.
inline bool isSplat(Value v) {
  if (auto bc = v.getDefiningOp<vector::BroadcastOp>()) return !isa<VectorType>(bc.getSourceType());
  if (auto cst = v.getDefiningOp<arith::ConstantOp>())
    return isa<SplatElementsAttr>(cst.getValue());
  return false;
}

}  // namespace mlir::pallas

#endif  // PALLAS_TRANSFORMS_GPU_SPLATS_H

//===- ElementwiseRules.cpp - elementwise ops, splats, broadcasts, shape casts -===//
//
// Elementwise ops compute on the per-thread form of their operands, which
// pallas-assign-layouts made agree with the result's layout (splats are made
// again in the layout of each use; anything else has a pallas.convert_layout).
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include "mlir/Dialect/Math/IR/Math.h"

namespace mlir::pallas::gpu_lowering {
namespace {

/// Fast-math flags the GPU code may use:
///  - `contract` on every float op, so a * b + c becomes one FFMA (it rounds
///    once instead of twice: never less accurate);
///  - `afn` on exp and exp2 when every float input of the kernel is half
///    precision (`pallas.approx_math`): exp becomes ex2.approx of x * log2(e)
///    (__nv_fast_expf, ~1e-7 relative for moderate x) instead of libdevice's
///    8-instruction expf, far below the inputs' own precision (2^-9, 2^-12).
void relaxFloatSemantics(Operation* op, GpuLowering& g) {
  auto fastMath = dyn_cast<arith::ArithFastMathInterface>(op);
  if (!fastMath) return;
  arith::FastMathFlags flags = arith::FastMathFlags::contract;
  if (auto current = fastMath.getFastMathFlagsAttr()) flags = flags | current.getValue();
  if (g.approxTranscendentals && isa<math::ExpOp, math::Exp2Op>(op))
    flags = flags | arith::FastMathFlags::afn;
  op->setAttr(fastMath.getFastMathAttrName(),
              arith::FastMathFlagsAttr::get(op->getContext(), flags));
}

LogicalResult lowerElementwise(Operation* op, GpuLowering& g, OpBuilder& b) {
  Location loc = op->getLoc();
  OperationState state(loc, op->getName());
  Attribute layout = op->getNumResults() == 1 ? g.layoutOf(op->getResult(0)) : Attribute();
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    if (!isa<VectorType>(v.getType())) {
      state.addOperands(g.map.lookup(v));
      continue;
    }
    FailureOr<Value> operand = failure();
    if (layout) operand = g.operandIn(b, loc, v, layout);
    if (failed(operand))
      return op->emitOpError("operand ")
             << i << " is in layout " << g.layoutOf(v) << " but the result in " << layout
             << "; pallas-assign-layouts inserts a pallas.convert_layout for such uses";
    state.addOperands(*operand);
  }
  for (Type t : op->getResultTypes()) {
    auto vt = dyn_cast<VectorType>(t);
    state.addTypes(vt ? Type(g.threadType(vt, layout)) : t);
  }
  state.addAttributes(op->getAttrs());
  Operation* lowered = b.create(state);
  relaxFloatSemantics(lowered, g);
  for (auto [from, to] : llvm::zip(op->getResults(), lowered->getResults())) g.map.map(from, to);
  return success();
}

LogicalResult lowerConstant(arith::ConstantOp cst, GpuLowering& g, OpBuilder& b) {
  auto full = dyn_cast<VectorType>(cst.getType());
  if (!full) {
    g.map.map(cst.getResult(), b.clone(*cst)->getResult(0));
    return success();
  }
  auto splat = dyn_cast<SplatElementsAttr>(cst.getValue());
  if (!splat) return cst.emitOpError("no GPU lowering rule for non-splat block constants");
  VectorType type = g.threadType(full, g.layoutOf(cst.getResult()));
  g.map.map(cst.getResult(),
            arith::ConstantOp::create(b, cst.getLoc(), splat.resizeSplat(type)).getResult());
  return success();
}

/// A scalar splat in the result's layout, or a numpy broadcast of a
/// replicated value within each thread's copy. A broadcast from a replicated
/// value to a strided block is a pallas.convert_layout, and broadcasts of
/// strided blocks are folded into their loads by pallas-sink-broadcasts.
LogicalResult lowerBroadcast(vector::BroadcastOp bc, GpuLowering& g, OpBuilder& b) {
  Location loc = bc.getLoc();
  VectorType to = bc.getResultVectorType();
  Attribute layout = g.layoutOf(bc.getResult());
  auto from = dyn_cast<VectorType>(bc.getSourceType());
  if (!from) {
    g.map.map(bc.getResult(), vector::BroadcastOp::create(b, loc, g.threadType(to, layout),
                                                          g.map.lookup(bc.getSource()))
                                  .getResult());
    return success();
  }
  if (g.isReplicated(bc.getSource()) && isa<ReplicatedLayoutAttr>(layout)) {
    Value shaped = vector::ShapeCastOp::create(b, loc, from, g.map.lookup(bc.getSource()));
    Value wide = vector::BroadcastOp::create(b, loc, to, shaped);
    g.map.map(bc.getResult(),
              vector::ShapeCastOp::create(b, loc, GpuLowering::flat(to), wide).getResult());
    return success();
  }
  return bc.emitOpError("no GPU lowering rule for broadcasting a block in layout ")
         << g.layoutOf(bc.getSource()) << " to " << layout
         << "; pallas-sink-broadcasts folds broadcasts of loads, iotas and elementwise ops over "
            "them, and pallas-assign-layouts makes broadcasts of replicated values conversions";
}

/// Both layouts are defined on the flattened block, so a reshape that keeps
/// the element count moves no data (the strided `vec` divides every last dim).
LogicalResult lowerShapeCast(vector::ShapeCastOp cast, GpuLowering& g, OpBuilder&) {
  g.map.map(cast.getResult(), g.map.lookup(cast.getSource()));
  return success();
}

}  // namespace

void populateElementwiseRules(RuleRegistry& rules) {
  rules.add(arith::ConstantOp::getOperationName(), ruleFor(lowerConstant));
  rules.add(vector::BroadcastOp::getOperationName(), ruleFor(lowerBroadcast));
  rules.add(vector::ShapeCastOp::getOperationName(), ruleFor(lowerShapeCast));
  rules.addFamily(
      "elementwise arith/math ops",
      [](Operation* op) {
        return op->hasTrait<OpTrait::Elementwise>() && op->getNumRegions() == 0 &&
               llvm::any_of(op->getResultTypes(), llvm::IsaPred<VectorType>);
      },
      lowerElementwise);
}

}  // namespace mlir::pallas::gpu_lowering

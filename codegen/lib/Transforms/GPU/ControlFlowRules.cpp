//===- ControlFlowRules.cpp - program ids, scf.for, scf.while, scf.if ------===//
//
// Loops keep their structure; a block carry becomes its per-thread form in
// the layout pallas-assign-layouts gave the loop's result (inits and yields in
// another layout arrive through a pallas.convert_layout). Conditions are
// uniform across the program (fori bounds, while_loop conditions and when()
// are scalars every thread computes alike), so barriers inside are safe.
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

namespace mlir::pallas::gpu_lowering {
namespace {

/// The per-thread forms of `values` (inits or yields of `loop`'s carries).
FailureOr<SmallVector<Value>> carries(GpuLowering& g, OpBuilder& b, Operation* loop,
                                      ValueRange values) {
  SmallVector<Value> out;
  for (auto [i, v] : llvm::enumerate(values)) {
    if (!isa<VectorType>(v.getType())) {
      out.push_back(g.map.lookup(v));
      continue;
    }
    Attribute layout = g.layoutOf(loop->getResult(i));
    FailureOr<Value> lowered = g.operandIn(b, loop->getLoc(), v, layout);
    if (failed(lowered))
      return loop->emitOpError("carry ")
             << i << " is in layout " << layout << " but gets a value in " << g.layoutOf(v)
             << "; pallas-assign-layouts inserts a pallas.convert_layout for it";
    out.push_back(*lowered);
  }
  return out;
}

SmallVector<Type> carryTypes(GpuLowering& g, Operation* loop) {
  SmallVector<Type> types;
  for (Value r : loop->getResults()) {
    auto vt = dyn_cast<VectorType>(r.getType());
    types.push_back(vt ? Type(g.threadType(vt, g.layoutOf(r))) : r.getType());
  }
  return types;
}

LogicalResult lowerFor(scf::ForOp loop, GpuLowering& g, OpBuilder& b) {
  if (loop->hasAttr(kPipelineAttrName)) return lowerPipelinedFor(loop, g, b);
  return lowerForWith(loop, g, b, nullptr, nullptr);
}

LogicalResult lowerWhile(scf::WhileOp loop, GpuLowering& g, OpBuilder& b) {
  Location loc = loop.getLoc();
  FailureOr<SmallVector<Value>> inits = carries(g, b, loop, loop.getInits());
  if (failed(inits)) return failure();
  SmallVector<Type> types = carryTypes(g, loop);
  SmallVector<Location> locs(types.size(), loc);
  auto lowered = scf::WhileOp::create(b, loc, types, *inits);
  OpBuilder bb = OpBuilder::atBlockEnd(b.createBlock(&lowered.getBefore(), {}, types, locs));
  for (auto [from, to] :
       llvm::zip(loop.getBeforeArguments(), lowered.getBefore().front().getArguments()))
    g.map.map(from, to);
  if (failed(g.lowerBlock(loop.getBefore().front(), bb))) return failure();
  scf::ConditionOp cond = loop.getConditionOp();
  FailureOr<SmallVector<Value>> forwarded = carries(g, bb, loop, cond.getArgs());
  if (failed(forwarded)) return failure();
  scf::ConditionOp::create(bb, loc, g.map.lookup(cond.getCondition()), *forwarded);
  OpBuilder ab = OpBuilder::atBlockEnd(b.createBlock(&lowered.getAfter(), {}, types, locs));
  for (auto [from, to] :
       llvm::zip(loop.getAfterArguments(), lowered.getAfter().front().getArguments()))
    g.map.map(from, to);
  if (failed(g.lowerBlock(loop.getAfter().front(), ab))) return failure();
  FailureOr<SmallVector<Value>> yields = carries(g, ab, loop, loop.getYieldOp().getOperands());
  if (failed(yields)) return failure();
  scf::YieldOp::create(ab, loc, *yields);
  b.setInsertionPointAfter(lowered);
  for (auto [from, to] : llvm::zip(loop.getResults(), lowered.getResults())) g.map.map(from, to);
  return success();
}

/// when(cond, body): an scf.if without results or else branch.
LogicalResult lowerIf(scf::IfOp branch, GpuLowering& g, OpBuilder& b) {
  if (branch.getNumResults() != 0 || !branch.getElseRegion().empty())
    return branch.emitOpError(
        "the GPU lowers scf.if without results or else branch only (the EDSL's when())");
  auto lowered = scf::IfOp::create(b, branch.getLoc(), g.map.lookup(branch.getCondition()), false);
  OpBuilder tb(lowered.thenBlock()->getTerminator());
  return g.lowerBlock(*branch.thenBlock(), tb);
}

}  // namespace

LogicalResult lowerForWith(scf::ForOp loop, GpuLowering& g, OpBuilder& b, StepHook atStepStart,
                           StepHook atStepEnd) {
  FailureOr<SmallVector<Value>> inits = carries(g, b, loop, loop.getInitArgs());
  if (failed(inits)) return failure();
  auto lowered =
      scf::ForOp::create(b, loop.getLoc(), g.map.lookup(loop.getLowerBound()),
                         g.map.lookup(loop.getUpperBound()), g.map.lookup(loop.getStep()), *inits);
  g.map.map(loop.getInductionVar(), lowered.getInductionVar());
  for (auto [from, to] : llvm::zip(loop.getRegionIterArgs(), lowered.getRegionIterArgs()))
    g.map.map(from, to);
  Block* body = lowered.getBody();
  if (!body->empty()) body->back().erase();
  OpBuilder nb = OpBuilder::atBlockEnd(body);
  if (atStepStart && failed(atStepStart(nb, lowered.getInductionVar()))) return failure();
  if (failed(g.lowerBlock(*loop.getBody(), nb))) return failure();
  if (atStepEnd && failed(atStepEnd(nb, lowered.getInductionVar()))) return failure();
  FailureOr<SmallVector<Value>> yields =
      carries(g, nb, loop, loop.getBody()->getTerminator()->getOperands());
  if (failed(yields)) return failure();
  scf::YieldOp::create(nb, loop.getLoc(), *yields);
  for (auto [from, to] : llvm::zip(loop.getResults(), lowered.getResults())) g.map.map(from, to);
  return success();
}

void populateControlFlowRules(RuleRegistry& rules) {
  rules.add(scf::ForOp::getOperationName(), ruleFor(lowerFor));
  rules.add(scf::WhileOp::getOperationName(), ruleFor(lowerWhile));
  rules.add(scf::IfOp::getOperationName(), ruleFor(lowerIf));
}

}  // namespace mlir::pallas::gpu_lowering

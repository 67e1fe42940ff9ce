//===- PeelLastStep.cpp - a pipelined loop's last-step epilogue after it --===//
//
// See PallasPeelLastStep in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "pallas/Dialect/PallasDialect.h"
#include "pallas/Transforms/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "llvm/ADT/SetVector.h"

namespace mlir::pallas {
#define GEN_PASS_DEF_PALLASPEELLASTSTEP
#include "pallas/Transforms/Passes.h.inc"

namespace {

/// Whether `cond` is `%iv == %ub - 1` (either operand order) for `loop`.
bool isLastStep(Value cond, scf::ForOp loop) {
  auto cmp = cond.getDefiningOp<arith::CmpIOp>();
  if (!cmp || cmp.getPredicate() != arith::CmpIPredicate::eq) return false;
  auto isUbMinusOne = [&](Value v) {
    auto sub = v.getDefiningOp<arith::SubIOp>();
    if (!sub || sub.getLhs() != loop.getUpperBound()) return false;
    auto one = sub.getRhs().getDefiningOp<arith::ConstantIndexOp>();
    return one && one.value() == 1;
  };
  Value iv = loop.getInductionVar();
  return (cmp.getLhs() == iv && isUbMinusOne(cmp.getRhs())) ||
         (cmp.getRhs() == iv && isUbMinusOne(cmp.getLhs()));
}

/// The ops of the loop body that `region` uses, in body order, if all are
/// loop-invariant and side-effect free (the induction variable aside).
FailureOr<SmallVector<Operation*>> invariantInputs(Region& region, scf::ForOp loop) {
  Block* body = loop.getBody();
  llvm::SetVector<Operation*> needed;
  SmallVector<Value> work;
  region.walk([&](Operation* op) {
    for (Value v : op->getOperands()) work.push_back(v);
  });
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (v == loop.getInductionVar()) continue;
    if (isa<BlockArgument>(v)) {
      if (cast<BlockArgument>(v).getOwner() == body) return failure();  // a loop carry
      continue;
    }
    Operation* def = v.getDefiningOp();
    if (def->getBlock() != body || needed.contains(def)) continue;  // outside, or inside `region`
    if (!isMemoryEffectFree(def) || def->getNumRegions() != 0) return failure();
    if (auto blk = dyn_cast<BlockOp>(def); blk && blk.getStaged()) return failure();
    needed.insert(def);
    work.append(def->getOperands().begin(), def->getOperands().end());
  }
  SmallVector<Operation*> ops = needed.takeVector();
  llvm::sort(ops, [](Operation* a, Operation* b) { return a->isBeforeInBlock(b); });
  return ops;
}

void peel(scf::ForOp loop) {
  Block* body = loop.getBody();
  // The last op before the yield: scf.if (%iv == %ub - 1) without an else.
  if (body->getOperations().size() < 2) return;
  auto last = dyn_cast<scf::IfOp>(*std::prev(body->getTerminator()->getIterator()));
  if (!last || last.getNumResults() != 0 || !last.getElseRegion().empty() ||
      !isLastStep(last.getCondition(), loop) || loop.getNumRegionIterArgs() != 0)
    return;
  FailureOr<SmallVector<Operation*>> inputs = invariantInputs(last.getThenRegion(), loop);
  if (failed(inputs)) return;
  OpBuilder b(loop->getContext());
  b.setInsertionPointAfter(loop);
  Location loc = last.getLoc();
  Value ran = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, loop.getLowerBound(),
                                    loop.getUpperBound());
  auto after = scf::IfOp::create(b, loc, ran, /*withElseRegion=*/false);
  b.setInsertionPointToStart(after.thenBlock());
  IRMapping map;
  map.map(loop.getInductionVar(), arith::SubIOp::create(b, loc, loop.getUpperBound(),
                                                        arith::ConstantIndexOp::create(b, loc, 1)));
  for (Operation* op : *inputs) b.clone(*op, map);
  for (Operation& op : last.thenBlock()->without_terminator()) b.clone(op, map);
  Operation* cond = last.getCondition().getDefiningOp();
  last.erase();
  if (cond && cond->use_empty()) cond->erase();
}

struct PallasPeelLastStepPass : impl::PallasPeelLastStepBase<PallasPeelLastStepPass> {
  void runOnOperation() override {
    SmallVector<scf::ForOp> loops;
    getOperation().walk([&](scf::ForOp loop) {
      if (loop->hasAttr(kPipelineAttrName)) loops.push_back(loop);
    });
    for (scf::ForOp loop : loops) peel(loop);
  }
};

}  // namespace
}  // namespace mlir::pallas

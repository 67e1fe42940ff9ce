//===- SinkBroadcasts.cpp - fold broadcasts of loaded blocks into loads ---===//

#include "pallas/Dialect/PallasDialect.h"
#include "pallas/Transforms/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::pallas {
#define GEN_PASS_DEF_PALLASSINKBROADCASTS
#include "pallas/Transforms/Passes.h.inc"

namespace {

/// broadcast(load(ref) : S) : R  ->  load(ref) : R
struct BroadcastOfLoad : OpRewritePattern<vector::BroadcastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::BroadcastOp op, PatternRewriter& rewriter) const override {
    auto load = op.getSource().getDefiningOp<LoadOp>();
    if (!load) return failure();
    auto wide = rewriter.replaceOpWithNewOp<LoadOp>(op, op.getResultVectorType(), load.getRef(),
                                                    load.getDynamicOffsets(), load.getOffsets(),
                                                    load.getSizes(), load.getPaddingAttr());
    wide.setInsideLastDim(load.getInsideLastDim());
    return success();
  }
};

/// broadcast(iota(d) : S) : R  ->  iota(d + rank R - rank S) : R, or zeros
/// when dim d (of extent 1) is stretched.
struct BroadcastOfIota : OpRewritePattern<vector::BroadcastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::BroadcastOp op, PatternRewriter& rewriter) const override {
    auto iota = op.getSource().getDefiningOp<IotaOp>();
    if (!iota) return failure();
    VectorType result = op.getResultVectorType();
    int64_t lead = result.getRank() - iota.getResult().getType().getRank();
    int64_t dim = iota.getDimension() + lead;
    if (iota.getResult().getType().getShape()[iota.getDimension()] != result.getShape()[dim]) {
      rewriter.replaceOpWithNewOp<arith::ConstantOp>(
          op, result, DenseElementsAttr::get(result, APInt(result.getElementTypeBitWidth(), 0)));
      return success();
    }
    rewriter.replaceOpWithNewOp<IotaOp>(op, result, dim);
    return success();
  }
};

/// Whether `v` is computed elementwise from a load or an iota, which a
/// broadcast can be folded into.
bool fromLoadOrIota(Value v) {
  Operation* def = v.getDefiningOp();
  if (!def) return false;
  if (isa<LoadOp, IotaOp>(def)) return true;
  if (auto bc = dyn_cast<vector::BroadcastOp>(def)) return fromLoadOrIota(bc.getSource());
  return def->hasTrait<OpTrait::Elementwise>() && llvm::any_of(def->getOperands(), fromLoadOrIota);
}

/// broadcast(f(a, b) : S) : R  ->  f(broadcast(a) : R, broadcast(b) : R)
/// for elementwise ops over a load or an iota, so that the broadcast reaches
/// it. Other elementwise ops keep their size: a per-row statistic (a running
/// maximum of row maxima, say) is computed once per row, then broadcast.
struct BroadcastOfElementwise : OpRewritePattern<vector::BroadcastOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(vector::BroadcastOp op, PatternRewriter& rewriter) const override {
    auto srcType = dyn_cast<VectorType>(op.getSource().getType());
    Operation* def = op.getSource().getDefiningOp();
    if (!srcType || !def || !def->hasTrait<OpTrait::Elementwise>() || def->getNumResults() != 1 ||
        def->getNumRegions() != 0 || !fromLoadOrIota(op.getSource()))
      return failure();
    ArrayRef<int64_t> shape = op.getResultVectorType().getShape();
    SmallVector<Value> operands;
    for (Value v : def->getOperands()) {
      auto t = dyn_cast<VectorType>(v.getType());
      if (!t) return failure();
      operands.push_back(vector::BroadcastOp::create(
          rewriter, op.getLoc(), VectorType::get(shape, t.getElementType()), v));
    }
    OperationState state(op.getLoc(), def->getName());
    state.addOperands(operands);
    state.addTypes(op.getResultVectorType());
    state.addAttributes(def->getAttrs());
    rewriter.replaceOp(op, rewriter.create(state)->getResults());
    return success();
  }
};

struct SinkBroadcastsPass : impl::PallasSinkBroadcastsBase<SinkBroadcastsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<BroadcastOfLoad, BroadcastOfIota, BroadcastOfElementwise>(&getContext());
    vector::BroadcastOp::getCanonicalizationPatterns(patterns, &getContext());
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns)))) signalPassFailure();
  }
};

}  // namespace
}  // namespace mlir::pallas

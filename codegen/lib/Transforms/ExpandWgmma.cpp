//===- ExpandWgmma.cpp - pallas.wgmma as a synchronous dot ----------------===//
//
// See PallasExpandWgmma in Passes.td: for targets whose multiplies complete
// when issued (the host, sm_80's mma.sync), an asynchronous pallas.wgmma is
// the loads of its refs, a pallas.dot into the accumulator and its store.
//
//===----------------------------------------------------------------------===//

#include "pallas/Dialect/PallasDialect.h"
#include "pallas/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::pallas {
#define GEN_PASS_DEF_PALLASEXPANDWGMMA
#include "pallas/Transforms/Passes.h.inc"

namespace {

/// The whole block behind `ref`, loaded.
Value loadWhole(OpBuilder& b, Location loc, Value ref) {
  auto type = cast<RefType>(ref.getType());
  SmallVector<int64_t> zeros(type.getShape().size(), 0);
  auto vector = VectorType::get(type.getShape(), type.getElementType());
  return LoadOp::create(b, loc, vector, ref, ValueRange{}, zeros, type.getShape(), nullptr);
}

struct PallasExpandWgmmaPass : impl::PallasExpandWgmmaBase<PallasExpandWgmmaPass> {
  void runOnOperation() override {
    SmallVector<Operation*> done;
    getOperation().walk([&](Operation* op) {
      if (isa<WgmmaWaitOp>(op)) done.push_back(op);
      auto mma = dyn_cast<WgmmaOp>(op);
      if (!mma) return;
      OpBuilder b(mma);
      Location loc = mma.getLoc();
      // a is a staged block's ref, or already a value (registers).
      Value a = isa<RefType>(mma.getA().getType()) ? loadWhole(b, loc, mma.getA()) : mma.getA();
      Value bv = loadWhole(b, loc, mma.getB());
      Value acc = loadWhole(b, loc, mma.getAcc());
      Value d = DotOp::create(b, loc, acc.getType(), a, bv, acc, mma.getTransposeA(),
                              mma.getTransposeB());
      auto shape = cast<RefType>(mma.getAcc().getType()).getShape();
      StoreOp::create(b, loc, d, mma.getAcc(), ValueRange{}, SmallVector<int64_t>(shape.size(), 0));
      done.push_back(mma);
    });
    for (Operation* op : done) op->erase();
  }
};

}  // namespace
}  // namespace mlir::pallas

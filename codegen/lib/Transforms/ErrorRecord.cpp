//===- ErrorRecord.cpp - Writing a failed pallas.check --------------------===//

#include "ErrorRecord.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::pallas {

void writeFirstFailure(OpBuilder& b, Location loc, Value errors, Value oldCount, int32_t check,
                       ValueRange halves) {
  Value zero = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 0);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, oldCount, zero);
  scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
    auto at = [&](int64_t i) { return arith::ConstantIndexOp::create(tb, l, i).getResult(); };
    Value code = arith::ConstantIntOp::create(tb, l, tb.getI32Type(), check + 1);
    memref::StoreOp::create(tb, l, code, errors, ValueRange{at(1)});
    for (auto [k, half] : llvm::enumerate(halves))
      memref::StoreOp::create(tb, l, half, errors, ValueRange{at(2 + static_cast<int64_t>(k))});
    scf::YieldOp::create(tb, l);
  });
}

}  // namespace mlir::pallas

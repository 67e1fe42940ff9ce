//===- BlockIndexing.cpp - element coordinates of blocks ------------------===//

#include "BlockIndexing.h"

#include "mlir/Dialect/SCF/IR/SCF.h"

namespace mlir::pallas {

BlockRef resolveBlock(OpBuilder& b, Location loc, BlockOp op, Value array, ValueRange indices) {
  BlockRef ref;
  ref.array = array;
  auto type = cast<MemRefType>(array.getType());
  for (int64_t d = 0; d < type.getRank(); ++d) {
    Value idx = indices[d];
    if (op.getSqueezed()[d]) {
      ref.origin.push_back(idx);
    } else if (ShapedType::isDynamic(op.getBlockShape()[d])) {  // the full dim
      ref.origin.push_back(arith::ConstantIndexOp::create(b, loc, 0));
      ref.refDims.push_back(d);
    } else {
      Value size = arith::ConstantIndexOp::create(b, loc, op.getBlockShape()[d]);
      ref.origin.push_back(arith::MulIOp::create(b, loc, idx, size));
      ref.refDims.push_back(d);
    }
    ref.extents.push_back(memref::DimOp::create(b, loc, array, d));
  }
  return ref;
}

SmallVector<Value> unflatten(OpBuilder& b, Location loc, Value flat, ArrayRef<int64_t> shape) {
  SmallVector<Value> coords(shape.size());
  Value rest = flat;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    Value extent = arith::ConstantIndexOp::create(b, loc, shape[d]);
    coords[d] = d == 0 ? rest : arith::RemUIOp::create(b, loc, rest, extent).getResult();
    if (d > 0) rest = arith::DivUIOp::create(b, loc, rest, extent);
  }
  return coords;
}

SmallVector<Value> arrayCoords(OpBuilder& b, Location loc, const BlockRef& ref,
                               ArrayRef<int64_t> offsets, ValueRange dynamicOffsets,
                               ArrayRef<int64_t> sliceSizes, ArrayRef<int64_t> resultShape,
                               ValueRange resultCoords) {
  SmallVector<Value> coords(ref.origin.begin(), ref.origin.end());
  int64_t lead = static_cast<int64_t>(resultShape.size() - sliceSizes.size());
  for (size_t k = 0; k < sliceSizes.size(); ++k) {
    int64_t arrayDim = ref.refDims[k];
    Value within = arith::ConstantIndexOp::create(b, loc, offsets[k]);
    if (!dynamicOffsets.empty()) within = arith::AddIOp::create(b, loc, within, dynamicOffsets[k]);
    bool stretched = sliceSizes[k] == 1 && resultShape[lead + k] != 1;
    if (!stretched) within = arith::AddIOp::create(b, loc, within, resultCoords[lead + k]);
    coords[arrayDim] = arith::AddIOp::create(b, loc, coords[arrayDim], within);
  }
  return coords;
}

Value inBounds(OpBuilder& b, Location loc, const BlockRef& ref, ValueRange coords,
               int64_t lastExtra) {
  Value all = arith::ConstantIntOp::create(b, loc, 1, 1);
  int64_t last = static_cast<int64_t>(coords.size()) - 1;
  for (int64_t d = 0; d <= last; ++d) {
    Value c = coords[d];
    if (d == last && lastExtra > 0)
      c = arith::AddIOp::create(b, loc, c, arith::ConstantIndexOp::create(b, loc, lastExtra));
    auto pred =
        (d == last && lastExtra > 0) ? arith::CmpIPredicate::ule : arith::CmpIPredicate::ult;
    Value ok = arith::CmpIOp::create(b, loc, pred, c, ref.extents[d]);
    all = arith::AndIOp::create(b, loc, all, ok);
  }
  return all;
}

SmallVector<Value> elementCoords(OpBuilder& b, Location loc, const BlockRef& ref,
                                 ArrayRef<int64_t> offsets, ValueRange indices) {
  SmallVector<int64_t> ones(offsets.size(), 1);
  SmallVector<Value> zeros(offsets.size(), arith::ConstantIndexOp::create(b, loc, 0));
  return arrayCoords(b, loc, ref, offsets, indices, ones, ones, zeros);
}

Value loadOrZero(OpBuilder& b, Location loc, const BlockRef& ref, ValueRange coords,
                 Type elementType) {
  auto branch = scf::IfOp::create(
      b, loc, inBounds(b, loc, ref, coords),
      [&](OpBuilder& tb, Location l) {
        scf::YieldOp::create(tb, l, memref::LoadOp::create(tb, l, ref.array, coords).getResult());
      },
      [&](OpBuilder& eb, Location l) {
        scf::YieldOp::create(
            eb, l, arith::ConstantOp::create(eb, l, eb.getZeroAttr(elementType)).getResult());
      });
  return branch.getResult(0);
}

bool lastDimContiguous(const BlockRef& ref, ArrayRef<int64_t> sliceSizes,
                       ArrayRef<int64_t> resultShape) {
  int64_t arrayRank = static_cast<int64_t>(ref.extents.size());
  bool stretched = sliceSizes.back() == 1 && resultShape.back() != 1;
  return !stretched && ref.refDims.back() == arrayRank - 1;
}

}  // namespace mlir::pallas

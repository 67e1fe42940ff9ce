//===- BlockIndexing.h - element coordinates of blocks -------------*- C++ -*-===//
//
// Shared by the GPU and host lowerings: where a block starts in its array,
// how a block coordinate maps to an array coordinate, and the edge mask.
//
//===----------------------------------------------------------------------===//
#ifndef PALLAS_TRANSFORMS_BLOCKINDEXING_H
#define PALLAS_TRANSFORMS_BLOCKINDEXING_H

#include "pallas/Dialect/PallasDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"

namespace mlir::pallas {

/// A `pallas.block` resolved to its array: the block of `array` starting at
/// `origin` (one entry per array dim; 0 for a full dim), whose unsqueezed dims
/// are `refDims`.
struct BlockRef {
  Value array;
  SmallVector<Value> origin;     // element index where the block starts, per array dim
  SmallVector<Value> extents;    // array extents, per array dim
  SmallVector<int64_t> refDims;  // array dim of each ref dim
};

/// Computes origin = index * block for Blocked dims and index for squeezed ones.
BlockRef resolveBlock(OpBuilder& b, Location loc, BlockOp op, Value array, ValueRange indices);

/// Row-major coordinates of the flat index `flat` in `shape`.
/// Example: flat 517 in [8, 256] is [2, 5].
SmallVector<Value> unflatten(OpBuilder& b, Location loc, Value flat, ArrayRef<int64_t> shape);

/// Maps coordinates in the (broadcast) result of a load to array coordinates
/// (block origin + static offset + dynamic offset, when given, + coordinate):
/// result dims are aligned on the right with the slice, slice dims of
/// extent 1 stay at their offset. Example: slice [0][256] of a ref over dim 1
/// of a [rows, cols] array (block origin (r0, c0)) loaded as vector<8x256>:
/// result (i, j) reads array (r0, c0 + j).
SmallVector<Value> arrayCoords(OpBuilder& b, Location loc, const BlockRef& ref,
                               ArrayRef<int64_t> offsets, ValueRange dynamicOffsets,
                               ArrayRef<int64_t> sliceSizes, ArrayRef<int64_t> resultShape,
                               ValueRange resultCoords);

/// i1: every coordinate is inside the array, with `lastExtra` more elements
/// needed along the last array dim (for runs of contiguous elements).
Value inBounds(OpBuilder& b, Location loc, const BlockRef& ref, ValueRange coords,
               int64_t lastExtra = 0);

/// Array coordinates of the one element at static `offsets` plus dynamic
/// `indices` within the block (scalar loads and stores).
SmallVector<Value> elementCoords(OpBuilder& b, Location loc, const BlockRef& ref,
                                 ArrayRef<int64_t> offsets, ValueRange indices);

/// The array element at `coords`, or 0 when it lies outside the array.
Value loadOrZero(OpBuilder& b, Location loc, const BlockRef& ref, ValueRange coords,
                 Type elementType);

/// Whether the last result dim of a load reads contiguous array elements
/// (not stretched by broadcasting, and the ref's last dim is the array's).
bool lastDimContiguous(const BlockRef& ref, ArrayRef<int64_t> sliceSizes,
                       ArrayRef<int64_t> resultShape);

}  // namespace mlir::pallas

#endif  // PALLAS_TRANSFORMS_BLOCKINDEXING_H

//===- PallasDialect.cpp - the pallas kernel dialect ----------------------===//

#include "pallas/Dialect/PallasDialect.h"

#include "llvm/ADT/TypeSwitch.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::pallas;

#include "pallas/Dialect/PallasDialect.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "pallas/Dialect/PallasAttrs.cpp.inc"

void PallasDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "pallas/Dialect/PallasAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "pallas/Dialect/PallasTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "pallas/Dialect/PallasOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// RefType: `!pallas.ref<8x128xf32>`
//===----------------------------------------------------------------------===//

Type RefType::parse(AsmParser& parser) {
  SmallVector<int64_t> shape;
  Type elementType;
  if (parser.parseLess() || parser.parseDimensionList(shape, /*allowDynamic=*/true) ||
      parser.parseType(elementType) || parser.parseGreater())
    return {};
  return RefType::get(parser.getContext(), shape, elementType);
}

void RefType::print(AsmPrinter& printer) const {
  printer << "<";
  for (int64_t d : getShape()) {
    if (ShapedType::isDynamic(d))
      printer << "?x";
    else
      printer << d << "x";
  }
  printer << getElementType() << ">";
}

int64_t RefType::getNumElements() const {  // kDynamic when a dim is full
  int64_t n = 1;
  for (int64_t d : getShape()) {
    if (ShapedType::isDynamic(d)) return ShapedType::kDynamic;
    n *= d;
  }
  return n;
}

#define GET_TYPEDEF_CLASSES
#include "pallas/Dialect/PallasTypes.cpp.inc"

//===----------------------------------------------------------------------===//
// Verifiers
//===----------------------------------------------------------------------===//

LogicalResult BlockOp::verify() {
  auto arrayType = cast<MemRefType>(getArray().getType());
  int64_t rank = arrayType.getRank();
  if (static_cast<int64_t>(getIndices().size()) != rank)
    return emitOpError() << "has " << getIndices().size() << " block indices for a rank-" << rank
                         << " array";
  if (static_cast<int64_t>(getBlockShape().size()) != rank ||
      static_cast<int64_t>(getSqueezed().size()) != rank)
    return emitOpError() << "block_shape and squeezed must have one entry per array dim (" << rank
                         << ")";
  SmallVector<int64_t> refShape;
  for (int64_t d = 0; d < rank; ++d) {
    if (getSqueezed()[d]) {
      if (getBlockShape()[d] != 1) return emitOpError() << "squeezed dim " << d << " must be 1";
      continue;
    }
    if (getBlockShape()[d] <= 0 && !ShapedType::isDynamic(getBlockShape()[d]))
      return emitOpError() << "block dim " << d << " must be positive or ? (the full dim)";
    refShape.push_back(getBlockShape()[d]);
  }
  RefType refType = getRef().getType();
  if (refType.getElementType() != arrayType.getElementType() ||
      ArrayRef<int64_t>(refShape) != refType.getShape())
    return emitOpError() << "result " << refType << " does not match the unsqueezed block shape";
  if (getStaged()) {
    if (llvm::any_of(getBlockShape(), ShapedType::isDynamic))
      return emitOpError() << "a staged block has a static shape";
    if (getSqueezed().back()) return emitOpError() << "a staged block keeps its last dim";
  }
  if (auto swizzle = getSwizzle()) {
    if (!getStaged()) return emitOpError() << "swizzle is for staged blocks";
    if (*swizzle != 0 && *swizzle != 32 && *swizzle != 64 && *swizzle != 128)
      return emitOpError() << "swizzle " << *swizzle << " is not 0, 32, 64 or 128 bytes";
  }
  if (auto tiling = getTiling()) {
    if (!getStaged()) return emitOpError() << "tiling is for staged blocks";
    if (tiling->size() != getBlockShape().size())
      return emitOpError() << "tiling has " << tiling->size() << " dims; the block has "
                           << getBlockShape().size();
    for (auto [d, tile, extent] : llvm::enumerate(*tiling, getBlockShape()))
      if (tile < 1 || tile > kTmaMaxBoxDim || extent % tile != 0)
        return emitOpError() << "tile of " << tile << " elements in dim " << d
                             << " does not divide the block's " << extent
                             << " or is not one TMA box (1 to " << kTmaMaxBoxDim << ")";
    const int64_t rowBytes =
        tiling->back() * (arrayType.getElementType().getIntOrFloatBitWidth() / 8);
    if (auto swizzle = getSwizzle(); swizzle && *swizzle != 0 && rowBytes > *swizzle)
      return emitOpError() << "tile rows of " << rowBytes << " bytes are wider than the "
                           << *swizzle << "-byte swizzle";
  }
  if (auto buffers = getBuffers()) {
    if (!getStaged()) return emitOpError() << "buffers are for staged blocks";
    if (*buffers < 1 || *buffers > kMaxStageBuffers)
      return emitOpError() << "has " << *buffers << " stage buffers; a pipeline keeps 1 to "
                           << kMaxStageBuffers;
  }
  return success();
}

/// Checks that `[offsets, offsets + sizes)` lies inside a block of `shape`
/// (static offsets into static dims; dynamic ones are bounded by the array).
static LogicalResult verifySlice(Operation* op, RefType ref, ArrayRef<int64_t> offsets,
                                 ArrayRef<int64_t> sizes, size_t numDynamicOffsets) {
  if (static_cast<int64_t>(offsets.size()) != ref.getRank() ||
      static_cast<int64_t>(sizes.size()) != ref.getRank())
    return op->emitOpError() << "slice must have one offset and size per block dim ("
                             << ref.getRank() << ")";
  if (numDynamicOffsets != 0 && static_cast<int64_t>(numDynamicOffsets) != ref.getRank())
    return op->emitOpError() << "needs no dynamic offsets or one per block dim (" << ref.getRank()
                             << ")";
  for (int64_t d = 0; d < ref.getRank(); ++d) {
    if (sizes[d] <= 0) return op->emitOpError() << "slice size of dim " << d << " must be positive";
    if (numDynamicOffsets != 0 || ShapedType::isDynamic(ref.getShape()[d])) continue;
    if (offsets[d] < 0 || offsets[d] + sizes[d] > ref.getShape()[d])
      return op->emitOpError() << "slice [" << offsets[d] << ", " << offsets[d] + sizes[d]
                               << ") of dim " << d << " is outside the block extent "
                               << ref.getShape()[d];
  }
  return success();
}

LogicalResult LoadOp::verify() {
  RefType ref = getRef().getType();
  if (failed(verifySlice(*this, ref, getOffsets(), getSizes(), getDynamicOffsets().size())))
    return failure();
  VectorType result = getResult().getType();
  if (result.getElementType() != ref.getElementType())
    return emitOpError() << "result element type differs from the ref's";
  if (auto padding = getPaddingAttr(); padding && padding.getType() != ref.getElementType())
    return emitOpError() << "padding " << padding << " is not of the element type "
                         << ref.getElementType();
  // Numpy broadcasting from the slice shape to the result shape.
  ArrayRef<int64_t> sizes = getSizes();
  int64_t lead = result.getRank() - static_cast<int64_t>(sizes.size());
  if (lead < 0) return emitOpError() << "result rank is smaller than the slice rank";
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != 1 && sizes[d] != result.getShape()[lead + d])
      return emitOpError() << "slice dim " << d << " of extent " << sizes[d]
                           << " cannot broadcast to " << result.getShape()[lead + d];
  return success();
}

LogicalResult ClusterPeerOp::verify() {
  auto block = getRef().getDefiningOp<BlockOp>();
  auto scratch = block ? block.getArray().getDefiningOp<ScratchOp>() : ScratchOp();
  if (!scratch || scratch.getAccumulator())
    return emitOpError() << "views the block of a scratch operand (shared memory), not "
                         << (scratch ? "an accumulator (registers)" : "this ref");
  return success();
}

TypedAttr LoadOp::getPaddingOrZero() {
  if (auto padding = getPaddingAttr()) return padding;
  return cast<TypedAttr>(Builder(getContext()).getZeroAttr(getResult().getType().getElementType()));
}

void LoadOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>& effects) {
  effects.emplace_back(MemoryEffects::Read::get(), &getRefMutable());
}

LogicalResult StoreOp::verify() {
  if (getRef().getDefiningOp<ClusterPeerOp>())
    return emitOpError() << "stores through a cluster peer's view; a peer's scratch is read-only";
  RefType ref = getRef().getType();
  Type value = getValue().getType();
  if (getElementTypeOrSelf(value) != ref.getElementType())
    return emitOpError() << "stored element type " << getElementTypeOrSelf(value)
                         << " differs from the ref's " << ref.getElementType();
  SmallVector<int64_t> sizes(ref.getRank(), 1);  // a scalar is a 1x..x1 slice
  if (auto vector = dyn_cast<VectorType>(value))
    sizes.assign(vector.getShape().begin(), vector.getShape().end());
  return verifySlice(*this, ref, getOffsets(), sizes, getDynamicOffsets().size());
}

void StoreOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>& effects) {
  effects.emplace_back(MemoryEffects::Write::get(), &getRefMutable());
}

LogicalResult IotaOp::verify() {
  if (getDimension() < 0 || getDimension() >= getResult().getType().getRank())
    return emitOpError() << "dimension " << getDimension() << " is out of range";
  return success();
}

// The error record holds the failure count, the check number and 3 values of
// two halves each: 8 int32.
LogicalResult CheckOp::verify() {
  if (getCheck() < 0) return emitOpError() << "check number " << getCheck() << " is negative";
  if (getValues().size() > 6)
    return emitOpError() << "has " << getValues().size()
                         << " value halves; a check records at most 3 values (6 halves)";
  auto type = cast<MemRefType>(getErrors().getType());
  if (!type.isDynamicDim(0) && type.getDimSize(0) < 8)
    return emitOpError() << "error record has " << type.getDimSize(0) << " int32; it needs 8";
  return success();
}

LogicalResult ConvertLayoutOp::verify() {
  auto isLayout = [](Attribute a) {
    return isa<WarpgroupStridedLayoutAttr, StridedRowsLayoutAttr, ReplicatedLayoutAttr,
               TiledLayoutAttr>(a);
  };
  if (!isLayout(getFrom()) || !isLayout(getTo()))
    return emitOpError() << "from and to must be layouts (#pallas.strided, "
                            "#pallas.strided_rows, #pallas.replicated, #pallas.tiled)";
  if (getFrom() == getTo()) return emitOpError() << "converts " << getFrom() << " to itself";
  VectorType from = getSource().getType(), to = getResult().getType();
  if (from.getElementType() != to.getElementType())
    return emitOpError() << "changes the element type; a layout conversion moves data only";
  int64_t lead = to.getRank() - from.getRank();
  if (lead < 0) return emitOpError() << "result rank is smaller than the source rank";
  for (int64_t d = 0; d < from.getRank(); ++d)
    if (from.getShape()[d] != 1 && from.getShape()[d] != to.getShape()[lead + d])
      return emitOpError() << "source dim " << d << " of extent " << from.getShape()[d]
                           << " cannot broadcast to " << to.getShape()[lead + d];
  return success();
}

LogicalResult DotOp::verify() {
  VectorType a = getA().getType(), b = getB().getType(), result = getResult().getType();
  if (a.getRank() != 2 || b.getRank() != 2 || result.getRank() != 2)
    return emitOpError() << "multiplies 2-D blocks; got " << a << " and " << b;
  Type et = a.getElementType();
  if (et != b.getElementType() || !(et.isF16() || et.isBF16()))
    return emitOpError() << "operands must both be f16 or both bf16; got " << a << " and " << b;
  if (!result.getElementType().isF32())
    return emitOpError() << "accumulates in f32; the result is " << result;
  const int64_t m = getM(), k = getK();
  int64_t bk = getTransposeB() ? b.getShape()[1] : b.getShape()[0];
  int64_t n = getTransposeB() ? b.getShape()[0] : b.getShape()[1];
  if (bk != k)
    return emitOpError() << "contracts a's dim " << (getTransposeA() ? 0 : 1) << " (" << k
                         << ") with b's dim " << (getTransposeB() ? 1 : 0) << " (" << bk << ")";
  if (result.getShape()[0] != m || result.getShape()[1] != n)
    return emitOpError() << "result " << result << " is not [" << m << ", " << n << "]";
  if (getAcc() && getAcc().getType() != result)
    return emitOpError() << "accumulator " << getAcc().getType() << " is not the result type "
                         << result;
  return success();
}

LogicalResult WgmmaOp::verify() {
  auto acc = cast<RefType>(getAcc().getType()), b = cast<RefType>(getB().getType());
  // a: a ref of a staged block, or a value in registers.
  Type a = getA().getType();
  auto aRef = dyn_cast<RefType>(a);
  ArrayRef<int64_t> aShape = aRef ? aRef.getShape() : cast<VectorType>(a).getShape();
  Type et = aRef ? aRef.getElementType() : cast<VectorType>(a).getElementType();
  if (acc.getShape().size() != 2 || aShape.size() != 2 || b.getShape().size() != 2)
    return emitOpError() << "multiplies 2-D blocks into a 2-D accumulator; got " << a << ", " << b
                         << " and " << acc;
  if (et != b.getElementType() || !(et.isF16() || et.isBF16()))
    return emitOpError() << "operands must both be f16 or both bf16; got " << a << " and " << b;
  if (!acc.getElementType().isF32()) return emitOpError() << "accumulates in f32; got " << acc;
  if (getTransposeA() && !aRef)
    return emitOpError() << "transposes a value operand a; only a staged block's ref is read "
                            "transposed (registers are in the accumulator's layout)";
  const bool ta = getTransposeA();
  const int64_t m = aShape[ta ? 1 : 0], k = aShape[ta ? 0 : 1];
  const int64_t bk = getTransposeB() ? b.getShape()[1] : b.getShape()[0];
  const int64_t n = getTransposeB() ? b.getShape()[0] : b.getShape()[1];
  if (bk != k)
    return emitOpError() << "contracts a's dim " << (ta ? 0 : 1) << " (" << k << ") with b's dim "
                         << (getTransposeB() ? 1 : 0) << " (" << bk << ")";
  if (acc.getShape()[0] != m || acc.getShape()[1] != n)
    return emitOpError() << "accumulator " << acc << " is not [" << m << ", " << n << "]";
  return success();
}

//===----------------------------------------------------------------------===//
// Explicit async copies and barriers
//===----------------------------------------------------------------------===//

LogicalResult RunScopedOp::verify() {
  Block& body = getBody().front();
  size_t buffers = 0;
  bool barriersSeen = false;
  for (BlockArgument arg : body.getArguments()) {
    if (auto type = dyn_cast<MemRefType>(arg.getType())) {
      if (barriersSeen) return emitOpError() << "buffers come before barriers";
      if (!type.hasStaticShape() || !type.getLayout().isIdentity())
        return emitOpError() << "buffer " << buffers << " of type " << type
                             << " is not a static row-major memref";
      ++buffers;
      continue;
    }
    auto bars = dyn_cast<BarriersType>(arg.getType());
    if (!bars)
      return emitOpError() << "allocates " << arg.getType() << "; only buffers and barriers";
    barriersSeen = true;
    // Each thread tracks the phases of a barrier array in the bits of one i32.
    if (bars.getCount() < 1 || bars.getCount() > 32)
      return emitOpError() << "has an array of " << bars.getCount() << " barriers; 1 to 32";
    if (bars.getArrivals() < 1)
      return emitOpError() << "has barriers of " << bars.getArrivals() << " arrivals; at least 1";
  }
  if (getSwizzles().size() != buffers)
    return emitOpError() << "has " << getSwizzles().size() << " swizzles for " << buffers
                         << " buffers";
  for (int64_t s : getSwizzles())
    if (s != 0 && s != 32 && s != 64 && s != 128)
      return emitOpError() << "swizzle " << s << " is not 0, 32, 64 or 128 bytes";
  return success();
}

std::optional<int64_t> RunScopedOp::swizzleOf(Value buffer) {
  auto arg = dyn_cast<BlockArgument>(buffer);
  if (!arg) return std::nullopt;
  auto scope = dyn_cast_or_null<RunScopedOp>(arg.getOwner()->getParentOp());
  if (!scope || !isa<MemRefType>(arg.getType())) return std::nullopt;
  return scope.getSwizzles()[arg.getArgNumber()];
}

/// A copy between `array` at `offsets` and run_scoped buffer `buffer`.
static LogicalResult verifyCopy(Operation* op, Value array, size_t offsets, Value buffer) {
  auto arrayType = cast<MemRefType>(array.getType());
  auto bufferType = cast<MemRefType>(buffer.getType());
  if (!RunScopedOp::swizzleOf(buffer))
    return op->emitOpError() << "copies a buffer that is not allocated by pallas.run_scoped";
  if (static_cast<int64_t>(offsets) != arrayType.getRank())
    return op->emitOpError() << "has " << offsets << " offsets for a rank-" << arrayType.getRank()
                             << " array";
  if (bufferType.getRank() != arrayType.getRank())
    return op->emitOpError() << "copies a rank-" << bufferType.getRank() << " buffer to a rank-"
                             << arrayType.getRank() << " array; the ranks must agree";
  if (bufferType.getElementType() != arrayType.getElementType())
    return op->emitOpError() << "copies " << bufferType.getElementType() << " elements to "
                             << arrayType.getElementType();
  return success();
}

LogicalResult CopyToSharedOp::verify() {
  return verifyCopy(*this, getArray(), getOffsets().size(), getBuffer());
}

LogicalResult CopyToGlobalOp::verify() {
  if (failed(verifyCopy(*this, getArray(), getOffsets().size(), getBuffer()))) return failure();
  Type et = getBuffer().getType().getElementType();
  if (getAdd() && !et.isF32() && !et.isInteger(32))
    return emitOpError() << "adds " << et << " elements; the add reduction is for f32 and i32";
  return success();
}

#define GET_OP_CLASSES
#include "pallas/Dialect/PallasOps.cpp.inc"

void LoadScalarOp::getEffects(
    SmallVectorImpl<SideEffects::EffectInstance<MemoryEffects::Effect>>& effects) {
  effects.emplace_back(MemoryEffects::Read::get(), &getRefMutable());
}

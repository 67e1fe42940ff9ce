//===- MatmulRules.cpp - pallas.dot and accumulators: wgmma, or FMAs ----------===//
//
// `pallas.dot` (acc + a @ b, f16/bf16 in, f32 out) produces its result in the
// WGMMA accumulator layout (PallasLayouts.td, `wgmmaAccumulator`), whatever
// the target, so that epilogues and accumulators see one layout:
//
//  - mma=wgmma (sm_90a): the warpgroup multiplies with
//    `wgmma.mma_async.m64nNk16` reading a and b from shared memory through
//    matrix descriptors, one instruction per 64 rows of a, 16 of K and at
//    most 256 columns of the result. An operand that is a whole-block load
//    of a block staged there (InShared, a pipeline's stage buffer) is read in
//    place when its rows are exactly one swizzle span (128 bytes: 64 bf16 of
//    K); any other operand value is first stored by the threads into a
//    buffer of that layout (the rule's, fenced for the async proxy).
//  - mma=fma (sm_80, until an mma.sync rule exists): a and b go through
//    row-major shared buffers and every thread sums its accumulator
//    elements over K with FMAs. Correct, and as slow as it sounds.
//
// The operand layout wgmma reads (PTX ISA, "Shared memory matrix layout",
// K-major with swizzle S = 32, 64 or 128 bytes): an operand tile of R rows
// (M of a, N of b) by K is cut along K into atom columns of S bytes
// (S / 2 elements); atom column c holds rows 0..R-1 of S bytes each, at
// c * R * S; inside it, row r's 16-byte piece p is stored at piece
// p ^ ((r * S >> 7) % (S / 16)): the same swizzle TMA writes
// (StagingRules.cpp), which is why a staged block is read in place.
// Descriptor (64 bits): start address >> 4 in bits 0-13, leading byte
// offset >> 4 in 16-29 (unused for swizzled K-major tiles: 1), stride byte
// offset >> 4 in 32-45 (8 * S: from one 8-row group to the next), swizzle in
// 62-63 (1: 128 bytes, 2: 64, 3: 32).
// Worked example: a = [128, 64] bf16 staged with S = 128 at shared address
// 0x400: the instruction for rows 64..127 and K 16..31 has start 0x400 +
// 64 * 128 + 32 = 0x2420, i.e. descriptor 0x4000_0040_0001_0242.
//
// Accumulators (spec.accumulator) are a per-thread alloca of the fragment,
// loaded and stored whole, which LLVM promotes to registers.
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

#include <map>

namespace mlir::pallas::gpu_lowering {
namespace {

constexpr int64_t kWgmmaMaxN = 256;
constexpr unsigned kSharedSpace = 3;

/// An f16/bf16 operand tile of `rows` x `k` in shared memory, K-major, in the
/// canonical layout above.
struct SharedOperand {
  Value base;  // index: its shared address (a multiple of 8 * swizzle)
  int64_t rows = 0, k = 0, swizzle = 0;
};

/// The swizzle wgmma reads an operand with K `k` (f16/bf16) in: the widest
/// span that divides its rows.
int64_t swizzleFor(int64_t k) {
  for (int64_t s : {128, 64, 32})
    if ((k * 2) % s == 0) return s;
  return 0;
}

Value idx(OpBuilder& b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// The staged block `load` reads, if it is a whole-block load of one in the
/// layout wgmma reads (rows of exactly one swizzle span).
const StagedBlock* stagedForWgmma(Value operand, bool kMajor, const GpuLowering& g) {
  auto load = operand.getDefiningOp<LoadOp>();
  if (!load || !kMajor || !load.getDynamicOffsets().empty()) return nullptr;
  auto it = g.staged.find(load.getRef());
  if (it == g.staged.end()) return nullptr;
  const StagedBlock& st = it->second;
  VectorType type = load.getResult().getType();
  auto refType = cast<RefType>(load.getRef().getType());
  if (st.output || st.elementBytes != 2 || st.swizzle == 0 ||
      refType.getShape() != type.getShape() ||
      llvm::any_of(load.getOffsets(), [](int64_t o) { return o != 0; }))
    return nullptr;
  // Rows of exactly one swizzle span, laid out row after row.
  if (type.getShape()[1] * 2 != st.swizzle || st.copyBox.back() != st.box.back()) return nullptr;
  if (type.getShape()[0] % 8 != 0) return nullptr;
  return &st;
}

}  // namespace

bool dotReadsStagedOperand(DotOp dot, unsigned operandNumber, const GpuLowering& g) {
  if (!g.wgmma) return false;
  bool kMajor = operandNumber == 0 || dot.getTransposeB();
  return stagedForWgmma(dot->getOperand(operandNumber), kMajor, g) != nullptr;
}

bool onlyFeedsStagedDots(LoadOp load, const GpuLowering& g) {
  if (load.getResult().use_empty()) return false;
  return llvm::all_of(load.getResult().getUses(), [&](OpOperand& use) {
    auto dot = dyn_cast<DotOp>(use.getOwner());
    return dot && use.getOperandNumber() < 2 &&
           dotReadsStagedOperand(dot, use.getOperandNumber(), g);
  });
}

namespace {

/// The shared address of element 0 of `memref` (a workgroup memref), as index.
Value sharedAddress(OpBuilder& b, Location loc, Value memref) {
  return memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
}

/// Operand `operandNumber` of `dot` in shared memory, K-major: in place when
/// staged so, else stored by the threads into a rule buffer (`rows` x `k`).
SharedOperand operandInShared(DotOp dot, unsigned operandNumber, GpuLowering& g, OpBuilder& b) {
  Location loc = dot.getLoc();
  Value v = dot->getOperand(operandNumber);
  const bool transposed = operandNumber == 1 && !dot.getTransposeB();  // b as [K, N]
  VectorType type = cast<VectorType>(v.getType());
  const int64_t rows = operandNumber == 0 ? dot.getM() : dot.getN(), k = dot.getK();
  if (const StagedBlock* st = stagedForWgmma(v, !transposed, g)) {
    Value slot = arith::MulIOp::create(b, loc, st->slot, idx(b, loc, st->slotElements * 2));
    return {arith::AddIOp::create(b, loc, sharedAddress(b, loc, st->buffer), slot), rows, k,
            st->swizzle};
  }
  const int64_t swizzle = swizzleFor(k);
  Value buffer =
      g.sharedBuffer(b, loc, rows * k, type.getElementType(), SharedLifetime::kRule, 8 * swizzle,
                     operandNumber == 0 ? "wgmma operand a" : "wgmma operand b");
  // Each thread stores its runs' elements where the layout puts them.
  Value frag = *g.operandIn(b, loc, v, g.strided());
  const int64_t vec = g.strided().getVec(), perAtom = swizzle / 2;
  for (int64_t r = 0; r < g.runs(type); ++r) {
    SmallVector<Value> coords = unflatten(b, loc, g.runStart(b, loc, r), type.getShape());
    for (int64_t j = 0; j < vec; ++j) {
      Value x = coords[0], y = arith::AddIOp::create(b, loc, coords[1], idx(b, loc, j));
      Value row = transposed ? y : x, kk = transposed ? x : y;
      // atom * rows * S + row * S + (kk % perAtom) * 2, swizzled, in elements.
      Value atom = arith::DivUIOp::create(b, loc, kk, idx(b, loc, perAtom));
      Value inAtom = arith::RemUIOp::create(b, loc, kk, idx(b, loc, perAtom));
      Value bytes = arith::AddIOp::create(
          b, loc,
          arith::AddIOp::create(b, loc,
                                arith::MulIOp::create(b, loc, atom, idx(b, loc, rows * swizzle)),
                                arith::MulIOp::create(b, loc, row, idx(b, loc, swizzle))),
          arith::MulIOp::create(b, loc, inAtom, idx(b, loc, 2)));
      Value piece =
          arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, bytes, idx(b, loc, 7)),
                                idx(b, loc, swizzle / 16 - 1));
      Value at = arith::XOrIOp::create(b, loc, bytes,
                                       arith::ShLIOp::create(b, loc, piece, idx(b, loc, 4)));
      Value element = vector::ExtractOp::create(b, loc, frag, r * vec + j);
      memref::StoreOp::create(b, loc, element, buffer,
                              ValueRange{arith::DivUIOp::create(b, loc, at, idx(b, loc, 2))});
    }
  }
  return {sharedAddress(b, loc, buffer), rows, k, swizzle};
}

/// The matrix descriptor of rows [row0, row0 + 8 m) and K [k0, k0 + 16) of `op`.
Value descriptor(OpBuilder& b, Location loc, const SharedOperand& op, int64_t row0, int64_t k0) {
  const int64_t perAtom = op.swizzle / 2;
  const int64_t offset =
      (k0 / perAtom) * op.rows * op.swizzle + row0 * op.swizzle + (k0 % perAtom) * 2;
  Value start = arith::AddIOp::create(b, loc, op.base, idx(b, loc, offset));
  Value start64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), start);
  auto c64 = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 64); };
  // (address & 0x3ffff) >> 4 in bits 0-13.
  Value field =
      arith::ShRUIOp::create(b, loc, arith::AndIOp::create(b, loc, start64, c64(0x3ffff)), c64(4));
  const int64_t mode = op.swizzle == 128 ? 1 : op.swizzle == 64 ? 2 : 3;
  const uint64_t fixed =
      (uint64_t{1} << 16) | (uint64_t(8 * op.swizzle >> 4) << 32) | (uint64_t(mode) << 62);
  return arith::OrIOp::create(b, loc, field, c64(static_cast<int64_t>(fixed)));
}

/// The fragment registers [first, first + count) as the LLVM struct wgmma takes.
Value packStruct(OpBuilder& b, Location loc, Value frag, int64_t first, int64_t count) {
  SmallVector<Type> fields(count, b.getF32Type());
  auto type = LLVM::LLVMStructType::getLiteral(b.getContext(), fields);
  Value s = LLVM::UndefOp::create(b, loc, type);
  for (int64_t i = 0; i < count; ++i)
    s = LLVM::InsertValueOp::create(b, loc, s, vector::ExtractOp::create(b, loc, frag, first + i),
                                    ArrayRef<int64_t>{i});
  return s;
}

Value unpackStruct(OpBuilder& b, Location loc, Value s, Value frag, int64_t first, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    frag = vector::InsertOp::create(
        b, loc, LLVM::ExtractValueOp::create(b, loc, s, ArrayRef<int64_t>{i}), frag, first + i);
  return frag;
}

/// acc + a @ b with wgmma (see the file comment).
Value multiplyWithWgmma(DotOp dot, GpuLowering& g, OpBuilder& b, Value frag) {
  Location loc = dot.getLoc();
  MLIRContext* ctx = b.getContext();
  const int64_t m = dot.getM(), n = dot.getN(), k = dot.getK();
  SharedOperand a = operandInShared(dot, 0, g, b);
  SharedOperand bOp = operandInShared(dot, 1, g, b);
  bool stored = !dotReadsStagedOperand(dot, 0, g) || !dotReadsStagedOperand(dot, 1, g);
  if (stored) {  // the threads' writes, then the async proxy (wgmma) reads them
    NVVM::FenceProxyOp::create(b, loc, NVVM::ProxyKindAttr::get(ctx, NVVM::ProxyKind::async_shared),
                               NVVM::SharedSpaceAttr::get(ctx, NVVM::SharedSpace::shared_cta));
    gpu::BarrierOp::create(b, loc);
  }
  auto elementType = dot.getA().getType().getElementType().isBF16() ? NVVM::WGMMATypes::bf16
                                                                    : NVVM::WGMMATypes::f16;
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  for (int64_t k0 = 0; k0 < k; k0 += 16)
    for (int64_t m0 = 0; m0 < m; m0 += 64)
      for (int64_t n0 = 0; n0 < n; n0 += kWgmmaMaxN) {
        const int64_t nn = std::min(kWgmmaMaxN, n - n0);
        // Registers of rows m0.. and columns n0..: ((m0/64) * n/8 + n0/8) * 4 on (layout order).
        const int64_t first = ((m0 / 64) * (n / 8) + n0 / 8) * 4, count = nn / 2;
        Value in = packStruct(b, loc, frag, first, count);
        auto out = NVVM::WgmmaMmaAsyncOp::create(
            b, loc, in.getType(), in, descriptor(b, loc, a, m0, k0),
            descriptor(b, loc, bOp, n0, k0), NVVM::MMAShapeAttr::get(ctx, 64, nn, 16),
            NVVM::WGMMATypesAttr::get(ctx, elementType),
            NVVM::WGMMATypesAttr::get(ctx, elementType),
            NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32),
            NVVM::WGMMAScaleOutAttr::get(ctx, NVVM::WGMMAScaleOut::one),
            NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one),
            NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one),
            NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::row),
            NVVM::MMALayoutAttr::get(ctx, NVVM::MMALayout::col), NVVM::MMAIntOverflowAttr());
        frag = unpackStruct(b, loc, out.getResult(), frag, first, count);
      }
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  // Rule buffers are dead after the rule: no thread may reuse the bytes
  // before every warp's wgmma has read them.
  if (stored) gpu::BarrierOp::create(b, loc);
  return frag;
}

/// acc + a @ b with FMAs: a and b row-major in shared memory, each thread
/// summing its accumulator elements over K.
Value multiplyWithFma(DotOp dot, GpuLowering& g, OpBuilder& b, Value frag) {
  Location loc = dot.getLoc();
  const int64_t k = dot.getK(), m = dot.getM(), n = dot.getN();
  auto store = [&](Value v, StringRef purpose) {
    auto type = cast<VectorType>(v.getType());
    Value buffer = g.sharedBuffer(b, loc, type.getNumElements(), type.getElementType(),
                                  SharedLifetime::kRule, 16, purpose);
    g.storeRunsToShared(b, loc, *g.operandIn(b, loc, v, g.strided()), type, buffer);
    return buffer;
  };
  Value a = store(dot.getA(), "dot operand a"), bm = store(dot.getB(), "dot operand b");
  gpu::BarrierOp::create(b, loc);
  auto layout = cast<TiledLayoutAttr>(g.layoutOf(dot.getResult()));
  SmallVector<int64_t> shape{m, n};
  SmallVector<Value> origin = g.tiledThreadOrigin(b, loc, layout, shape);
  const int64_t regs = layout.registersPerThread(shape);
  // Element (row, k) of a is at row * K + k; element (k, col) of b at k * N +
  // col ([K, N]) or col * K + k ([N, K]). With the thread's origin (r0, c0)
  // and register r's constant offset (dr, dc), each is a per-thread base
  // plus the loop's k term plus a constant, so the loads take immediate
  // offsets and few registers; the thread's registers share 4 rows of a and
  // N / 4 columns of b per step, each loaded once.
  Value aBase = arith::MulIOp::create(b, loc, origin[0], idx(b, loc, k));
  Value bBase = dot.getTransposeB()
                    ? arith::MulIOp::create(b, loc, origin[1], idx(b, loc, k)).getResult()
                    : origin[1];
  Type f32 = b.getF32Type();
  auto loop = scf::ForOp::create(
      b, loc, idx(b, loc, 0), idx(b, loc, k), idx(b, loc, 1), ValueRange{frag},
      [&](OpBuilder& lb, Location l, Value kk, ValueRange carry) {
        Value acc = carry[0];
        Value aStep = arith::AddIOp::create(lb, l, aBase, kk);
        Value bStep = arith::AddIOp::create(
            lb, l, bBase,
            dot.getTransposeB() ? kk : arith::MulIOp::create(lb, l, kk, idx(lb, l, n)).getResult());
        std::map<int64_t, Value> aLoaded, bLoaded;  // by constant offset
        auto load = [&](std::map<int64_t, Value>& cache, Value buffer, Value base, int64_t offset) {
          Value& v = cache[offset];
          if (!v)
            v = arith::ExtFOp::create(lb, l, f32,
                                      memref::LoadOp::create(lb, l, buffer,
                                                             ValueRange{arith::AddIOp::create(
                                                                 lb, l, base, idx(lb, l, offset))})
                                          .getResult());
          return v;
        };
        for (int64_t r = 0; r < regs; ++r) {
          SmallVector<int64_t> at = layout.elementAt(shape, 0, 0, r);
          Value x = load(aLoaded, a, aStep, at[0] * k);
          Value y = load(bLoaded, bm, bStep, dot.getTransposeB() ? at[1] * k : at[1]);
          Value sum = arith::AddFOp::create(lb, l, vector::ExtractOp::create(lb, l, acc, r),
                                            arith::MulFOp::create(lb, l, x, y));
          acc = vector::InsertOp::create(lb, l, sum, acc, r);
        }
        scf::YieldOp::create(lb, l, ValueRange{acc});
      });
  gpu::BarrierOp::create(b, loc);
  return loop.getResult(0);
}

LogicalResult lowerDot(DotOp dot, GpuLowering& g, OpBuilder& b) {
  Location loc = dot.getLoc();
  const int64_t m = dot.getM(), n = dot.getN(), k = dot.getK();
  if (m % 64 != 0 || n % 8 != 0 || k % 16 != 0)
    return dot.emitOpError("multiplies [")
           << m << ", " << k << "] by [" << k << ", " << n
           << "]; the GPU's warpgroup MMA needs M a multiple of 64, N of 8 and K of 16";
  Attribute layout = g.layoutOf(dot.getResult());
  if (!isa_and_nonnull<TiledLayoutAttr>(layout))
    return dot.emitOpError("the result must be in the WGMMA accumulator layout, not ") << layout;
  VectorType fragType = g.threadType(dot.getResult().getType(), layout);
  Value frag;
  if (dot.getAcc()) {
    FailureOr<Value> acc = g.operandIn(b, loc, dot.getAcc(), layout);
    if (failed(acc))
      return dot.emitOpError("the accumulator is in layout ")
             << g.layoutOf(dot.getAcc()) << "; pallas-assign-layouts converts it to " << layout;
    frag = *acc;
  } else {
    frag = arith::ConstantOp::create(b, loc, b.getZeroAttr(fragType));
  }
  g.map.map(dot.getResult(),
            g.wgmma ? multiplyWithWgmma(dot, g, b, frag) : multiplyWithFma(dot, g, b, frag));
  return success();
}

}  // namespace

// --- Accumulators -------------------------------------------------------------

LogicalResult lowerAccumulatorBlock(BlockOp blk, GpuLowering& g, OpBuilder& b) {
  auto layout = TiledLayoutAttr::getWgmmaAccumulator(b.getContext());
  auto type = cast<RefType>(blk.getResult().getType());
  std::string error;
  if (failed(layout.tiledShape(type.getShape(), &error)))
    return blk.emitOpError("accumulator of shape [")
           << type.getShape()[0] << ", " << type.getShape()[1]
           << "] does not fit the WGMMA accumulator layout: " << error;
  auto fragType = VectorType::get({layout.registersPerThread(type.getShape())}, b.getF32Type());
  // One alloca per accumulator, however many blocks of it the body takes.
  Value storage = g.accumulators.lookup(blk.getArray());
  if (!storage) {
    OpBuilder eb = g.entryBuilder();
    Value one = LLVM::ConstantOp::create(eb, blk.getLoc(), eb.getI32Type(), 1);
    storage = LLVM::AllocaOp::create(eb, blk.getLoc(), LLVM::LLVMPointerType::get(b.getContext()),
                                     fragType, one);
    g.accumulators[blk.getArray()] = storage;
  }
  g.accumulators[blk.getResult()] = storage;
  return success();
}

LogicalResult lowerAccumulatorLoad(LoadOp load, GpuLowering& g, OpBuilder& b) {
  Attribute layout = g.layoutOf(load.getResult());
  VectorType fragType = g.threadType(load.getResult().getType(), layout);
  g.map.map(load.getResult(),
            LLVM::LoadOp::create(b, load.getLoc(), fragType, g.accumulators.at(load.getRef())));
  return success();
}

LogicalResult lowerAccumulatorStore(StoreOp store, GpuLowering& g, OpBuilder& b) {
  auto layout = TiledLayoutAttr::getWgmmaAccumulator(b.getContext());
  FailureOr<Value> frag = g.operandIn(b, store.getLoc(), store.getValue(), layout);
  if (failed(frag))
    return store.emitOpError("stores a value in layout ")
           << g.layoutOf(store.getValue()) << " to an accumulator; it must be in " << layout;
  LLVM::StoreOp::create(b, store.getLoc(), *frag, g.accumulators.at(store.getRef()));
  return success();
}

void populateMatmulRules(RuleRegistry& rules) {
  rules.add(DotOp::getOperationName(), ruleFor(lowerDot));
}

}  // namespace mlir::pallas::gpu_lowering

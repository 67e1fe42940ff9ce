//===- MatmulRules.cpp - pallas.dot and accumulators: wgmma or mma.sync -------===//
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
//  - mma=mma_sync (sm_80): ldmatrix loads a's and b's fragments from the
//    stage buffers a pipeline copied them into (in place, through the
//    stage's swizzle) or from padded row-major buffers the threads fill, and
//    each warp multiplies its 16 rows of every 64 with `mma.sync.m16n8k16`
//    (multiplyWithMmaSync).
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
// b as [K, N] (not transpose_b) is read in place N-major (the instruction's
// imm-trans-b = 1) when it was staged with a tiling (InShared::tiling) of
// [tk, S / 2]: each tile one swizzle span of N wide, as TMA writes it. The
// canonical N-major layout (PTX ISA; CuTe writes it ((T, S/16, n), (8, k)) :
// ((1, T, LBO), (S/16 T, SBO)) with T = 8 elements): N-element c of K row r
// is at (c / (S/2)) * LBO + (r / 8) * SBO + (r % 8) * S + (c % (S/2)) * 2,
// then the same swizzle. In the tiled stage LBO is the distance between
// adjacent tiles along N (tk * S bytes) and SBO between 8-row groups of K
// (8 * S inside a tile, tk % 16 == 0; with tk = 8 the next row of tiles).
// Worked example: b = [64, 128] bf16, tiling [64, 64], S = 128, at 0x400:
// LBO = 64 * 128 = 8192, SBO = 1024; the instruction for K 16..31 (all
// 128 columns: tiles 0 and 1) starts at 0x400 + 16 * 128 = 0xc00, i.e.
// descriptor 0x4000_0040_0200_00c0.
//
// a as [K, M] (transpose_a: a transposed view, matmul's split-K of a [K, N]
// B) is read the same way M-major (imm-trans-a = 1): the same tiled stage,
// the same descriptor fields with M for N. Warpgroup w's rows 64 w.. are
// (64 w / (S / 2)) tiles further: 64 w * tk * 2 bytes (fromRow). Worked
// example: a = [64, 128] bf16 (K, M) tiled [8, 64], S = 128, two
// warpgroups: warpgroup 1 starts 64 * 8 * 2 = 1024 bytes (one tile of 8 K
// rows) further, and K 16..31 is 2 rows of tiles (2 * 2 * 1024 bytes) on.
//
// Several warpgroups (a program of 128 W threads, W > 1: CUTLASS's
// cooperative consumers): the accumulator layout gives warpgroup w rows
// [64 w, 64 w + 64) (PallasLayouts.td), so each warpgroup issues the
// instructions of its own rows, `a`'s descriptors starting 64 w rows
// further (K-major: 64 w S bytes), and its registers are those of one m64
// instruction. Worked example, [128, 256] = a [128, 64] @ b^T over 256
// threads: warpgroup 1 issues four m64n256k16, rows 64..127, its first
// descriptor starting at a + 64 * 128 bytes; 128 accumulator registers a
// thread. On sm_80 warp 4 w + v multiplies rows 64 w + 16 v .. + 15.
//
// Accumulators (spec.accumulator) are a per-thread alloca of the fragment,
// loaded and stored whole, which LLVM promotes to registers.
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Matchers.h"

namespace mlir::pallas::gpu_lowering {
namespace {

constexpr int64_t kWgmmaMaxN = 256;

/// An f16/bf16 operand tile of `rows` (M of a, N of b) x `k` in shared
/// memory, in one of the canonical layouts above: K-major, or N-major from a
/// stage tiled [tileK, swizzle / 2].
struct SharedOperand {
  Value base;  // index: its shared address (a multiple of 8 * swizzle)
  int64_t rows = 0, k = 0, swizzle = 0;
  bool nMajor = false;
  int64_t tileK = 0;  // N-major: the K rows of one tile of the stage

  /// Byte offset from `base` of element (row0, k0): the descriptor's start.
  int64_t offset(int64_t row0, int64_t k0) const {
    const int64_t span = swizzle / 2;  // elements in one swizzle span
    if (!nMajor) return (k0 / span) * rows * swizzle + row0 * swizzle + (k0 % span) * 2;
    const int64_t tile = (k0 / tileK) * (rows / span) + row0 / span;
    return tile * tileK * swizzle + (k0 % tileK) * swizzle + (row0 % span) * 2;
  }
  /// This operand from row `row` on: K-major (row a multiple of 8) one
  /// swizzle span per row further, whatever the K block (offset is linear in
  /// row0); MN-major (row a multiple of the span's S / 2 elements, as a
  /// warpgroup's 64 rows are) one tile of tileK x S bytes per span of rows,
  /// i.e. row * tileK * 2 bytes (offset's tile index is linear in row0 / span).
  SharedOperand fromRow(OpBuilder& b, Location loc, Value row) const {
    SharedOperand op = *this;
    const int64_t bytesPerRow = nMajor ? tileK * 2 : swizzle;
    op.base = arith::AddIOp::create(
        b, loc, base,
        arith::MulIOp::create(b, loc, row, arith::ConstantIndexOp::create(b, loc, bytesPerRow)));
    return op;
  }
  /// The descriptor's leading byte offset: unused K-major (16 bytes by
  /// convention), from one tile to the next along N N-major.
  int64_t leadingBytes() const { return nMajor ? tileK * swizzle : 16; }
  /// The stride byte offset: from one 8-row group to the next (rows of a
  /// and b K-major, K N-major).
  int64_t strideBytes() const {
    return nMajor && tileK == 8 ? (rows / (swizzle / 2)) * 8 * swizzle : 8 * swizzle;
  }
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

/// The shared address of element 0 of `memref` (a workgroup memref), as index.
Value sharedAddress(OpBuilder& b, Location loc, Value memref) {
  return memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
}

/// The first of the `m` accumulator rows this thread's warpgroup holds:
/// 0 with one warpgroup, else (tid / 128) * m / W (the file comment).
Value warpgroupFirstRow(OpBuilder& b, Location loc, const GpuLowering& g, int64_t m) {
  if (g.warpgroups() == 1) return idx(b, loc, 0);
  Value wg = arith::DivUIOp::create(b, loc, g.tid, idx(b, loc, 128));
  return arith::MulIOp::create(b, loc, wg, idx(b, loc, m / g.warpgroups()));
}

/// Whether wgmma reads the whole staged block `st` (ref shape `shape`) in
/// place: K-major ([rows, K], a or b^T) when its rows are exactly one
/// swizzle span, laid out row after row (tiles of rows stacked), or when it
/// is tiled [rows, one swizzle span of K]: tile c is atom column c of the
/// canonical layout, at c * rows * S (attention's Q and K with a head dim of
/// 128: two tiles of 64); N-major (b as [K, N]) when it is tiled [tk, one
/// swizzle span of N] with tk 8 or a multiple of 16.
bool readableInPlace(const StagedBlock& st, ArrayRef<int64_t> shape, bool kMajor) {
  if (st.output || st.elementBytes != 2 || st.swizzle == 0 || st.refDims.size() != 2 ||
      shape.size() != 2)
    return false;
  const int64_t rowDim = st.refDims[0], colDim = st.refDims[1];
  const bool squeezedElsewhere =
      llvm::all_of(llvm::seq<int64_t>(0, static_cast<int64_t>(st.box.size())),
                   [&](int64_t d) { return d == rowDim || d == colDim || st.copyBox[d] == 1; });
  if (kMajor) {
    const bool oneSpan = st.copyBox[colDim] * 2 == st.swizzle;
    const bool rowAfterRow = shape[1] * 2 == st.swizzle && st.copyBox[colDim] == st.box[colDim];
    const bool atomColumns = oneSpan && st.copyBox[rowDim] == shape[0] && squeezedElsewhere;
    return (rowAfterRow || atomColumns) && shape[0] % 8 == 0;
  }
  const int64_t tileK = st.copyBox[rowDim];
  return st.copyBox[colDim] * 2 == st.swizzle && (tileK == 8 || tileK % 16 == 0) &&
         squeezedElsewhere;
}

/// The staged block `st` (ref shape `shape`) as wgmma reads it in place, in
/// the current step's stage buffer (readableInPlace holds).
SharedOperand inPlaceOperand(OpBuilder& b, Location loc, const StagedBlock& st,
                             ArrayRef<int64_t> shape, bool kMajor) {
  Value slot = arith::MulIOp::create(b, loc, st.slot, idx(b, loc, st.slotElements * 2));
  SharedOperand op;
  op.base = arith::AddIOp::create(b, loc, sharedAddress(b, loc, st.buffer), slot);
  op.swizzle = st.swizzle;
  op.nMajor = !kMajor;
  op.rows = kMajor ? shape[0] : shape[1];
  op.k = kMajor ? shape[1] : shape[0];
  op.tileK = kMajor ? 0 : st.copyBox[st.refDims[0]];
  return op;
}

/// The staged block `load` reads, if it is a whole-block load of one that
/// wgmma reads in place.
const StagedBlock* stagedForWgmma(Value operand, bool kMajor, const GpuLowering& g) {
  auto load = operand.getDefiningOp<LoadOp>();
  if (!load || !load.getDynamicOffsets().empty()) return nullptr;
  auto it = g.staged.find(load.getRef());
  if (it == g.staged.end()) return nullptr;
  const StagedBlock& st = it->second;
  VectorType type = load.getResult().getType();
  auto refType = cast<RefType>(load.getRef().getType());
  if (refType.getShape() != type.getShape() ||
      llvm::any_of(load.getOffsets(), [](int64_t o) { return o != 0; }))
    return nullptr;
  return readableInPlace(st, type.getShape(), kMajor) ? &st : nullptr;
}

/// The staged block `operand` is a whole-block load of, if mma.sync's
/// ldmatrix can read it in place: an f16/bf16 input stage (any swizzle keeps
/// ldmatrix's 16-byte rows contiguous).
const StagedBlock* stagedForMmaSync(Value operand, const GpuLowering& g) {
  auto load = operand.getDefiningOp<LoadOp>();
  if (!load || !load.getDynamicOffsets().empty()) return nullptr;
  auto it = g.staged.find(load.getRef());
  if (it == g.staged.end()) return nullptr;
  const StagedBlock& st = it->second;
  auto refType = cast<RefType>(load.getRef().getType());
  if (st.output || st.elementBytes != 2 || st.refDims.size() != 2 ||
      refType.getShape() != load.getResult().getType().getShape() ||
      llvm::any_of(load.getOffsets(), [](int64_t o) { return o != 0; }))
    return nullptr;
  return &st;
}

}  // namespace

bool dotReadsStagedOperand(DotOp dot, unsigned operandNumber, const GpuLowering& g) {
  if (!g.wgmma) return stagedForMmaSync(dot->getOperand(operandNumber), g) != nullptr;
  bool kMajor = operandNumber == 0 ? !dot.getTransposeA() : dot.getTransposeB();
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

/// Operand `operandNumber` of `dot` in shared memory: in place when staged so
/// (K-major, or MN-major for a transposed a or an untransposed b), else stored
/// by the threads into a K-major rule buffer (`rows` x `k`).
SharedOperand operandInShared(DotOp dot, unsigned operandNumber, GpuLowering& g, OpBuilder& b) {
  Location loc = dot.getLoc();
  Value v = dot->getOperand(operandNumber);
  // a as [K, M] or b as [K, N]: MN-major.
  const bool transposed = operandNumber == 0 ? dot.getTransposeA() : !dot.getTransposeB();
  VectorType type = cast<VectorType>(v.getType());
  const int64_t rows = operandNumber == 0 ? dot.getM() : dot.getN(), k = dot.getK();
  if (const StagedBlock* st = stagedForWgmma(v, !transposed, g))
    return inPlaceOperand(b, loc, *st, type.getShape(), !transposed);
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
  Value start = arith::AddIOp::create(b, loc, op.base, idx(b, loc, op.offset(row0, k0)));
  Value start64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), start);
  auto c64 = [&](int64_t v) { return arith::ConstantIntOp::create(b, loc, v, 64); };
  // (address & 0x3ffff) >> 4 in bits 0-13.
  Value field =
      arith::ShRUIOp::create(b, loc, arith::AndIOp::create(b, loc, start64, c64(0x3ffff)), c64(4));
  const int64_t mode = op.swizzle == 128 ? 1 : op.swizzle == 64 ? 2 : 3;
  const uint64_t fixed = (uint64_t(op.leadingBytes() >> 4) << 16) |
                         (uint64_t(op.strideBytes() >> 4) << 32) | (uint64_t(mode) << 62);
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

/// `frag` redefined here by an empty volatile inline asm (kFenceOperandsAsm):
/// LLVM keeps every read of the result after, and every write of the
/// operand before, this point. Without it LLVM hoists an epilogue's reads of
/// the accumulator above the wgmma.wait_group guarding them, and ptxas then
/// completes every wgmma early (info C7517: "warpgroup.wait is injected").
/// `frag`: f32 registers (an accumulator) or i32 (A's words).
///
/// With `copy` the results are new registers that `mov`s fill from the
/// operands (kCopyOperandsAsm) instead: a read of the accumulator that
/// leaves its registers unwritten. An epilogue inside a loop of wgmmas (a
/// persistent program's last K step) must read it so: where the in-place
/// fence redefines the registers in the epilogue's branch, the loop's join
/// merges them with the registers an in-flight wgmma writes, and ptxas waits
/// for every wgmma there, on every step (C7517 at the loop latch).
Value fenceOperands(OpBuilder& b, Location loc, Value frag, bool copy = false) {
  auto type = cast<VectorType>(frag.getType());
  const int64_t n = type.getNumElements();
  const bool f32 = type.getElementType().isF32();
  const std::string out = f32 ? "=f" : "=r";
  std::string constraints, text = copy ? kCopyOperandsAsm.str() : kFenceOperandsAsm.str();
  for (int64_t i = 0; i < n; ++i) constraints += (i ? "," : "") + out;
  for (int64_t i = 0; i < n; ++i) constraints += "," + (copy ? out.substr(1) : std::to_string(i));
  for (int64_t i = 0; copy && i < n; ++i)
    text += std::string("\n") + (f32 ? "mov.f32 $" : "mov.b32 $") + std::to_string(i) + ", $" +
            std::to_string(n + i) + ";";
  SmallVector<Value> regs;
  for (int64_t i = 0; i < n; ++i) regs.push_back(vector::ExtractOp::create(b, loc, frag, i));
  auto structType =
      LLVM::LLVMStructType::getLiteral(b.getContext(), SmallVector<Type>(n, type.getElementType()));
  auto fence = LLVM::InlineAsmOp::create(
      b, loc, structType, regs, text, constraints, /*has_side_effects=*/true,
      /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT), ArrayAttr());
  return unpackStruct(b, loc, fence.getResult(0), frag, 0, n);
}

/// The wgmma instructions of frag += a @ b (a [m, k] and b [n, k] in shared
/// memory, each K-major or MN-major: imm-trans-a / imm-trans-b), one per 64
/// rows, 16 of K and at most 256 columns; no fence, commit or wait. With
/// several warpgroups `a` starts at the warpgroup's rows and `m` is its
/// share (64).
///
/// `zeroFirst`: the first K slice's wgmmas ignore the accumulator (scale-d 0,
/// acc = a @ b), for an accumulator flagged zero (accumulatorIsZero).
Value issueWgmma(OpBuilder& b, Location loc, const SharedOperand& a, const SharedOperand& bOp,
                 Value frag, int64_t m, int64_t n, int64_t k, bool bf16, bool zeroFirst = false) {
  MLIRContext* ctx = b.getContext();
  auto elementType = bf16 ? NVVM::WGMMATypes::bf16 : NVVM::WGMMATypes::f16;
  for (int64_t k0 = 0; k0 < k; k0 += 16)
    for (int64_t m0 = 0; m0 < m; m0 += 64)
      for (int64_t n0 = 0; n0 < n; n0 += kWgmmaMaxN) {
        const int64_t nn = std::min(kWgmmaMaxN, n - n0);
        // Registers of rows m0.. and columns n0..: ((m0/64) * n/8 + n0/8) * 4 on (layout order).
        const int64_t first = ((m0 / 64) * (n / 8) + n0 / 8) * 4, count = nn / 2;
        Value in = packStruct(b, loc, frag, first, count);
        auto issue = [&](OpBuilder& ib, NVVM::WGMMAScaleOut scaleD) -> Value {
          return NVVM::WgmmaMmaAsyncOp::create(
                     ib, loc, in.getType(), in, descriptor(ib, loc, a, m0, k0),
                     descriptor(ib, loc, bOp, n0, k0), NVVM::MMAShapeAttr::get(ctx, 64, nn, 16),
                     NVVM::WGMMATypesAttr::get(ctx, elementType),
                     NVVM::WGMMATypesAttr::get(ctx, elementType),
                     NVVM::WGMMATypesAttr::get(ctx, NVVM::WGMMATypes::f32),
                     NVVM::WGMMAScaleOutAttr::get(ctx, scaleD),
                     NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one),
                     NVVM::WGMMAScaleInAttr::get(ctx, NVVM::WGMMAScaleIn::one),
                     // row: a K-major (imm-trans-a 0); col: M-major (1).
                     NVVM::MMALayoutAttr::get(
                         ctx, a.nMajor ? NVVM::MMALayout::col : NVVM::MMALayout::row),
                     // col: b K-major (imm-trans-b 0); row: N-major (1).
                     NVVM::MMALayoutAttr::get(
                         ctx, bOp.nMajor ? NVVM::MMALayout::row : NVVM::MMALayout::col),
                     NVVM::MMAIntOverflowAttr())
              .getResult();
        };
        // scale-d 0 (acc = a @ b) on the first K slice of a zero accumulator.
        Value out =
            issue(b, zeroFirst && k0 == 0 ? NVVM::WGMMAScaleOut::zero : NVVM::WGMMAScaleOut::one);
        frag = unpackStruct(b, loc, out, frag, first, count);
      }
  return frag;
}

/// The wgmma instructions of frag += a @ b with a in registers: `aWords` is
/// a [m, k] f16/bf16 value in the WGMMA layout as 32-bit words (two
/// elements each, low half first), b as issueWgmma's. A's fragment for rows
/// m0.. and K k0..k0+15 (PTX ISA, "Register fragment" of A: element i of
/// lane l of warp w is row 16 w + l / 4 + 8 ((i / 2) % 2), column 2 (l % 4) +
/// i % 2 + 8 (i / 4)) is exactly the layout's 8 elements of those rows and
/// columns: the 4 words from ((m0 / 64) * k / 8 + k0 / 8) * 2 on. Worked
/// example: a [64, 64], k0 = 32: words 8..11, the elements of columns 32..47.
/// The NVVM dialect has no such op: inline PTX, tagged for the emulator
/// (kWgmmaRegisterAAttrName).
Value issueWgmmaRegisterA(OpBuilder& b, Location loc, Value aWords, const SharedOperand& bOp,
                          Value frag, int64_t m, int64_t n, int64_t k, bool bf16,
                          Value accumulate) {
  MLIRContext* ctx = b.getContext();
  const std::string type = bf16 ? "bf16" : "f16";
  for (int64_t k0 = 0; k0 < k; k0 += 16)
    for (int64_t m0 = 0; m0 < m; m0 += 64)
      for (int64_t n0 = 0; n0 < n; n0 += kWgmmaMaxN) {
        const int64_t nn = std::min(kWgmmaMaxN, n - n0);
        const int64_t first = ((m0 / 64) * (n / 8) + n0 / 8) * 4, count = nn / 2;
        const int64_t aFirst = ((m0 / 64) * (k / 8) + k0 / 8) * 2;
        SmallVector<Value> operands;
        std::string constraints, accRegs;
        for (int64_t i = 0; i < count; ++i) {
          operands.push_back(vector::ExtractOp::create(b, loc, frag, first + i));
          constraints += (i ? ",=f" : "=f");
          accRegs += (i ? ", $" : "$") + std::to_string(i);
        }
        for (int64_t i = 0; i < count; ++i) constraints += "," + std::to_string(i);
        for (int64_t w = 0; w < 4; ++w) {
          operands.push_back(vector::ExtractOp::create(b, loc, aWords, aFirst + w));
          constraints += ",r";
        }
        operands.push_back(descriptor(b, loc, bOp, n0, k0));
        constraints += ",l";
        // scale-d: 1 (acc +=), or 0 (acc = a @ b) where the accumulator is zero.
        operands.push_back(accumulate && k0 == 0
                               ? Value(arith::ExtUIOp::create(b, loc, b.getI32Type(), accumulate))
                               : Value(arith::ConstantIntOp::create(b, loc, b.getI32Type(), 1)));
        constraints += ",r";
        auto reg = [&](int64_t i) { return "$" + std::to_string(2 * count + i); };
        // scale-a/b 1, imm-trans-b 1 for an N-major b.
        const std::string ptx = "{\n.reg .pred p;\nsetp.ne.b32 p, " + reg(5) +
                                ", 0;\n"
                                "wgmma.mma_async.sync.aligned.m64n" +
                                std::to_string(nn) + "k16.f32." + type + "." + type + " {" +
                                accRegs + "}, {" + reg(0) + ", " + reg(1) + ", " + reg(2) + ", " +
                                reg(3) + "}, " + reg(4) + ", p, 1, 1, " + (bOp.nMajor ? "1" : "0") +
                                ";\n}";
        auto structType =
            LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(count, b.getF32Type()));
        auto mma = LLVM::InlineAsmOp::create(
            b, loc, structType, operands, ptx, constraints, /*has_side_effects=*/true,
            /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
            LLVM::AsmDialectAttr::get(ctx, LLVM::AsmDialect::AD_ATT), ArrayAttr());
        mma->setAttr(kWgmmaRegisterAAttrName,
                     b.getDenseI64ArrayAttr({nn, bf16 ? 1 : 0, bOp.nMajor ? 1 : 0}));
        frag = unpackStruct(b, loc, mma.getResult(0), frag, first, count);
      }
  return frag;
}

/// An f16/bf16 register fragment as 32-bit words (two elements each, low
/// half first): how wgmma and mma.sync take operand a from registers.
Value asWords(OpBuilder& b, Location loc, Value frag) {
  auto type = cast<VectorType>(frag.getType());
  return vector::BitCastOp::create(
      b, loc, VectorType::get({type.getNumElements() / 2}, b.getI32Type()), frag);
}

/// Operand a of `dot` as 32-bit words of its registers when it is already
/// in the accumulator layout (P computed from an accumulator), else null.
/// In that layout the words ((m0 / 64) * K / 8 + k0 / 8) * 2 .. + 3 of rows
/// m0.. and K k0..k0 + 15 are both wgmma's A register fragment
/// (issueWgmmaRegisterA) and, per warp, mma.sync m16n8k16's a0..a7 (lane l:
/// rows l / 4 and l / 4 + 8, K 2 (l % 4) + {0, 1} and + 8): no shared memory.
Value registerWordsOfA(DotOp dot, GpuLowering& g, OpBuilder& b) {
  if (dot.getTransposeA()) return Value();  // [K, M]: read from shared memory
  auto layout = dyn_cast_or_null<TiledLayoutAttr>(g.layoutOf(dot.getA()));
  if (!layout) return Value();
  FailureOr<Value> frag = g.operandIn(b, dot.getLoc(), dot.getA(), layout);
  return succeeded(frag) ? asWords(b, dot.getLoc(), *frag) : Value();
}

/// acc + a @ b with wgmma (see the file comment); `a` from its registers
/// when registerWordsOfA has them.
Value multiplyWithWgmma(DotOp dot, GpuLowering& g, OpBuilder& b, Value frag) {
  Location loc = dot.getLoc();
  MLIRContext* ctx = b.getContext();
  Value aWords = registerWordsOfA(dot, g, b);
  SharedOperand a = aWords ? SharedOperand{} : operandInShared(dot, 0, g, b);
  SharedOperand bOp = operandInShared(dot, 1, g, b);
  bool stored = (!aWords && !dotReadsStagedOperand(dot, 0, g)) || !dotReadsStagedOperand(dot, 1, g);
  if (stored) {  // the threads' writes, then the async proxy (wgmma) reads them
    NVVM::FenceProxyOp::create(b, loc, NVVM::ProxyKindAttr::get(ctx, NVVM::ProxyKind::async_shared),
                               NVVM::SharedSpaceAttr::get(ctx, NVVM::SharedSpace::shared_cta));
    gpu::BarrierOp::create(b, loc);
  }
  frag = fenceOperands(b, loc, frag);
  if (aWords) aWords = fenceOperands(b, loc, aWords);
  NVVM::WgmmaFenceAlignedOp::create(b, loc);
  const int64_t rows = dot.getM() / g.warpgroups();  // this warpgroup's share
  const bool bf16 = dot.getA().getType().getElementType().isBF16();
  frag = aWords ? issueWgmmaRegisterA(b, loc, aWords, bOp, frag, rows, dot.getN(), dot.getK(), bf16,
                                      Value())
                : issueWgmma(b, loc, a.fromRow(b, loc, warpgroupFirstRow(b, loc, g, dot.getM())),
                             bOp, frag, rows, dot.getN(), dot.getK(), bf16);
  NVVM::WgmmaGroupSyncAlignedOp::create(b, loc);
  NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  frag = fenceOperands(b, loc, frag);
  // Rule buffers are dead after the rule: no thread may reuse the bytes
  // before every warp's wgmma has read them.
  if (stored) gpu::BarrierOp::create(b, loc);
  return frag;
}

/// An f16/bf16 operand of mma.sync in shared memory: the stage a pipeline
/// put it in (read in place), or a rule buffer, row-major with each row
/// padded to `pitch` elements so that ldmatrix's 8 row addresses fall in
/// different 16-byte bank groups (pitch (cols + 8) * 2 bytes is an odd
/// number of 16-byte units when cols is a multiple of 16: conflict-free).
struct PaddedOperand {
  Value base;  // index: the buffer's shared address
  int64_t pitch = 0;
  const StagedBlock* stage = nullptr;  // in place: element (r, c) via stagedElement
};

/// Stores block value `v` ([rows, cols], strided layout) into a padded rule
/// buffer: each run of the thread's fragment is one vector store (runs do
/// not cross rows: cols is a multiple of the run length, checked by lowerDot).
PaddedOperand storePadded(Value v, GpuLowering& g, OpBuilder& b, StringRef purpose) {
  Location loc = v.getLoc();
  auto type = cast<VectorType>(v.getType());
  const int64_t rows = type.getShape()[0], cols = type.getShape()[1];
  const int64_t vec = g.strided().getVec(), pitch = cols + std::max<int64_t>(8, vec);
  Value buffer = g.sharedBuffer(b, loc, rows * pitch, type.getElementType(), SharedLifetime::kRule,
                                16, purpose);
  Value frag = *g.operandIn(b, loc, v, g.strided());
  for (int64_t r = 0; r < g.runs(type); ++r) {
    // Element (row, col) = flat index row * cols + col goes to row * pitch + col.
    Value flat = g.runStart(b, loc, r);
    Value row = arith::DivUIOp::create(b, loc, flat, idx(b, loc, cols));
    Value at = arith::AddIOp::create(b, loc, flat,
                                     arith::MulIOp::create(b, loc, row, idx(b, loc, pitch - cols)));
    Value run = vector::ExtractStridedSliceOp::create(b, loc, frag, ArrayRef<int64_t>{r * vec},
                                                      ArrayRef<int64_t>{vec}, ArrayRef<int64_t>{1});
    vector::StoreOp::create(b, loc, run, buffer, ValueRange{at});
  }
  return {sharedAddress(b, loc, buffer), pitch};
}

/// acc + a @ b with mma.sync m16n8k16 (sm_80), into the same WGMMA
/// accumulator layout: a warp's 16 rows of a 64-row block, 8 columns at a
/// time, are exactly mma.sync's 16 x 8 D fragment (lane l holds rows l / 4
/// and l / 4 + 8, columns 2 (l % 4) + {0, 1}), so warp w of a warpgroup
/// multiplies rows 16 w.. of each of its warpgroup's 64-row blocks by all of
/// b. Fragments come from the padded
/// shared copies by ldmatrix: a's 16 x 16 as .x4 (matrices: rows 0-7 / 8-15
/// x K 0-7 / 8-15, lane l addressing row l % 8 + 8 ((l / 8) % 2), K 8 (l / 16));
/// b's for two 8-column tiles as one .x4, transposed when b is [K, N], used
/// at once by every 64-row block (a few b registers live, not all of N's).
Value multiplyWithMmaSync(DotOp dot, GpuLowering& g, OpBuilder& b, Value frag) {
  Location loc = dot.getLoc();
  MLIRContext* ctx = b.getContext();
  const int64_t m = dot.getM() / g.warpgroups(), n = dot.getN(), k = dot.getK();
  const bool at = dot.getTransposeA(), bt = dot.getTransposeB();
  const bool bf16 = dot.getA().getType().getElementType().isBF16();
  // Operands a pipeline staged are read where they are (their loads only
  // waited for the copies); others are stored by the threads first.
  auto operand = [&](Value v, StringRef purpose) {
    if (const StagedBlock* st = stagedForMmaSync(v, g))
      return PaddedOperand{sharedAddress(b, loc, st->buffer), 0, st};
    return storePadded(v, g, b, purpose);
  };
  Value aRegisters = registerWordsOfA(dot, g, b);  // a's fragments, already in registers
  PaddedOperand a = aRegisters ? PaddedOperand{} : operand(dot.getA(), "mma.sync operand a");
  PaddedOperand bm = operand(dot.getB(), "mma.sync operand b");
  const bool stored = (!aRegisters && !a.stage) || !bm.stage;
  if (stored) gpu::BarrierOp::create(b, loc);
  Value firstRow = warpgroupFirstRow(b, loc, g, dot.getM());  // of this warpgroup's m rows
  Value lane = arith::RemUIOp::create(b, loc, g.tid, idx(b, loc, 32));
  Value warp = arith::RemUIOp::create(
      b, loc, arith::DivUIOp::create(b, loc, g.tid, idx(b, loc, 32)), idx(b, loc, 4));
  Value lane8 = arith::RemUIOp::create(b, loc, lane, idx(b, loc, 8));
  Value half = arith::RemUIOp::create(b, loc, arith::DivUIOp::create(b, loc, lane, idx(b, loc, 8)),
                                      idx(b, loc, 2));
  Value quarter = arith::DivUIOp::create(b, loc, lane, idx(b, loc, 16));
  auto add = [&](Value x, Value y) { return arith::AddIOp::create(b, loc, x, y).getResult(); };
  auto scaled = [&](Value x, int64_t c) {
    return arith::MulIOp::create(b, loc, x, idx(b, loc, c)).getResult();
  };
  // This lane's row address for ldmatrix: element (row, col) of `op`.
  auto rowAddress = [&](const PaddedOperand& op, Value row, Value col) -> Value {
    Value element =
        op.stage ? stagedElement(b, loc, *op.stage, row, col) : add(scaled(row, op.pitch), col);
    Value bytes = scaled(element, 2);
    Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), add(op.base, bytes));
    return LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(ctx, kSharedSpace), i64);
  };
  Type i32 = b.getI32Type();
  Type word = bf16 ? i32 : VectorType::get({2}, b.getF16Type());
  auto ldmatrix = [&](Value ptr, int num, bool trans) {
    Type type = i32;
    if (num > 1) type = LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(num, i32));
    Value r = NVVM::LdMatrixOp::create(b, loc, type, ptr, static_cast<uint32_t>(num),
                                       trans ? NVVM::MMALayout::col : NVVM::MMALayout::row,
                                       NVVM::LdStMatrixShapeAttr::get(ctx, 8, 8),
                                       NVVM::LdStMatrixEltType::B16);
    SmallVector<Value> words;
    for (int j = 0; j < num; ++j) {
      Value w = num == 1 ? r : LLVM::ExtractValueOp::create(b, loc, r, ArrayRef<int64_t>{j});
      words.push_back(bf16 ? w : LLVM::BitcastOp::create(b, loc, word, w).getResult());
    }
    return words;
  };
  const NVVM::MMATypes type = bf16 ? NVVM::MMATypes::bf16 : NVVM::MMATypes::f16;
  auto resultType = LLVM::LLVMStructType::getLiteral(ctx, SmallVector<Type>(4, b.getF32Type()));
  for (int64_t k0 = 0; k0 < k; k0 += 16) {
    // a's words for each 64-row block of this warpgroup.
    SmallVector<SmallVector<Value>> aWords;
    for (int64_t m0 = 0; m0 < m; m0 += 64) {
      if (aRegisters) {  // words ((m0 / 64) * k / 8 + k0 / 8) * 2 on (registerWordsOfA)
        const int64_t first = ((m0 / 64) * (k / 8) + k0 / 8) * 2;
        SmallVector<Value> words;
        for (int64_t w = 0; w < 4; ++w) {
          Value x = vector::ExtractOp::create(b, loc, aRegisters, first + w);
          words.push_back(bf16 ? x : LLVM::BitcastOp::create(b, loc, word, x).getResult());
        }
        aWords.push_back(words);
        continue;
      }
      Value rows16 = add(add(firstRow, idx(b, loc, m0)), scaled(warp, 16));  // the warp's 16 rows
      // a as [K, M]: the same four 8 x 8 matrices, each read from its 8 rows of K and
      // transposed (ldmatrix.trans): lane l addresses K row k0 + l % 8 + 8 (l / 16) at the
      // warp's M row + 8 ((l / 8) % 2).
      if (at) {
        Value kRow = add(idx(b, loc, k0), add(lane8, scaled(quarter, 8)));
        aWords.push_back(ldmatrix(rowAddress(a, kRow, add(rows16, scaled(half, 8))), 4, true));
        continue;
      }
      Value row = add(rows16, add(lane8, scaled(half, 8)));
      aWords.push_back(
          ldmatrix(rowAddress(a, row, add(idx(b, loc, k0), scaled(quarter, 8))), 4, false));
    }
    // b's two words per 8-column tile, 16 columns per ldmatrix (.x2 for a
    // last tile of 8): matrices (tile 0, K 0-7), (tile 0, K 8-15), (tile 1, ...).
    for (int64_t n0 = 0; n0 < n; n0 += 16) {
      const int num = n - n0 >= 16 ? 4 : 2;
      Value tile = num == 4 ? quarter : idx(b, loc, 0);
      Value ptr = bt ? rowAddress(bm, add(idx(b, loc, n0), add(lane8, scaled(tile, 8))),
                                  add(idx(b, loc, k0), scaled(half, 8)))
                     : rowAddress(bm, add(idx(b, loc, k0), add(lane8, scaled(half, 8))),
                                  add(idx(b, loc, n0), scaled(tile, 8)));
      SmallVector<Value> bWords = ldmatrix(ptr, num, /*trans=*/!bt);
      for (int64_t j = n0 / 8; j < n0 / 8 + num / 2; ++j)
        for (int64_t m0 = 0; m0 < m; m0 += 64) {
          // Registers of rows m0.. and columns 8 j..: ((m0 / 64) * n / 8 + j) * 4 on.
          const int64_t first = ((m0 / 64) * (n / 8) + j) * 4, jj = j - n0 / 8;
          SmallVector<Value> c;
          for (int64_t i = 0; i < 4; ++i)
            c.push_back(vector::ExtractOp::create(b, loc, frag, first + i));
          auto mma = NVVM::MmaOp::create(
              b, loc, resultType, aWords[m0 / 64], ValueRange{bWords[2 * jj], bWords[2 * jj + 1]},
              c, ArrayRef<int64_t>{16, 8, 16}, std::nullopt, std::nullopt,
              std::array<NVVM::MMATypes, 2>{type, type},
              std::array<NVVM::MMALayout, 2>{NVVM::MMALayout::row, NVVM::MMALayout::col});
          for (int64_t i = 0; i < 4; ++i)
            frag = vector::InsertOp::create(
                b, loc, LLVM::ExtractValueOp::create(b, loc, mma.getResult(), ArrayRef<int64_t>{i}),
                frag, first + i);
        }
    }
  }
  // Rule buffers are dead after the rule: no thread may reuse the bytes
  // before every warp has read them. (A stage is released by its pipeline.)
  if (stored) gpu::BarrierOp::create(b, loc);
  return frag;
}

/// Whether register ((m0 / 64) * n / 8 + j) * 4 + i of thread 0 in `layout`
/// holds element (m0 + 8 (i / 2), 8 j + i % 2) for m0 < m / warpgroups (its
/// warpgroup's rows): mma.sync's D fragment order, which
/// multiplyWithMmaSync and multiplyWithWgmma assume.
bool fragmentOrderMatches(TiledLayoutAttr layout, int64_t m, int64_t n, int64_t warpgroups) {
  SmallVector<int64_t> shape{m, n};
  if (layout.threads(shape) != 128 * warpgroups) return false;
  for (int64_t m0 = 0; m0 < m / warpgroups; m0 += 64)
    for (int64_t j = 0; j < n / 8; ++j)
      for (int64_t i = 0; i < 4; ++i) {
        SmallVector<int64_t> at = layout.elementAt(shape, 0, 0, ((m0 / 64) * (n / 8) + j) * 4 + i);
        if (at[0] != m0 + 8 * (i / 2) || at[1] != 8 * j + i % 2) return false;
      }
  return true;
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
  if (!fragmentOrderMatches(cast<TiledLayoutAttr>(layout), m, n, g.warpgroups()))
    return dot.emitOpError("the accumulator layout ")
           << layout << " does not hold mma.sync's fragments in the order the rule assumes";
  const int64_t vec = g.strided().getVec();
  const int64_t aRow = dot.getTransposeA() ? m : k, bRow = dot.getTransposeB() ? k : n;
  if (!g.wgmma && (aRow % vec != 0 || bRow % vec != 0))
    return dot.emitOpError("mma.sync stores the operands' rows whole; their lengths (")
           << aRow << ", " << bRow << ") must be multiples of the " << vec
           << "-element runs of the strided layout";
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
            g.wgmma ? multiplyWithWgmma(dot, g, b, frag) : multiplyWithMmaSync(dot, g, b, frag));
  return success();
}

/// Operand `which` of `op` (a staged block's ref) as wgmma reads it in place,
/// once its copy has landed.
FailureOr<SharedOperand> stagedOperand(WgmmaOp op, Value ref, StringRef which, bool kMajor,
                                       GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  auto it = g.staged.find(ref);
  if (it == g.staged.end())
    return op.emitOpError() << which << " is not a block staged in shared memory (InShared)";
  const StagedBlock& st = it->second;
  ArrayRef<int64_t> shape = cast<RefType>(ref.getType()).getShape();
  if (!readableInPlace(st, shape, kMajor)) {
    if (kMajor)
      return op.emitOpError() << which << " [" << shape[0] << ", " << shape[1]
                              << "] must be an input staged with a swizzle of exactly its rows' "
                                 "bytes (64 f16/bf16 with swizzle 128) to be read in place";
    return op.emitOpError() << which << " [" << shape[0] << ", " << shape[1]
                            << "] is read MN-major (b as [K, N], a transposed as [K, M]): it must "
                               "be an f16/bf16 input staged with a swizzle "
                               "and tiled [tk, swizzle / 2] (e.g. InShared{.swizzle = 128, "
                               ".tiling = {"
                            << shape[0] << ", 64}}), tk 8 or a multiple of 16";
  }
  if (!st.explicitBuffer) waitForStage(b, loc, g, st);
  return inPlaceOperand(b, loc, st, shape, kMajor);
}

/// Whether `v` is a splat of +0.0 (a broadcast zero, or a zero constant).
bool isZeroSplat(Value v) {
  if (auto bc = v.getDefiningOp<vector::BroadcastOp>()) v = bc.getSource();
  return matchPattern(v, m_PosZeroFloat());
}

/// pallas.wgmma: fence, the multiplies on the stage buffers, commit; the
/// accumulator's registers are updated asynchronously (no wait).
LogicalResult lowerWgmma(WgmmaOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  if (!g.wgmma)
    return op.emitOpError("this target multiplies synchronously; run pallas-expand-wgmma first");
  auto aValue = dyn_cast<TypedValue<VectorType>>(op.getA());  // else a staged block's ref
  FailureOr<SharedOperand> a = SharedOperand{};
  if (!aValue) a = stagedOperand(op, op.getA(), "operand a", !op.getTransposeA(), g, b);
  if (failed(a)) return failure();
  FailureOr<SharedOperand> bOp =
      stagedOperand(op, op.getB(), "operand b", op.getTransposeB(), g, b);
  if (failed(bOp)) return failure();
  auto accType = cast<RefType>(op.getAcc().getType());
  const int64_t m = accType.getShape()[0], n = accType.getShape()[1];
  const int64_t k = aValue ? aValue.getType().getShape()[1] : a->k;
  if (m % 64 != 0 || n % 8 != 0 || k % 16 != 0)
    return op.emitOpError("multiplies [")
           << m << ", " << k << "] by [" << k << ", " << n
           << "]; wgmma needs M a multiple of 64, N of 8 and K of 16";
  TiledLayoutAttr layout = g.accumulatorLayout();
  const int64_t rows = m / g.warpgroups();  // this warpgroup's share (the file comment)
  const bool bf16 = cast<RefType>(op.getB().getType()).getElementType().isBF16();
  Value aWords;  // a in registers: its fragment as 32-bit words
  if (aValue) {
    FailureOr<Value> aFrag = g.operandIn(b, loc, aValue, layout);
    if (failed(aFrag))
      return op.emitOpError("operand a is a value in layout ")
             << g.layoutOf(aValue) << "; wgmma reads registers in " << layout;
    aWords = fenceOperands(b, loc, asWords(b, loc, *aFrag));
  }
  auto fragType = VectorType::get({layout.registersPerThread(accType.getShape())}, b.getF32Type());
  Value storage = g.accumulators.at(op.getAcc());
  // An accumulator flagged zero (accumulatorIsZero) is not read: the first
  // multiplies ignore it (scale-d 0).
  Value isZero = g.accumulatorIsZero.lookup(op.getAcc()), accumulate;
  if (isZero)
    accumulate = arith::XOrIOp::create(b, loc, LLVM::LoadOp::create(b, loc, b.getI1Type(), isZero),
                                       arith::ConstantIntOp::create(b, loc, b.getI1Type(), 1));
  Value frag = fenceOperands(b, loc, LLVM::LoadOp::create(b, loc, fragType, storage));
  // fence, multiplies, commit: where the accumulator may be zero, one branch
  // each way around all three (ptxas fences and commits every path itself:
  // a join between the wgmmas and the commit costs a warpgroup.arrive and a
  // dummy HGMMA on every step, C7519).
  auto batch = [&](OpBuilder& bb, bool zeroFirst) {
    NVVM::WgmmaFenceAlignedOp::create(bb, loc);
    Value out = aValue ? issueWgmmaRegisterA(bb, loc, aWords, *bOp, frag, rows, n, k, bf16,
                                             zeroFirst ? accumulate : Value())
                       : issueWgmma(bb, loc, a->fromRow(bb, loc, warpgroupFirstRow(bb, loc, g, m)),
                                    *bOp, frag, rows, n, k, bf16, zeroFirst);
    NVVM::WgmmaGroupSyncAlignedOp::create(bb, loc);
    return out;
  };
  if (accumulate && !aValue) {
    auto branch = scf::IfOp::create(b, loc, TypeRange{frag.getType()}, accumulate,
                                    /*addThenBlock=*/true, /*addElseBlock=*/true);
    for (bool zero : {false, true}) {
      OpBuilder bb = OpBuilder::atBlockEnd(zero ? branch.elseBlock() : branch.thenBlock());
      scf::YieldOp::create(bb, loc, batch(bb, zero));
    }
    frag = branch.getResult(0);
  } else {  // register A: scale-d is a predicate operand of its inline PTX
    frag = batch(b, /*zeroFirst=*/accumulate != nullptr);
  }
  LLVM::StoreOp::create(b, loc, frag, storage);
  if (isZero)
    LLVM::StoreOp::create(b, loc, LLVM::ConstantOp::create(b, loc, b.getI1Type(), 0), isZero);
  return success();
}

LogicalResult lowerWgmmaWait(WgmmaWaitOp op, GpuLowering& g, OpBuilder& b) {
  if (!g.wgmma)
    return op.emitOpError("this target multiplies synchronously; run pallas-expand-wgmma first");
  NVVM::WgmmaWaitGroupSyncOp::create(b, op.getLoc(), op.getPending());
  return success();
}

/// Whether `op` is a read or write of an accumulator that waits for its multiplies (a
/// store of zeros to an accumulator flagged zero only sets the flag: lowerAccumulatorStore).
bool isWaitingAccumulatorAccess(Operation* op, GpuLowering& g) {
  if (auto load = dyn_cast<LoadOp>(op)) return g.accumulators.count(load.getRef()) != 0;
  if (auto store = dyn_cast<StoreOp>(op))
    return g.accumulators.count(store.getRef()) &&
           !(g.accumulatorIsZero.lookup(store.getRef()) && isZeroSplat(store.getValue()));
  return false;
}

/// What an accumulator access waits for: wgmma.wait_group `pending` (-1: no wait), pinned
/// after the work before it (emitPinnedWait) where that work should overlap a multiply.
struct AccumulatorWait {
  int64_t pending = -1;
  bool pin = false;
  bool multiplies = false;  // the kernel has wgmmas: the access is fenced (fenceOperands)
};

/// wgmma.wait_group `pending` that ptxas keeps below the instructions before it. ptxas
/// schedules a wait like any instruction without operands, as early in its basic block as
/// it may: in attention's step it put the wait for P @ V above the softmax meant to run
/// beside that multiply (the exps came after it). So the wait starts a basic block of its
/// own: a branch on a condition ptxas cannot fold (%nctaid.x == 0, never true, and uniform)
/// to one of two copies of it. Two instructions a step (the branch, and the jump over the
/// other copy); the condition is loop-invariant.
void emitPinnedWait(OpBuilder& b, Location loc, int64_t pending) {
  const std::string wait = "wgmma.wait_group.sync.aligned " + std::to_string(pending) + ";\n";
  const std::string text =
      "{\n.reg .pred p;\n.reg .b32 n;\nmov.u32 n, %nctaid.x;\n"
      "setp.eq.u32 p, n, 0;\n@p bra.uni PIN_SKIP;\n" +
      wait + "bra.uni PIN_DONE;\nPIN_SKIP:\n" + wait + "PIN_DONE:\n}";
  auto asmOp = LLVM::InlineAsmOp::create(
      b, loc, TypeRange{}, ValueRange{}, text, /*constraints=*/"", /*has_side_effects=*/true,
      /*is_align_stack=*/false, LLVM::tailcallkind::TailCallKind::None,
      LLVM::AsmDialectAttr::get(b.getContext(), LLVM::AsmDialect::AD_ATT), ArrayAttr());
  asmOp->setAttr(kPinnedWaitAttrName, b.getI32IntegerAttr(static_cast<int32_t>(pending)));
}

/// How many multiplies may still be in flight when `access` reads or writes the accumulator
/// `ref`, or -1 where none needs waiting for (nothing of this kernel's is); pinned where
/// the multiply it waits for was started in the access's block and other work came after
/// the block's last multiply (the work the multiply should overlap). Pallas'
/// accumulator dereference waits for every multiply in flight; this waits only for those
/// writing `ref`, which is all a thread needs: wgmma groups complete in the order they were
/// committed (PTX's wgmma.wait_group N waits until at most the newest N are pending), and
/// each pallas.wgmma is one group (lowerWgmma). So if `ref`'s last multiply is followed by
/// n others, wait_group n completes it; an explicit wgmma_wait or an earlier access that
/// already completed it makes the wait unneeded.
///
/// Known in straight-line code only: the ops before `access` in its own block are replayed
/// (the groups committed, and up to which one they are known complete). A multiply of
/// `ref`'s before the block (the previous step of a loop, outside a `when`) may be in
/// flight: wait for all (0), unless a wait for all in the block came after it. An op
/// holding a multiply in a region (it may or may not run) forgets what came before it.
///
/// Worked example (attention's step, FlashAttention-3's overlap of softmax and P @ V):
///   wgmma(s, q, k)       group 0 writes s
///   wgmma(o, p, v)       group 1 writes o
///   s.load()             s's last group is 0, one after it: wait_group 1 (o's multiply
///                        keeps running beside the softmax computed from s)
///   o.load()             o's last group is 1, none after it: wait_group 0
///   o.store(o * c)       group 1 is known complete: no wait
AccumulatorWait pendingAllowed(Operation* access, Value ref, GpuLowering& g) {
  auto kernel = access->getParentOfType<func::FuncOp>();
  bool any = false;
  if (kernel) kernel.walk([&](WgmmaOp) { any = true; });
  if (!any) return {};
  const Value storage = g.accumulators.lookup(ref);
  SmallVector<Value> groups;  // the accumulator each group of this block writes, in order
  size_t complete = 0;        // groups [0, complete) are known to be done
  bool earlierDone = false;   // every group committed before this block is done
  bool workSinceMma = false;  // ops other than multiplies and waits since the last multiply
  auto waitFor = [&](int64_t pending) {  // the effect of wait_group `pending`
    const size_t count = groups.size();
    complete = std::max(complete, count - std::min<size_t>(count, pending));
    if (pending == 0) earlierDone = true;
  };
  // The decision for an access to `accStorage` in the state so far (-1: no wait).
  auto decide = [&](Value accStorage) -> int64_t {
    for (size_t i = groups.size(); i-- > 0;)
      if (groups[i] == accStorage)
        return i < complete ? -1 : static_cast<int64_t>(groups.size() - i - 1);
    return earlierDone ? -1 : 0;
  };
  for (Operation& op : *access->getBlock()) {
    if (&op == access) {
      const int64_t pending = decide(storage);
      const bool known = llvm::is_contained(groups, storage);
      return {pending, pending >= 0 && known && workSinceMma, /*multiplies=*/true};
    }
    if (!isa<WgmmaOp, WgmmaWaitOp>(op)) workSinceMma = true;
    if (auto mma = dyn_cast<WgmmaOp>(op)) {
      groups.push_back(g.accumulators.lookup(mma.getAcc()));
      workSinceMma = false;
    } else if (auto wait = dyn_cast<WgmmaWaitOp>(op)) {
      waitFor(wait.getPending());
    } else if (isWaitingAccumulatorAccess(&op, g)) {
      Value accRef = isa<LoadOp>(op) ? cast<LoadOp>(op).getRef() : cast<StoreOp>(op).getRef();
      if (const int64_t pending = decide(g.accumulators.lookup(accRef)); pending >= 0)
        waitFor(pending);
    } else if (op.getNumRegions() != 0) {
      bool multiplies = false;
      op.walk([&](WgmmaOp) { multiplies = true; });
      if (multiplies) {  // its groups are unknown: nothing before it is known done
        groups.clear();
        complete = 0;
        earlierDone = false;
      }
      // (Waits inside a region are ignored: they only complete more.)
    }
  }
  return {0, false, true};  // not reached: `access` is in its block
}

/// Waits (wgmma.wait_group) as pendingAllowed says before `access` of accumulator `ref`.
/// Returns whether the kernel has multiplies in flight at all, i.e. whether the access is
/// fenced (fenceOperands) against LLVM moving it across a wait.
bool waitForAccumulator(Operation* access, Value ref, GpuLowering& g, OpBuilder& b) {
  const AccumulatorWait wait = pendingAllowed(access, ref, g);
  if (wait.pin)
    emitPinnedWait(b, access->getLoc(), wait.pending);
  else if (wait.pending >= 0)
    NVVM::WgmmaWaitGroupSyncOp::create(b, access->getLoc(), static_cast<int32_t>(wait.pending));
  return wait.multiplies;
}

}  // namespace

// --- Accumulators -------------------------------------------------------------

LogicalResult lowerAccumulatorBlock(BlockOp blk, GpuLowering& g, OpBuilder& b) {
  TiledLayoutAttr layout = g.accumulatorLayout();
  auto type = cast<RefType>(blk.getResult().getType());
  std::string error;
  if (failed(layout.tiledShape(type.getShape(), &error)))
    return blk.emitOpError("accumulator of shape [")
           << type.getShape()[0] << ", " << type.getShape()[1]
           << "] does not fit the WGMMA accumulator layout: " << error;
  if (g.warpgroups() > 1 && type.getShape()[0] != 64 * g.warpgroups())
    return blk.emitOpError("accumulator of shape [")
           << type.getShape()[0] << ", " << type.getShape()[1] << "] in a program of "
           << g.warpgroups() << " warpgroups: each holds 64 rows, so it needs "
           << 64 * g.warpgroups() << " rows";
  auto fragType = VectorType::get({layout.registersPerThread(type.getShape())}, b.getF32Type());
  // One alloca per accumulator, however many blocks of it the body takes.
  Value storage = g.accumulators.lookup(blk.getArray());
  if (!storage) {
    OpBuilder eb = g.entryBuilder();
    Value one = LLVM::ConstantOp::create(eb, blk.getLoc(), eb.getI32Type(), 1);
    storage = LLVM::AllocaOp::create(eb, blk.getLoc(), LLVM::LLVMPointerType::get(b.getContext()),
                                     fragType, one);
    // Zero when the program starts (as Pallas allocates WGMMA accumulators):
    // with wgmma, flagged zero (materializeZero), else zero registers.
    if (g.wgmma) {
      Value isZero = LLVM::AllocaOp::create(
          eb, blk.getLoc(), LLVM::LLVMPointerType::get(b.getContext()), eb.getI1Type(), one);
      LLVM::StoreOp::create(eb, blk.getLoc(),
                            LLVM::ConstantOp::create(eb, blk.getLoc(), eb.getI1Type(), 1), isZero);
      g.accumulatorIsZero[blk.getArray()] = isZero;
    } else {
      LLVM::StoreOp::create(
          eb, blk.getLoc(),
          LLVM::ConstantOp::create(eb, blk.getLoc(), fragType, eb.getZeroAttr(fragType)), storage);
    }
    g.accumulators[blk.getArray()] = storage;
  }
  g.accumulators[blk.getResult()] = storage;
  if (Value isZero = g.accumulatorIsZero.lookup(blk.getArray()))
    g.accumulatorIsZero[blk.getResult()] = isZero;
  return success();
}

/// A load of the accumulator: its registers, or for a column slice of whole
/// rows (offsets (0, c0), 8-column aligned; the EDSL checks) the registers
/// holding it. Register r of the slice's layout holds the element its
/// thread's register s of the whole holds, s = owner(elementAt(r) + (0, c0))
/// (the warp and lane digits do not depend on N). Worked example: columns
/// [128, 256) of a [128, 256] accumulator over two warpgroups are registers
/// 64..127, in order.
LogicalResult lowerAccumulatorLoad(LoadOp load, GpuLowering& g, OpBuilder& b) {
  Location loc = load.getLoc();
  const bool waited = waitForAccumulator(load, load.getRef(), g, b);
  auto layout = dyn_cast_or_null<TiledLayoutAttr>(g.layoutOf(load.getResult()));
  if (!layout) return load.emitOpError("an accumulator is loaded in its tiled layout");
  auto refType = cast<RefType>(load.getRef().getType());
  VectorType type = load.getResult().getType();
  VectorType fragType =
      g.threadType(VectorType::get(refType.getShape(), type.getElementType()), layout);
  Value frag = LLVM::LoadOp::create(b, loc, fragType, g.accumulators.at(load.getRef()));
  if (Value isZero = g.accumulatorIsZero.lookup(load.getRef()))  // registers unwritten
    frag =
        arith::SelectOp::create(b, loc, LLVM::LoadOp::create(b, loc, b.getI1Type(), isZero),
                                arith::ConstantOp::create(b, loc, b.getZeroAttr(fragType)), frag);
  if (type.getShape() != refType.getShape()) {
    SmallVector<int64_t> picks;
    for (int64_t r = 0; r < layout.registersPerThread(type.getShape()); ++r) {
      SmallVector<int64_t> at = layout.elementAt(type.getShape(), 0, 0, r);
      for (auto [c, offset] : llvm::zip(at, load.getOffsets())) c += offset;
      TiledLayoutAttr::Owner owner = layout.owner(refType.getShape(), at);
      if (owner.warp != 0 || owner.lane != 0)
        return load.emitOpError(
            "a slice of the accumulator that its threads do not hold at "
            "the same place (columns must start at a multiple of 8)");
      picks.push_back(owner.reg);
    }
    frag = vector::ShuffleOp::create(b, loc, frag, frag, picks);
  }
  g.map.map(load.getResult(), waited ? fenceOperands(b, loc, frag, /*copy=*/true) : frag);
  return success();
}

LogicalResult lowerAccumulatorStore(StoreOp store, GpuLowering& g, OpBuilder& b) {
  TiledLayoutAttr layout = g.accumulatorLayout();
  Value isZero = g.accumulatorIsZero.lookup(store.getRef());
  auto setZero = [&](bool zero) {
    if (isZero)
      LLVM::StoreOp::create(
          b, store.getLoc(),
          LLVM::ConstantOp::create(b, store.getLoc(), b.getI1Type(), zero ? 1 : 0), isZero);
  };
  if (isZero && isZeroSplat(store.getValue())) {  // its next use writes the zeros
    setZero(true);
    return success();
  }
  setZero(false);
  const bool waited = waitForAccumulator(store, store.getRef(), g, b);
  FailureOr<Value> frag = g.operandIn(b, store.getLoc(), store.getValue(), layout);
  if (failed(frag))
    return store.emitOpError("stores a value in layout ")
           << g.layoutOf(store.getValue()) << " to an accumulator; it must be in " << layout;
  auto write = LLVM::StoreOp::create(b, store.getLoc(),
                                     waited ? fenceOperands(b, store.getLoc(), *frag) : *frag,
                                     g.accumulators.at(store.getRef()));
  if (g.wgmma) write->setAttr(kAccumulatorStoreAttrName, b.getUnitAttr());
  return success();
}

void populateMatmulRules(RuleRegistry& rules) {
  rules.add(DotOp::getOperationName(), ruleFor(lowerDot));
  rules.add(WgmmaOp::getOperationName(), ruleFor(lowerWgmma));
  rules.add(WgmmaWaitOp::getOperationName(), ruleFor(lowerWgmmaWait));
}

}  // namespace mlir::pallas::gpu_lowering

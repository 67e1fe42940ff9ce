//===- ReductionRules.cpp - vector.multi_reduction on the GPU -------------===//
//
// Reductions combine 32-bit values in a fixed order, so every thread of a
// program holds the same bits of a result (replicated layout):
//  - a whole strided block to a scalar: registers, a warp butterfly, slots per warp;
//  - the last axis (one value per row): see lowerRowReduction;
//  - leading axes (one value per column): see lowerLeadingReduction;
//  - a replicated value: every thread reduces its own copy.
// Their shared-memory buffers: see Scratch below.
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

namespace mlir::pallas::gpu_lowering {
namespace {

/// A reduction outside every loop runs once per program: its buffers get
/// bytes of their own for the whole kernel and no barrier follows their last
/// read (nothing writes them again). Inside a loop the next iteration's writes
/// must wait for this iteration's reads, so the buffers live for the rule and
/// a barrier ends it (SharedMemoryPlan.h).
struct Scratch {
  bool once;
  explicit Scratch(Operation* reduction)
      : once(!reduction->getParentOfType<scf::ForOp>() &&
             !reduction->getParentOfType<scf::WhileOp>()) {}
  SharedLifetime lifetime() const { return once ? SharedLifetime::kKernel : SharedLifetime::kRule; }
  /// The barrier after the last read, where one is needed.
  void release(OpBuilder& b, Location loc) const {
    if (!once) gpu::BarrierOp::create(b, loc);
  }
};

/// Whether combining a value with itself gives it back (max, min, and, or).
bool isIdempotent(vector::CombiningKind kind) {
  using K = vector::CombiningKind;
  switch (kind) {
    case K::MAXIMUMF:
    case K::MINIMUMF:
    case K::MAXNUMF:
    case K::MINNUMF:
    case K::MAXSI:
    case K::MINSI:
    case K::MAXUI:
    case K::MINUI:
    case K::AND:
    case K::OR:
      return true;
    default:
      return false;
  }
}

/// shfl.xor butterfly over lanes within aligned groups of `width` lanes:
/// afterwards every lane holds its group's combination.
Value butterfly(OpBuilder& b, Location loc, vector::CombiningKind kind, Value v, int64_t width) {
  Value warpWidth = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 32);
  for (int64_t offset = width / 2; offset >= 1; offset /= 2) {
    Value o = arith::ConstantIntOp::create(b, loc, b.getI32Type(), offset);
    auto shfl = gpu::ShuffleOp::create(b, loc, v, o, warpWidth, gpu::ShuffleMode::XOR);
    v = vector::makeArithReduction(b, loc, kind, v, shfl.getShuffleResult());
  }
  return v;
}

/// A reduction of the last axis of a distributed block, to a replicated
/// vector of one value per row (N rows of C elements; a row is G = C / vec
/// runs). Each row's values are combined in registers, then across lanes
/// with shfl.xor, then across warps through shared-memory slots that every
/// thread reads back in the same order (so all threads hold the same bits):
///
///  - long rows, G a multiple of `threads` (say 1 x 4096 f32, G = 1024): run
///    r of every thread lies in row r * threads / G, so a thread first
///    folds its runs of each row; a full-warp butterfly; slot [row][warp].
///  - short rows, G dividing `threads` (say 16 x 128 f32, G = 32; or
///    64 x 32, G = 8): run r of thread t lies in row r * threads / G + t / G,
///    and lanes of a row are g = min(G, 32) aligned neighbours; a butterfly
///    over g lanes; slot [row][(t % G) / g], written by the group's first lane.
/// Rows inside warps (a strided_rows result, PallasLayouts.td): each run's
/// elements are combined in registers, then over the row's g lanes with a
/// butterfly; every thread keeps the values of its runs' rows. No shared
/// memory, no barrier. Worked example: 16x128 f32 (vec 4): a row is 32 runs,
/// one warp; 4 runs per thread, each 3 adds and 5 shuffles.
LogicalResult lowerRowReductionInWarps(vector::MultiDimReductionOp red, GpuLowering& g,
                                       OpBuilder& b) {
  Location loc = red.getLoc();
  auto layout = cast<StridedRowsLayoutAttr>(g.layoutOf(red.getResult()));
  VectorType srcType = red.getSourceVectorType();
  if (srcType.getElementTypeBitWidth() != 32)
    return red.emitOpError("GPU reductions combine 32-bit values; cast the block to f32 first");
  FailureOr<Value> acc = g.operandIn(b, loc, red.getAcc(), layout);
  if (failed(acc)) return red.emitOpError("no GPU rule for this reduction's accumulator");
  const int64_t vec = g.strided().getVec();
  vector::CombiningKind kind = red.getKind();
  Value frag = g.map.lookup(red.getSource()), result = *acc;
  for (int64_t r = 0; r < g.runs(srcType); ++r) {
    Value run = vector::ExtractStridedSliceOp::create(b, loc, frag, ArrayRef<int64_t>{r * vec},
                                                      ArrayRef<int64_t>{vec}, ArrayRef<int64_t>{1});
    Value v = vector::ReductionOp::create(b, loc, kind, run).getResult();
    v = butterfly(b, loc, kind, v, layout.lanesPerRow());
    Value seed = vector::ExtractOp::create(b, loc, *acc, ArrayRef<int64_t>{r});
    result = vector::InsertOp::create(b, loc, vector::makeArithReduction(b, loc, kind, v, seed),
                                      result, ArrayRef<int64_t>{r});
  }
  g.map.map(red.getResult(), result);
  return success();
}

/// A reduction of the last axis of a block in the WGMMA accumulator layout
/// to one value per row kept where the accumulator holds the row (wgmmaRow,
/// PallasLayouts.td: attention's row maximum and sum): each thread folds its
/// registers of each of its rows, then the lanes that share a row (the low
/// lane digits, which step along columns) combine with shfl.xor. No shared
/// memory, no barrier; all lanes of a row end with the same bits.
/// Worked example: [64, 64] f32 over 128 threads: thread 37 (warp 1, lane 5)
/// holds rows 17 and 25, 16 registers of each; it folds them into row
/// registers 0 and 1, then two shuffles (xor 2, 1) combine lanes 4..7.
LogicalResult lowerRowReductionOfTiled(vector::MultiDimReductionOp red, GpuLowering& g,
                                       OpBuilder& b) {
  Location loc = red.getLoc();
  auto src = cast<TiledLayoutAttr>(g.layoutOf(red.getSource()));
  auto dst = dyn_cast_or_null<TiledLayoutAttr>(g.layoutOf(red.getResult()));
  VectorType srcType = red.getSourceVectorType();
  auto destType = cast<VectorType>(red.getDestType());
  if (!dst || srcType.getRank() != 2 || destType.getRank() != 1)
    return red.emitOpError("the GPU reduces a tiled block's rows into the row layout only");
  if (srcType.getElementTypeBitWidth() != 32)
    return red.emitOpError("GPU reductions combine 32-bit values; cast the block to f32 first");
  FailureOr<Value> acc = g.operandIn(b, loc, red.getAcc(), dst);
  if (failed(acc)) return red.emitOpError("no GPU rule for this reduction's accumulator");
  ArrayRef<int64_t> shape = srcType.getShape();
  // The lanes of a row: column-stepping lane digits, all below the row ones;
  // warps must split rows only.
  int64_t width = 1;
  bool rowDigitSeen = false;
  const SmallVector<TiledLayoutAttr::Digit> lanes = src.laneDigits(shape);
  for (const TiledLayoutAttr::Digit& d : llvm::reverse(lanes)) {
    const bool alongRow = !d.step.empty() && d.step[0] == 0;
    if (d.step.empty() || (alongRow && rowDigitSeen))
      return red.emitOpError("no GPU rule reduces the rows of ") << src;
    if (alongRow) width *= d.extent;
    rowDigitSeen |= !alongRow;
  }
  for (const TiledLayoutAttr::Digit& d : src.warpDigits(shape))
    if (d.step.empty() || d.step[1] != 0)
      return red.emitOpError("no GPU rule reduces the rows of ") << src << ": warps split them";
  std::optional<SmallVector<int64_t>> rowRegister =
      rowRegisterOf(src, shape, dst, destType.getShape());
  if (!rowRegister)
    return red.emitOpError("no GPU rule reduces the rows of ")
           << src << " into " << dst << ": their threads hold different rows";
  const int64_t rowRegisters = dst.registersPerThread(destType.getShape());
  vector::CombiningKind kind = red.getKind();
  Value frag = g.map.lookup(red.getSource());
  SmallVector<Value> partial(rowRegisters);
  for (int64_t r = 0; r < src.registersPerThread(shape); ++r) {
    const int64_t j = (*rowRegister)[r];
    Value v = vector::ExtractOp::create(b, loc, frag, r);
    partial[j] = partial[j] ? vector::makeArithReduction(b, loc, kind, partial[j], v) : v;
  }
  Value result = *acc;
  for (int64_t j = 0; j < rowRegisters; ++j) {
    if (!partial[j]) return red.emitOpError("row register ") << j << " of " << dst << " is empty";
    Value v = butterfly(b, loc, kind, partial[j], width);
    Value seed = vector::ExtractOp::create(b, loc, result, j);
    result = vector::InsertOp::create(b, loc, vector::makeArithReduction(b, loc, kind, v, seed),
                                      result, j);
  }
  g.map.map(red.getResult(), result);
  return success();
}

LogicalResult lowerRowReduction(vector::MultiDimReductionOp red, GpuLowering& g, OpBuilder& b) {
  if (isa_and_nonnull<StridedRowsLayoutAttr>(g.layoutOf(red.getResult())))
    return lowerRowReductionInWarps(red, g, b);
  if (isa_and_nonnull<TiledLayoutAttr>(g.layoutOf(red.getSource())))
    return lowerRowReductionOfTiled(red, g, b);
  Location loc = red.getLoc();
  VectorType srcType = red.getSourceVectorType();
  auto destType = cast<VectorType>(red.getDestType());
  SmallVector<bool> mask = red.getReductionMask();  // a temporary: copy it
  for (int64_t d = 0; d + 1 < srcType.getRank(); ++d)
    if (mask[d])
      return red.emitOpError("the GPU reduces either the last axis or leading axes, not dim ")
             << d << " together with the last; reduce them one after the other";
  Type et = srcType.getElementType();
  if (et.getIntOrFloatBitWidth() != 32)
    return red.emitOpError("GPU reductions combine 32-bit values; cast the block to f32 first");
  FailureOr<Value> acc =
      g.operandIn(b, loc, red.getAcc(), ReplicatedLayoutAttr::get(b.getContext()));
  if (failed(acc)) return red.emitOpError("no GPU rule for this reduction's accumulator");
  const int64_t threads = g.strided().getThreads(), vec = g.strided().getVec();
  const int64_t cols = srcType.getShape().back(), runsPerRow = cols / vec;
  const int64_t rows = destType.getNumElements(), runs = g.runs(srcType);
  vector::CombiningKind kind = red.getKind();
  Value frag = g.map.lookup(red.getSource());
  auto runValue = [&](int64_t r) {
    Value run = vector::ExtractStridedSliceOp::create(b, loc, frag, ArrayRef<int64_t>{r * vec},
                                                      ArrayRef<int64_t>{vec}, ArrayRef<int64_t>{1});
    return vector::ReductionOp::create(b, loc, kind, run).getResult();
  };
  Value c32 = g.index(b, loc, 32);
  Value lane = arith::RemUIOp::create(b, loc, g.tid, c32);
  int64_t slotsPerRow;
  Value slots;
  if (runsPerRow % threads == 0) {
    slotsPerRow = threads / 32;
    slots = g.sharedBuffer(b, loc, rows * slotsPerRow, et, Scratch(red).lifetime(), 16,
                           "row reduction slots");
    SmallVector<Value> perRow(rows);
    for (int64_t r = 0; r < runs; ++r) {
      int64_t row = r * threads / runsPerRow;
      Value v = runValue(r);
      perRow[row] = perRow[row] ? vector::makeArithReduction(b, loc, kind, perRow[row], v) : v;
    }
    for (Value& v : perRow) v = butterfly(b, loc, kind, v, 32);
    Value warp = arith::DivUIOp::create(b, loc, g.tid, c32);
    Value leader =
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane, g.index(b, loc, 0));
    scf::IfOp::create(b, loc, leader, [&](OpBuilder& tb, Location l) {
      for (int64_t row = 0; row < rows; ++row) {
        Value at = arith::AddIOp::create(tb, l, g.index(tb, l, row * slotsPerRow), warp);
        memref::StoreOp::create(tb, l, perRow[row], slots, ValueRange{at});
      }
      scf::YieldOp::create(tb, l);
    });
  } else if (threads % runsPerRow == 0 && (runsPerRow % 32 == 0 || 32 % runsPerRow == 0)) {
    const int64_t group = std::min<int64_t>(runsPerRow, 32);
    slotsPerRow = runsPerRow / group;
    slots = g.sharedBuffer(b, loc, rows * slotsPerRow, et, Scratch(red).lifetime(), 16,
                           "row reduction slots");
    Value perRow = g.index(b, loc, runsPerRow);
    Value rowInSet = arith::DivUIOp::create(b, loc, g.tid, perRow);
    Value slotInRow = arith::DivUIOp::create(b, loc, arith::RemUIOp::create(b, loc, g.tid, perRow),
                                             g.index(b, loc, group));
    Value first = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq,
        arith::RemUIOp::create(b, loc, lane, g.index(b, loc, group)), g.index(b, loc, 0));
    for (int64_t r = 0; r < runs; ++r) {
      Value v = butterfly(b, loc, kind, runValue(r), group);
      Value row =
          arith::AddIOp::create(b, loc, g.index(b, loc, r * threads / runsPerRow), rowInSet);
      Value at = arith::AddIOp::create(
          b, loc, arith::MulIOp::create(b, loc, row, g.index(b, loc, slotsPerRow)), slotInRow);
      scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
        memref::StoreOp::create(tb, l, v, slots, ValueRange{at});
        scf::YieldOp::create(tb, l);
      });
    }
  } else {
    return red.emitOpError("no GPU rule for reducing rows of ")
           << cols << " elements: a row is " << runsPerRow << " runs of " << vec
           << ", which must be a multiple of the " << threads
           << " threads, or divide them (a power of two below 32, or a multiple of 32)";
  }
  gpu::BarrierOp::create(b, loc);
  Value result = *acc;
  for (int64_t row = 0; row < rows; ++row) {
    Value total = vector::ExtractOp::create(b, loc, *acc, ArrayRef<int64_t>{row});
    for (int64_t k = 0; k < slotsPerRow; ++k) {
      Value v =
          memref::LoadOp::create(b, loc, slots, ValueRange{g.index(b, loc, row * slotsPerRow + k)});
      total = vector::makeArithReduction(b, loc, kind, v, total);
    }
    result = vector::InsertOp::create(b, loc, total, result, ArrayRef<int64_t>{row});
  }
  Scratch(red).release(b, loc);
  g.map.map(red.getResult(), result);
  return success();
}

/// A reduction over leading dims of a distributed block that keeps its last
/// dim (the column sums of [R, C], say), to a replicated vector of the M
/// kept elements, through shared memory and in a fixed order, so every
/// thread holds the same bits:
///  1. each thread stores its runs at their row-major positions;
///  2. thread t folds results m = t, t + threads, ...: the N / M source
///     elements of m in increasing position (consecutive threads read
///     consecutive words, so no bank conflicts), into a second buffer;
///  3. every thread reads the M results back.
/// Worked example: [16, 128] f32 summed over dim 0: thread t adds elements
/// t, 128 + t, ..., 15 * 128 + t of the block.
LogicalResult lowerLeadingReduction(vector::MultiDimReductionOp red, GpuLowering& g, OpBuilder& b) {
  Location loc = red.getLoc();
  VectorType srcType = red.getSourceVectorType();
  ArrayRef<int64_t> shape = srcType.getShape();
  SmallVector<bool> mask = red.getReductionMask();  // a temporary: copy it
  Type et = srcType.getElementType();
  if (et.getIntOrFloatBitWidth() != 32)
    return red.emitOpError("GPU reductions combine 32-bit values; cast the block to f32 first");
  const int64_t n = srcType.getNumElements(), threads = g.strided().getThreads();
  const int64_t m = cast<VectorType>(red.getDestType()).getNumElements();
  constexpr int64_t kMaxKept = 256;  // every thread holds them all
  if (m > kMaxKept)
    return red.emitOpError("keeps ")
           << m << " elements, which every GPU thread would hold; at most " << kMaxKept
           << " (reduce a smaller block)";
  FailureOr<Value> acc =
      g.operandIn(b, loc, red.getAcc(), ReplicatedLayoutAttr::get(b.getContext()));
  if (failed(acc)) return red.emitOpError("no GPU rule for this reduction's accumulator");
  const int64_t rank = srcType.getRank();
  SmallVector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) strides[d] = strides[d + 1] * shape[d + 1];
  SmallVector<int64_t> offsets = {0};  // of the reduced elements, increasing
  for (int64_t d = 0; d < rank; ++d) {
    if (!mask[d]) continue;
    SmallVector<int64_t> wider;
    for (int64_t o : offsets)
      for (int64_t i = 0; i < shape[d]; ++i) wider.push_back(o + i * strides[d]);
    offsets = std::move(wider);
  }
  vector::CombiningKind kind = red.getKind();

  Value source =
      g.sharedBuffer(b, loc, n, et, Scratch(red).lifetime(), 16, "leading-axis reduction source");
  g.storeRunsToShared(b, loc, g.map.lookup(red.getSource()), srcType, source);
  gpu::BarrierOp::create(b, loc);
  Value results =
      g.sharedBuffer(b, loc, m, et, Scratch(red).lifetime(), 16, "leading-axis reduction results");
  for (int64_t k = 0; k * threads < m; ++k) {
    Value mi = arith::AddIOp::create(b, loc, g.index(b, loc, k * threads), g.tid);
    auto fold = [&](OpBuilder& fb, Location l) {
      Value base = g.index(fb, l, 0), rest = mi;  // mi's kept coordinates, innermost first
      for (int64_t d = rank - 1; d >= 0; --d) {
        if (mask[d]) continue;
        Value extent = g.index(fb, l, shape[d]);
        Value coord = arith::RemUIOp::create(fb, l, rest, extent);
        rest = arith::DivUIOp::create(fb, l, rest, extent);
        base = arith::AddIOp::create(
            fb, l, base, arith::MulIOp::create(fb, l, coord, g.index(fb, l, strides[d])));
      }
      Value total;
      for (int64_t o : offsets) {
        Value at = arith::AddIOp::create(fb, l, base, g.index(fb, l, o));
        Value v = memref::LoadOp::create(fb, l, source, ValueRange{at});
        total = total ? vector::makeArithReduction(fb, l, kind, total, v) : v;
      }
      memref::StoreOp::create(fb, l, total, results, ValueRange{mi});
    };
    if ((k + 1) * threads <= m) {
      fold(b, loc);
      continue;
    }
    Value inside = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, mi, g.index(b, loc, m));
    scf::IfOp::create(b, loc, inside, [&](OpBuilder& tb, Location l) {
      fold(tb, l);
      scf::YieldOp::create(tb, l);
    });
  }
  gpu::BarrierOp::create(b, loc);
  Value all = vector::LoadOp::create(b, loc, VectorType::get({m}, et), results,
                                     ValueRange{g.index(b, loc, 0)});
  Scratch(red).release(b, loc);  // every thread has read `results` before they are reused
  g.map.map(red.getResult(), vector::makeArithReduction(b, loc, kind, all, *acc));
  return success();
}

/// A reduction of a replicated value: done by every thread on its copy.
LogicalResult lowerReplicatedReduction(vector::MultiDimReductionOp red, GpuLowering& g,
                                       OpBuilder& b) {
  Location loc = red.getLoc();
  VectorType srcType = red.getSourceVectorType();
  Value src = vector::ShapeCastOp::create(b, loc, srcType, g.map.lookup(red.getSource()));
  Value acc = g.map.lookup(red.getAcc());
  if (auto destType = dyn_cast<VectorType>(red.getDestType())) {
    FailureOr<Value> flatAcc =
        g.operandIn(b, loc, red.getAcc(), ReplicatedLayoutAttr::get(b.getContext()));
    if (failed(flatAcc)) return red.emitOpError("no GPU rule for this reduction's accumulator");
    acc = vector::ShapeCastOp::create(b, loc, destType, *flatAcc);
  }
  Value r =
      vector::MultiDimReductionOp::create(b, loc, src, acc, red.getReductionMask(), red.getKind());
  if (auto destType = dyn_cast<VectorType>(red.getDestType()))
    r = vector::ShapeCastOp::create(b, loc, GpuLowering::flat(destType), r);
  g.map.map(red.getResult(), r);
  return success();
}

/// A reduction of every element of a block to a scalar, replicated in all
/// threads: each thread reduces its fragment, a warp combines its 32
/// partials with a butterfly of shfl.xor (every lane ends with the warp's
/// value), lane 0 of each warp writes it to shared memory, and after a
/// barrier every thread combines the warps' values in the same order (so all
/// threads hold the same bits). A second barrier keeps the next use of the
/// scratch (a reduction in a loop) from overwriting values still being read.
LogicalResult lowerReduction(vector::MultiDimReductionOp red, GpuLowering& g, OpBuilder& b) {
  Location loc = red.getLoc();
  if (g.isReplicated(red.getSource())) return lowerReplicatedReduction(red, g, b);
  if (isa<VectorType>(red.getDestType()))
    return red.getReductionMask().back() ? lowerRowReduction(red, g, b)
                                         : lowerLeadingReduction(red, g, b);
  Type et = red.getSourceVectorType().getElementType();
  if (et.getIntOrFloatBitWidth() != 32)
    return red.emitOpError("GPU reductions combine 32-bit values; cast the block to f32 first");
  vector::CombiningKind kind = red.getKind();
  Value local =
      vector::ReductionOp::create(b, loc, kind, g.map.lookup(red.getSource())).getResult();
  // Per-row values (strided_rows) are held by each of their row's g lanes:
  // a sum takes them from the row's first lane only.
  if (auto rows = dyn_cast_or_null<StridedRowsLayoutAttr>(g.layoutOf(red.getSource()));
      rows && rows.lanesPerRow() > 1 && !isIdempotent(kind)) {
    if (kind != vector::CombiningKind::ADD)
      return red.emitOpError("the GPU reduces per-row values to a scalar by add, max or min only");
    Value firstLane = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::eq,
        arith::RemUIOp::create(b, loc, g.tid, g.index(b, loc, rows.lanesPerRow())),
        g.index(b, loc, 0));
    local = arith::SelectOp::create(b, loc, firstLane, local,
                                    arith::ConstantOp::create(b, loc, b.getZeroAttr(et)));
  }
  Value width = arith::ConstantIntOp::create(b, loc, b.getI32Type(), 32);
  for (int32_t offset = 16; offset >= 1; offset /= 2) {
    Value o = arith::ConstantIntOp::create(b, loc, b.getI32Type(), offset);
    auto shfl = gpu::ShuffleOp::create(b, loc, local, o, width, gpu::ShuffleMode::XOR);
    local = vector::makeArithReduction(b, loc, kind, local, shfl.getShuffleResult());
  }
  const int64_t warps = g.strided().getThreads() / 32;
  Value scratch =
      g.sharedBuffer(b, loc, warps, et, Scratch(red).lifetime(), 16, "block reduction slots");
  Value c32 = arith::ConstantIndexOp::create(b, loc, 32);
  Value lane = arith::RemUIOp::create(b, loc, g.tid, c32);
  Value warp = arith::DivUIOp::create(b, loc, g.tid, c32);
  Value leader = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, lane,
                                       arith::ConstantIndexOp::create(b, loc, 0));
  scf::IfOp::create(b, loc, leader, [&](OpBuilder& tb, Location l) {
    memref::StoreOp::create(tb, l, local, scratch, ValueRange{warp});
    scf::YieldOp::create(tb, l);
  });
  gpu::BarrierOp::create(b, loc);
  Value total = g.map.lookup(red.getAcc());
  for (int64_t w = 0; w < warps; ++w) {
    Value partial = memref::LoadOp::create(b, loc, scratch,
                                           ValueRange{arith::ConstantIndexOp::create(b, loc, w)});
    total = vector::makeArithReduction(b, loc, kind, partial, total);
  }
  Scratch(red).release(b, loc);
  g.map.map(red.getResult(), total);
  return success();
}

}  // namespace

void populateReductionRules(RuleRegistry& rules) {
  rules.add(vector::MultiDimReductionOp::getOperationName(), ruleFor(lowerReduction));
}

}  // namespace mlir::pallas::gpu_lowering

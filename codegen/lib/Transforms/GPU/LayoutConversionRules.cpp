//===- LayoutConversionRules.cpp - data moved between threads: convert_layout, transpose -===//
//
// The only places data moves between threads to change layout (or, for a
// transpose, place). Each goes through a shared-memory buffer that lives for
// the rule and ends with a barrier after its last read (SharedMemoryPlan.h).
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

namespace mlir::pallas::gpu_lowering {
namespace {

/// The fragment of distributed type `target` whose element at coordinates c
/// is the element of replicated `src` (of shape `srcType`) that numpy
/// broadcasting maps c to. Thread k % threads writes element k to shared
/// memory; after a barrier each thread reads its runs' elements back.
Value distribute(GpuLowering& g, OpBuilder& b, Location loc, Value src, VectorType srcType,
                 VectorType target) {
  const int64_t n = srcType.getNumElements();
  Type et = srcType.getElementType();
  Value buffer =
      g.sharedBuffer(b, loc, n, et, SharedLifetime::kRule, 16, "replicated to strided conversion");
  for (int64_t k = 0; k < n; ++k) {
    Value mine = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.tid,
                                       g.index(b, loc, k % g.strided().getThreads()));
    scf::IfOp::create(b, loc, mine, [&](OpBuilder& tb, Location l) {
      Value v = vector::ExtractOp::create(tb, l, src, ArrayRef<int64_t>{k});
      memref::StoreOp::create(tb, l, v, buffer, ValueRange{g.index(tb, l, k)});
      scf::YieldOp::create(tb, l);
    });
  }
  gpu::BarrierOp::create(b, loc);
  const int64_t lead = target.getRank() - srcType.getRank();
  VectorType runType = VectorType::get({g.strided().getVec()}, et);
  Value frag = g.assemble(b, loc, target, [&](int64_t, SmallVector<Value>& coords) -> Value {
    // Row-major flat index of the source element for the run's first element.
    Value at = g.index(b, loc, 0);
    for (int64_t d = 0; d < srcType.getRank(); ++d) {
      Value c = srcType.getShape()[d] == 1 ? g.index(b, loc, 0) : coords[lead + d];
      at = arith::AddIOp::create(
          b, loc, arith::MulIOp::create(b, loc, at, g.index(b, loc, srcType.getShape()[d])), c);
    }
    bool stretched = srcType.getRank() == 0 || srcType.getShape().back() == 1;
    if (stretched)
      return vector::BroadcastOp::create(b, loc, runType,
                                         memref::LoadOp::create(b, loc, buffer, ValueRange{at}));
    Value run = arith::ConstantOp::create(b, loc, b.getZeroAttr(runType));
    for (int64_t j = 0; j < g.strided().getVec(); ++j) {
      Value aj = arith::AddIOp::create(b, loc, at, g.index(b, loc, j));
      Value v = memref::LoadOp::create(b, loc, buffer, ValueRange{aj});
      run = vector::InsertOp::create(b, loc, v, run, ArrayRef<int64_t>{j});
    }
    return run;
  });
  gpu::BarrierOp::create(b, loc);
  return frag;
}

/// Strided to replicated (same shape): every thread stores its runs at their
/// flat positions; after a barrier every thread reads the whole block.
/// Worked example: vector<1x128xf32> in strided<threads = 128, vec = 1>:
/// thread t writes element t; then each thread reads all 128.
Value gather(GpuLowering& g, OpBuilder& b, Location loc, Value frag, VectorType type) {
  const int64_t n = type.getNumElements();
  Type et = type.getElementType();
  Value buffer =
      g.sharedBuffer(b, loc, n, et, SharedLifetime::kRule, 16, "strided to replicated conversion");
  g.storeRunsToShared(b, loc, frag, type, buffer);
  gpu::BarrierOp::create(b, loc);
  Value all = vector::LoadOp::create(b, loc, GpuLowering::flat(type), buffer,
                                     ValueRange{g.index(b, loc, 0)});
  gpu::BarrierOp::create(b, loc);
  return all;
}

/// Per-row values to the strided block they were reduced from (broadcasting
/// along the rows): run r of the block lies in the row whose value the thread
/// holds in register r, so each run is that value repeated `vec` times, in
/// registers. Worked example: 16x128 bf16 rows (vec 8): thread 37's runs 0 and
/// 1 lie in rows 2 and 10, so its fragment is 8 copies of register 0 then 8
/// of register 1.
Value spreadRows(GpuLowering& g, OpBuilder& b, Location loc, Value values, VectorType target) {
  const int64_t vec = g.strided().getVec();
  VectorType runType = VectorType::get({vec}, target.getElementType());
  Value frag = arith::ConstantOp::create(b, loc, b.getZeroAttr(g.threadType(target, g.strided())));
  for (int64_t r = 0; r < g.runs(target); ++r) {
    Value v = vector::ExtractOp::create(b, loc, values, ArrayRef<int64_t>{r});
    frag = vector::InsertStridedSliceOp::create(
        b, loc, vector::BroadcastOp::create(b, loc, runType, v), frag, ArrayRef<int64_t>{r * vec},
        ArrayRef<int64_t>{1});
  }
  return frag;
}

/// Row-major flat index of `coords` in `shape`, numpy-broadcasting from a
/// source of `source` shape (its extent-1 dims read index 0, leading dims dropped).
Value flatIndex(GpuLowering& g, OpBuilder& b, Location loc, ArrayRef<int64_t> source,
                ArrayRef<Value> coords) {
  const int64_t lead = coords.size() - source.size();
  Value at = g.index(b, loc, 0);
  for (size_t d = 0; d < source.size(); ++d) {
    Value c = source[d] == 1 ? g.index(b, loc, 0) : coords[lead + d];
    at = arith::AddIOp::create(b, loc,
                               arith::MulIOp::create(b, loc, at, g.index(b, loc, source[d])), c);
  }
  return at;
}

/// Conversions into and out of a tiled layout (the WGMMA accumulator): the
/// source is written row-major into a shared buffer (strided: its runs;
/// replicated: element k by thread k % threads; tiled: each register at its
/// element), and after a barrier the target is read back (tiled: each
/// register's element, broadcasting from a smaller source; strided: its
/// runs). Worked example: a [128, 128] f32 accumulator to strided<vec = 4>:
/// thread 37 writes register 0, element (17, 2), at 17 * 128 + 2; then reads
/// its run 0 at 148..151.
/// TODO(perf): the buffer has no padding, so the accumulator's writes (8
/// rows of a warp at a 512-byte pitch) conflict 8 ways in the banks.
LogicalResult convertThroughShared(ConvertLayoutOp convert, GpuLowering& g, OpBuilder& b) {
  Location loc = convert.getLoc();
  VectorType from = convert.getSource().getType(), to = convert.getResult().getType();
  Value src = g.map.lookup(convert.getSource());
  Type et = from.getElementType();
  const bool broadcasts = from.getShape() != to.getShape();
  if (broadcasts && !isa<TiledLayoutAttr>(convert.getTo()))
    return convert.emitOpError("no GPU rule broadcasts into ") << convert.getTo();
  Value buffer = g.sharedBuffer(b, loc, from.getNumElements(), et, SharedLifetime::kRule, 16,
                                "layout conversion");
  if (isa<WarpgroupStridedLayoutAttr>(convert.getFrom())) {
    g.storeRunsToShared(b, loc, src, from, buffer);
  } else if (isa<ReplicatedLayoutAttr>(convert.getFrom())) {
    const int64_t threads = g.strided().getThreads();
    for (int64_t k = 0; k < from.getNumElements(); ++k)
      scf::IfOp::create(b, loc, g.isThread(b, loc, k % threads), [&](OpBuilder& tb, Location l) {
        memref::StoreOp::create(tb, l, vector::ExtractOp::create(tb, l, src, k), buffer,
                                ValueRange{g.index(tb, l, k)});
        scf::YieldOp::create(tb, l);
      });
  } else if (auto tiled = dyn_cast<TiledLayoutAttr>(convert.getFrom())) {
    g.forEachTiledElement(b, loc, tiled, from.getShape(), [&](int64_t r, SmallVector<Value>& c) {
      memref::StoreOp::create(b, loc, vector::ExtractOp::create(b, loc, src, r), buffer,
                              ValueRange{flatIndex(g, b, loc, from.getShape(), c)});
    });
  } else {
    return convert.emitOpError("no GPU rule converts from ") << convert.getFrom();
  }
  gpu::BarrierOp::create(b, loc);
  Value result;
  if (auto tiled = dyn_cast<TiledLayoutAttr>(convert.getTo())) {
    result = arith::ConstantOp::create(b, loc, b.getZeroAttr(g.threadType(to, tiled)));
    g.forEachTiledElement(b, loc, tiled, to.getShape(), [&](int64_t r, SmallVector<Value>& c) {
      Value v = memref::LoadOp::create(b, loc, buffer,
                                       ValueRange{flatIndex(g, b, loc, from.getShape(), c)});
      result = vector::InsertOp::create(b, loc, v, result, r);
    });
  } else if (isa<WarpgroupStridedLayoutAttr>(convert.getTo())) {
    VectorType runType = VectorType::get({g.strided().getVec()}, et);
    result = g.assemble(b, loc, to, [&](int64_t r, SmallVector<Value>&) -> Value {
      return vector::LoadOp::create(b, loc, runType, buffer, ValueRange{g.runStart(b, loc, r)});
    });
  } else {
    return convert.emitOpError("no GPU rule converts to ") << convert.getTo();
  }
  gpu::BarrierOp::create(b, loc);
  g.map.map(convert.getResult(), result);
  return success();
}

LogicalResult lowerConvertLayout(ConvertLayoutOp convert, GpuLowering& g, OpBuilder& b) {
  if (isa<TiledLayoutAttr>(convert.getFrom()) || isa<TiledLayoutAttr>(convert.getTo()))
    return convertThroughShared(convert, g, b);
  Location loc = convert.getLoc();
  VectorType from = convert.getSource().getType(), to = convert.getResult().getType();
  Value src = g.map.lookup(convert.getSource());
  if (isa<ReplicatedLayoutAttr>(convert.getFrom()) &&
      isa<WarpgroupStridedLayoutAttr>(convert.getTo())) {
    g.map.map(convert.getResult(), distribute(g, b, loc, src, from, to));
    return success();
  }
  if (auto rows = dyn_cast<StridedRowsLayoutAttr>(convert.getFrom());
      rows && isa<WarpgroupStridedLayoutAttr>(convert.getTo()) &&
      to.getShape().back() == rows.getCols() &&
      to.getNumElements() == from.getNumElements() * rows.getCols()) {
    g.map.map(convert.getResult(), spreadRows(g, b, loc, src, to));
    return success();
  }
  if (isa<WarpgroupStridedLayoutAttr>(convert.getFrom()) &&
      isa<ReplicatedLayoutAttr>(convert.getTo()) && from == to) {
    g.map.map(convert.getResult(), gather(g, b, loc, src, from));
    return success();
  }
  return convert.emitOpError("no GPU rule converts ")
         << from << " in " << convert.getFrom() << " to " << to << " in " << convert.getTo()
         << "; known: replicated to strided (with broadcasting), strided_rows to strided (its "
            "block), strided to replicated, and strided or replicated to tiled (with "
            "broadcasting) and tiled to strided";
}

/// A 2-D strided block [R, C] transposed to a strided [C, R]: each thread
/// writes its runs' elements into a row-major [R, C + pad] buffer, and after
/// a barrier reads its result runs down the columns. The pad makes the row
/// pitch an odd number of 4-byte words (C + 1 f32, C + 2 bf16 when C is a
/// multiple of 4), so that the lanes reading one column hit different banks.
/// Example: f32 [64, 32] with 128 threads of runs of 4: thread 9 holds source
/// (1, 4..7), written at 1 * 33 + 4..7; result run (0, 36..39) of thread 9
/// reads source (36..39, 0) at 36 * 33, 37 * 33, ...
LogicalResult lowerTranspose(vector::TransposeOp t, GpuLowering& g, OpBuilder& b) {
  Location loc = t.getLoc();
  VectorType from = t.getSourceVectorType(), to = t.getResultVectorType();
  if (from.getRank() != 2) return t.emitOpError("the GPU transposes 2-D blocks only, not ") << from;
  FailureOr<Value> frag = g.operandIn(b, loc, t.getVector(), g.strided());
  if (failed(frag) || g.layoutOf(t.getResult()) != Attribute(g.strided()))
    return t.emitOpError("the GPU transposes strided blocks only");
  const int64_t rows = from.getShape()[0], cols = from.getShape()[1], vec = g.strided().getVec();
  Type et = from.getElementType();
  const int64_t elementBytes = std::max<int64_t>(1, et.getIntOrFloatBitWidth() / 8);
  const int64_t pitch = cols + (elementBytes >= 4 ? 1 : 4 / elementBytes);
  Value buffer =
      g.sharedBuffer(b, loc, rows * pitch, et, SharedLifetime::kRule, 16, "transpose buffer");
  Value pitchV = g.index(b, loc, pitch);
  auto at = [&](OpBuilder& ob, Location l, Value row, Value col, int64_t plusCol, int64_t plusRow) {
    Value r = arith::AddIOp::create(ob, l, row, g.index(ob, l, plusRow));
    Value c = arith::AddIOp::create(ob, l, col, g.index(ob, l, plusCol));
    return arith::AddIOp::create(ob, l, arith::MulIOp::create(ob, l, r, pitchV), c).getResult();
  };
  for (int64_t r = 0; r < g.runs(from); ++r) {
    SmallVector<Value> c = unflatten(b, loc, g.runStart(b, loc, r), from.getShape());
    for (int64_t j = 0; j < vec; ++j) {
      Value v = vector::ExtractOp::create(b, loc, *frag, ArrayRef<int64_t>{r * vec + j});
      memref::StoreOp::create(b, loc, v, buffer, ValueRange{at(b, loc, c[0], c[1], j, 0)});
    }
  }
  gpu::BarrierOp::create(b, loc);
  VectorType runType = VectorType::get({vec}, et);
  Value result = g.assemble(b, loc, to, [&](int64_t, SmallVector<Value>& rc) -> Value {
    // Result (rc0, rc1 + j) is source (rc1 + j, rc0).
    Value run = arith::ConstantOp::create(b, loc, b.getZeroAttr(runType));
    for (int64_t j = 0; j < vec; ++j) {
      Value v = memref::LoadOp::create(b, loc, buffer, ValueRange{at(b, loc, rc[1], rc[0], 0, j)});
      run = vector::InsertOp::create(b, loc, v, run, ArrayRef<int64_t>{j});
    }
    return run;
  });
  gpu::BarrierOp::create(b, loc);
  g.map.map(t.getResult(), result);
  return success();
}

}  // namespace

void populateLayoutConversionRules(RuleRegistry& rules) {
  rules.add(ConvertLayoutOp::getOperationName(), ruleFor(lowerConvertLayout));
  rules.add(vector::TransposeOp::getOperationName(), ruleFor(lowerTranspose));
}

}  // namespace mlir::pallas::gpu_lowering

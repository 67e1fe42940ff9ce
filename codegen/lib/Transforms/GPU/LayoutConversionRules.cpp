//===- LayoutConversionRules.cpp - pallas.convert_layout through shared memory -===//
//
// The only place data moves between threads to change layout. Both
// directions go through a shared-memory buffer that lives for the rule and
// end with a barrier after its last read (SharedMemoryPlan.h).
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

LogicalResult lowerConvertLayout(ConvertLayoutOp convert, GpuLowering& g, OpBuilder& b) {
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
            "block), strided to replicated";
}

}  // namespace

void populateLayoutConversionRules(RuleRegistry& rules) {
  rules.add(ConvertLayoutOp::getOperationName(), ruleFor(lowerConvertLayout));
}

}  // namespace mlir::pallas::gpu_lowering

//===- StagingRules.cpp - blocks staged in shared memory by TMA (InShared) -===//
//
// A `pallas.block {staged}` is copied between its array and a shared-memory
// buffer by the Tensor Memory Accelerator (sm_90a), one box per block:
//
//   input   thread 0: mbarrier.init(bar, 1); fence.mbarrier_init
//           bar.sync (every thread sees the initialised barrier)
//           thread 0: mbarrier.arrive.expect_tx(bar, box bytes)
//                     cp.async.bulk.tensor (box at the block origin) -> buffer, completes on bar
//           each load of the block: mbarrier.try_wait.parity(bar, 0), then
//           16-byte shared loads of the thread's runs
//   output  each store of the block: 16-byte shared stores of the thread's runs
//           when the program ends: fence.proxy.async (the TMA unit reads what
//           threads wrote), bar.sync, thread 0: cp.async.bulk.tensor buffer ->
//           box, commit_group, wait_group.read 0 (the buffer is read before exit)
//
// The buffer holds the box in row-major order, densely packed (the box's
// last dim is a multiple of 16 bytes), with TMA's swizzle applied: byte
// offset o of the unswizzled buffer lives at
//
//   swizzle(o) = o ^ (((o >> 7) & (S/16 - 1)) << 4)     for S = 32, 64, 128 bytes
//
// i.e. the 16-byte piece index within each 128-byte line is XORed with the
// line index modulo S/16. Worked example, bf16 box of 64 x 64 with S = 128:
// element (3, 8) is at o = 3 * 128 + 16 = 400 = line 3, piece 1; it lives in
// piece 1 ^ 3 = 2, at byte 416. A 16-byte run never straddles pieces, so each
// run is one 16-byte access. The buffer is aligned to the pattern's period
// (S * 8 bytes; 128 without swizzle), as TMA requires.
//
// TMA reads elements outside the array as zero and never writes them, so
// edge blocks need no masks: loads of a staged block read zero there, as
// `pallas.load` specifies, and stores are clipped.
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::pallas::gpu_lowering {
namespace {

constexpr unsigned kSharedSpace = 3;

/// The shared-memory address of `buffer` (a workgroup memref) as !llvm.ptr<3>.
Value sharedPointer(OpBuilder& b, Location loc, Value buffer) {
  Value index = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, buffer);
  Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), index);
  return LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext(), kSharedSpace),
                                  i64);
}

Value i32(OpBuilder& b, Location loc, int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
}

/// The element index (in the 1-D buffer) where the 16-byte piece starting at
/// row-major element `flat` of the box lives after swizzling.
Value swizzled(OpBuilder& b, Location loc, Value flat, int64_t elementBytes, int64_t swizzle) {
  if (swizzle == 0) return flat;
  Value bytes =
      arith::MulIOp::create(b, loc, flat, arith::ConstantIndexOp::create(b, loc, elementBytes));
  Value line = arith::ShRUIOp::create(b, loc, bytes, arith::ConstantIndexOp::create(b, loc, 7));
  Value piece =
      arith::AndIOp::create(b, loc, line, arith::ConstantIndexOp::create(b, loc, swizzle / 16 - 1));
  Value x = arith::XOrIOp::create(
      b, loc, bytes,
      arith::ShLIOp::create(b, loc, piece, arith::ConstantIndexOp::create(b, loc, 4)));
  return arith::DivUIOp::create(b, loc, x, arith::ConstantIndexOp::create(b, loc, elementBytes));
}

/// Row-major flat index in the box of the element at box coordinates `coords`.
Value boxFlat(OpBuilder& b, Location loc, ArrayRef<int64_t> box, ValueRange coords) {
  Value flat = arith::ConstantIndexOp::create(b, loc, 0);
  for (auto [c, extent] : llvm::zip(coords, box))
    flat = arith::AddIOp::create(
        b, loc, arith::MulIOp::create(b, loc, flat, arith::ConstantIndexOp::create(b, loc, extent)),
        c);
  return flat;
}

/// What the staged copy of `ref` covers, as a BlockRef over the box (origin 0,
/// extents the box), so that BlockIndexing's coordinates index the box.
BlockRef boxRef(OpBuilder& b, Location loc, const StagedBlock& st) {
  BlockRef r;
  r.array = st.buffer;
  for (int64_t extent : st.box) {
    r.origin.push_back(arith::ConstantIndexOp::create(b, loc, 0));
    r.extents.push_back(arith::ConstantIndexOp::create(b, loc, extent));
  }
  r.refDims = st.refDims;
  return r;
}

/// A staged block must be moved whole runs at a time: checks that runs of
/// `vec` elements lie along the box's last dim, each in 16-byte pieces.
LogicalResult checkRuns(Operation* op, const StagedBlock& st, int64_t vec, int64_t elementBytes) {
  if (st.box.back() % vec != 0 || (vec * elementBytes) % 16 != 0)
    return op->emitOpError("a staged block moves runs of ")
           << vec << " elements (" << vec * elementBytes << " bytes) along its last dim of "
           << st.box.back() << "; the runs must be whole 16-byte pieces of its rows";
  return success();
}

}  // namespace

LogicalResult lowerStagedBlock(BlockOp blk, GpuLowering& g, OpBuilder& b) {
  Location loc = blk.getLoc();
  auto array = cast<MemRefType>(blk.getArray().getType());
  Type et = array.getElementType();
  const int64_t elementBytes = et.getIntOrFloatBitWidth() / 8;
  StagedBlock st;
  st.swizzle = blk.getSwizzle().value_or(0);
  st.output =
      llvm::any_of(blk.getResult().getUsers(), [](Operation* u) { return isa<StoreOp>(u); });
  for (auto [extent, squeezed] : llvm::zip(blk.getBlockShape(), blk.getSqueezed())) {
    st.box.push_back(extent);
    if (!squeezed) st.refDims.push_back(static_cast<int64_t>(st.box.size()) - 1);
  }
  int64_t elements = 1;
  for (int64_t e : st.box) elements *= e;
  const int64_t bytes = elements * elementBytes;
  Value descriptor = g.tmaDescriptors.lookup(blk.getArray());
  if (!descriptor)
    return blk.emitOpError(
        "a staged block's array must be a kernel argument (it has a TMA "
        "descriptor parameter)");
  st.descriptor = descriptor;
  // TMA coordinates: the block origin, innermost dim first, as i32.
  BlockRef origin =
      resolveBlock(b, loc, blk, g.map.lookup(blk.getArray()), g.mapped(blk.getIndices()));
  for (Value o : llvm::reverse(origin.origin))
    st.coords.push_back(arith::IndexCastOp::create(b, loc, b.getI32Type(), o));
  // The buffer, aligned to the swizzle pattern's period (TMA's rule).
  const int64_t align = st.swizzle == 0 ? 128 : st.swizzle * 8;
  std::string purpose =
      (st.output ? "staged output block '" : "staged input block '") +
      (blk->hasAttr("name") ? blk->getAttrOfType<StringAttr>("name").str() : std::string("?")) +
      "'";
  st.buffer = g.sharedBuffer(b, loc, elements, et, SharedLifetime::kKernel, align, purpose);
  if (st.output) {  // copied out when the program ends (copyOutStagedBlocks)
    g.staged[blk.getResult()] = st;
    g.stagedOutputs.push_back(blk.getResult());
    return success();
  }
  st.barrier =
      g.sharedBuffer(b, loc, 1, b.getI64Type(), SharedLifetime::kKernel, 8, purpose + " barrier");
  Value bar = sharedPointer(b, loc, st.barrier);
  Value first = g.isThread(b, loc, 0);
  scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
    NVVM::MBarrierInitOp::create(tb, l, bar, i32(tb, l, 1), Value());
    NVVM::FenceMbarrierInitOp::create(tb, l);
    scf::YieldOp::create(tb, l);
  });
  gpu::BarrierOp::create(b, loc);
  scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
    NVVM::MBarrierArriveExpectTxOp::create(tb, l, Type(), bar, i32(tb, l, bytes),
                                           NVVM::MemScopeKindAttr(), tb.getBoolAttr(false),
                                           Value());
    Value dst = LLVM::AddrSpaceCastOp::create(tb, l, LLVM::LLVMPointerType::get(tb.getContext(), 7),
                                              sharedPointer(tb, l, st.buffer));
    NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
        tb, l, dst, st.descriptor, st.coords, bar, ValueRange{}, Value(), Value(),
        NVVM::TMALoadModeAttr::get(tb.getContext(), NVVM::TMALoadMode::TILE), tb.getBoolAttr(false),
        NVVM::CTAGroupKindAttr(), Value());
    scf::YieldOp::create(tb, l);
  });
  g.staged[blk.getResult()] = st;
  return success();
}

LogicalResult lowerStagedLoad(LoadOp load, GpuLowering& g, OpBuilder& b) {
  Location loc = load.getLoc();
  const StagedBlock& st = g.staged.at(load.getRef());
  if (st.output)
    return load.emitOpError(
        "loads an output block staged in shared memory; staged outputs are "
        "only stored");
  if (!load.getDynamicOffsets().empty())
    return load.emitOpError("a staged block is loaded at static offsets only");
  if (load.getPaddingOrZero() != b.getZeroAttr(load.getPaddingOrZero().getType()))
    return load.emitOpError(
        "a staged block reads zero outside the array (TMA's fill); a load "
        "with other padding needs the unstaged path");
  if (!isa_and_nonnull<WarpgroupStridedLayoutAttr>(g.layoutOf(load.getResult())))
    return load.emitOpError("the GPU loads blocks in the strided layout only, not ")
           << g.layoutOf(load.getResult());
  VectorType type = load.getResult().getType();
  Type et = type.getElementType();
  const int64_t elementBytes = et.getIntOrFloatBitWidth() / 8, vec = g.strided().getVec();
  if (failed(checkRuns(load, st, vec, elementBytes))) return failure();
  BlockRef box = boxRef(b, loc, st);
  if (!lastDimContiguous(box, load.getSizes(), type.getShape()))
    return load.emitOpError("a staged block is loaded without broadcasting along its last dim");
  // Wait for the copy (phase 0 of the block's barrier; at once once complete).
  NVVM::MBarrierTryWaitParityOp::create(b, loc, sharedPointer(b, loc, st.barrier), i32(b, loc, 0),
                                        i32(b, loc, 1000000));
  const int64_t perPiece = 16 / elementBytes;
  VectorType pieceType = VectorType::get({perPiece}, et);
  Value frag = g.assemble(b, loc, type, [&](int64_t, SmallVector<Value>& rc) -> Value {
    SmallVector<Value> coords = arrayCoords(b, loc, box, load.getOffsets(), ValueRange{},
                                            load.getSizes(), type.getShape(), rc);
    Value flat = boxFlat(b, loc, st.box, coords);
    Value run = arith::ConstantOp::create(b, loc, b.getZeroAttr(VectorType::get({vec}, et)));
    for (int64_t j = 0; j < vec; j += perPiece) {
      Value at = swizzled(
          b, loc, arith::AddIOp::create(b, loc, flat, arith::ConstantIndexOp::create(b, loc, j)),
          elementBytes, st.swizzle);
      Value piece = vector::LoadOp::create(b, loc, pieceType, st.buffer, ValueRange{at},
                                           /*nontemporal=*/false, llvm::MaybeAlign(16));
      run = vector::InsertStridedSliceOp::create(b, loc, piece, run, ArrayRef<int64_t>{j},
                                                 ArrayRef<int64_t>{1});
    }
    return run;
  });
  g.map.map(load.getResult(), frag);
  return success();
}

LogicalResult lowerStagedStore(StoreOp store, GpuLowering& g, OpBuilder& b) {
  Location loc = store.getLoc();
  const StagedBlock& st = g.staged.at(store.getRef());
  auto type = dyn_cast<VectorType>(store.getValue().getType());
  RefType ref = store.getRef().getType();
  // The TMA store writes the whole box, so the body must have written all of
  // it, in every program: one whole-block store at the kernel's top level.
  if (!type || type.getShape() != ref.getShape() || !store.getDynamicOffsets().empty() ||
      llvm::any_of(store.getOffsets(), [](int64_t o) { return o != 0; }))
    return store.emitOpError(
        "a block staged in shared memory is stored whole (the TMA copy "
        "writes the whole block)");
  if (!isa<func::FuncOp>(store->getParentOp()))
    return store.emitOpError(
        "a block staged in shared memory is stored at the top level of "
        "the body, not under a loop or a condition");
  FailureOr<Value> frag = g.operandIn(b, loc, store.getValue(), g.strided());
  if (failed(frag)) return store.emitOpError("stores a value that is not in the strided layout");
  Type et = type.getElementType();
  const int64_t elementBytes = et.getIntOrFloatBitWidth() / 8, vec = g.strided().getVec();
  if (failed(checkRuns(store, st, vec, elementBytes))) return failure();
  BlockRef box = boxRef(b, loc, st);
  const int64_t perPiece = 16 / elementBytes;
  for (int64_t r = 0; r < g.runs(type); ++r) {
    SmallVector<Value> rc = unflatten(b, loc, g.runStart(b, loc, r), type.getShape());
    SmallVector<Value> coords = arrayCoords(b, loc, box, store.getOffsets(), ValueRange{},
                                            type.getShape(), type.getShape(), rc);
    Value flat = boxFlat(b, loc, st.box, coords);
    for (int64_t j = 0; j < vec; j += perPiece) {
      Value piece =
          vector::ExtractStridedSliceOp::create(b, loc, *frag, ArrayRef<int64_t>{r * vec + j},
                                                ArrayRef<int64_t>{perPiece}, ArrayRef<int64_t>{1});
      Value at = swizzled(
          b, loc, arith::AddIOp::create(b, loc, flat, arith::ConstantIndexOp::create(b, loc, j)),
          elementBytes, st.swizzle);
      vector::StoreOp::create(b, loc, piece, st.buffer, ValueRange{at}, /*nontemporal=*/false,
                              llvm::MaybeAlign(16));
    }
  }
  return success();
}

void copyOutStagedBlocks(GpuLowering& g, OpBuilder& b) {
  if (g.stagedOutputs.empty()) return;
  Location loc = g.kernel.getLoc();
  // The threads' shared-memory writes, then the async proxy reads them.
  NVVM::FenceProxyOp::create(
      b, loc, NVVM::ProxyKindAttr::get(b.getContext(), NVVM::ProxyKind::async_shared),
      NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
  gpu::BarrierOp::create(b, loc);
  scf::IfOp::create(b, loc, g.isThread(b, loc, 0), [&](OpBuilder& tb, Location l) {
    for (Value ref : g.stagedOutputs) {
      const StagedBlock& st = g.staged.at(ref);
      NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
          tb, l, st.descriptor, sharedPointer(tb, l, st.buffer), st.coords, Value(),
          NVVM::TMAStoreModeAttr::get(tb.getContext(), NVVM::TMAStoreMode::TILE), Value());
    }
    NVVM::CpAsyncBulkCommitGroupOp::create(tb, l);
    // The buffers must stay until the copies have read them: wait before exit.
    NVVM::CpAsyncBulkWaitGroupOp::create(tb, l, tb.getI32IntegerAttr(0), tb.getUnitAttr());
    scf::YieldOp::create(tb, l);
  });
}

}  // namespace mlir::pallas::gpu_lowering

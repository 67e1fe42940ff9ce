//===- AsyncCopyRules.cpp - run_scoped buffers, explicit copies and barriers -===//
//
// The hand-written form of staging (Spec.h: run_scoped, copy_gmem_to_smem,
// barrier_wait, ...). A `pallas.run_scoped` region gets its buffers and
// mbarrier arrays from the shared-memory plan, live only while it runs:
//
//   scope start   every thread: phases = 0 (its i32 of phase bits per barrier array)
//                 thread 0: mbarrier.init(bar k, arrivals) for every barrier; bar.sync
//   copy_to_shared
//     TMA (sm_90a)   thread 0: arrive.expect_tx(bar, box bytes); TMA box copies -> buffer
//     cp.async       every thread: its 16-byte pieces, cp.async.mbarrier.arrive(bar)
//                    (holds the phase until they land); bar.sync; thread 0: arrive(bar)
//     direct         every thread: its pieces by ordinary loads; bar.sync; thread 0: arrive
//   barrier_wait k   every thread: parity = (phases >> k) & 1; wait for that phase of
//                    bar k; phases ^= 1 << k
//   barrier_arrive k bar.sync; thread 0: arrive(bar k)
//   copy_to_global   TMA: thread 0's box stores (reductions for add), commit_group;
//                    cp.async and direct: every thread stores its pieces (atomics for add)
//   commit_shared    fence.proxy.async (TMA only), bar.sync
//   wait_copies_to_global n   thread 0: cp.async.bulk.wait_group(.read) n (TMA); bar.sync
//   scope end        thread 0: wait_group.read 0 (the buffers' stores have read them);
//                    bar.sync; thread 0: mbarrier.inval of every barrier
//
// In each form a copy is one arrival of the program on its barrier, and the
// phase completes once the copy's bytes are in the buffer, so the body's
// `Barrier{arrivals}` counts copies plus barrier_arrives alike.
//
// Worked example of the phase bits: a double-buffered loop over blocks k =
// 0, 1, 2, ... with barriers ready[0..1] waits on ready[k % 2]. The waits of
// steps 0, 1, 2, 3 read parities 0, 0, 1, 1 (bits 0b00, 0b01, 0b11, 0b10
// before each): each barrier's n-th wait is for its phase n - 1, whose
// parity is (n - 1) & 1. The bits live in a per-thread i32 (an alloca that
// LLVM keeps in a register), so loops of any trip count track them.
//
// A buffer holds its box as a staged block does (StagingRules.cpp: copy
// boxes of at most 256 a dim, swizzled), so its loads and stores are the
// staged block's, without the wait (the body waits) and with a store
// anywhere, fenced by barriers like a store to scratch.
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::pallas::gpu_lowering {
namespace {

/// `body` on thread 0 only.
void onThread0(OpBuilder& b, Location loc, GpuLowering& g,
               function_ref<void(OpBuilder&, Location)> body) {
  scf::IfOp::create(b, loc, g.isThread(b, loc, 0), [&](OpBuilder& tb, Location l) {
    body(tb, l);
    scf::YieldOp::create(tb, l);
  });
}

/// TMA coordinates (i32, innermost first) of element offsets (index, outermost first).
SmallVector<Value> tmaCoords(OpBuilder& b, Location loc, ValueRange offsets) {
  SmallVector<Value> coords;
  for (Value o : llvm::reverse(offsets))
    coords.push_back(arith::IndexCastOp::create(b, loc, b.getI32Type(), o));
  return coords;
}

/// The run_scoped buffer of a copy, with the array it is copied with.
FailureOr<StagedBlock> copyBuffer(Operation* op, Value buffer, Value array, bool direct,
                                  GpuLowering& g) {
  auto it = g.copyBuffers.find(buffer);
  if (it == g.copyBuffers.end())
    return op->emitOpError("copies a buffer that no enclosing pallas.run_scoped set up");
  StagedBlock st = it->second;
  st.array = g.map.lookup(array);
  st.descriptor = g.tmaDescriptors.lookup(array);
  if (!direct && !st.descriptor)
    return op->emitOpError(
        "copies an array without a TMA descriptor parameter (not a kernel argument)");
  return st;
}

/// Thread 0 arrives once on `bar` (the state mbarrier.arrive returns is unused).
void arriveOnce(OpBuilder& b, Location loc, GpuLowering& g, Value bar) {
  onThread0(b, loc, g, [&](OpBuilder& tb, Location l) {
    NVVM::MBarrierArriveOp::create(tb, l, tb.getI64Type(), bar, Value(), NVVM::MemScopeKindAttr(),
                                   BoolAttr());
  });
}

/// "buffer 'even'" (the name the tracer put on the block over it), else "buffer 0".
std::string bufferName(BlockArgument arg) {
  for (Operation* user : arg.getUsers())
    if (auto name = user->getAttrOfType<StringAttr>("name"); name && isa<BlockOp>(user))
      return "buffer '" + name.str() + "'";
  return "buffer " + std::to_string(arg.getArgNumber());
}

LogicalResult lowerRunScoped(RunScopedOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  Block& body = op.getBody().front();
  g.openScope();
  SmallVector<GpuLowering::BarrierArray> arrays;
  for (BlockArgument arg : body.getArguments()) {
    if (auto type = dyn_cast<MemRefType>(arg.getType())) {
      StagedBlock st;
      st.swizzle = op.getSwizzles()[arg.getArgNumber()];
      st.elementBytes = type.getElementTypeBitWidth() / 8;
      for (int64_t extent : type.getShape()) {
        st.box.push_back(extent);
        st.copyBox.push_back(std::min<int64_t>(extent, kTmaMaxBoxDim));
        if (extent % st.copyBox.back() != 0)
          return op.emitOpError() << bufferName(arg) << " dim of " << extent
                                  << " is longer than a TMA box (" << kTmaMaxBoxDim
                                  << " elements) and not a multiple of it";
        st.refDims.push_back(static_cast<int64_t>(st.box.size()) - 1);
      }
      if (st.bytes() % 16 != 0 || (st.box.back() * st.elementBytes) % 16 != 0)
        return op.emitOpError() << bufferName(arg) << " has rows of "
                                << st.box.back() * st.elementBytes
                                << " bytes; copies move rows of a multiple of 16 bytes";
      // TMA's alignment rule for its shared side: the swizzle pattern's period.
      const int64_t align = st.swizzle == 0 ? 128 : st.swizzle * 8;
      st.slotElements = type.getNumElements();
      st.buffer = g.sharedBuffer(b, loc, st.slotElements, type.getElementType(),
                                 SharedLifetime::kScope, align, "run_scoped " + bufferName(arg));
      st.slot = arith::ConstantIndexOp::create(b, loc, 0);
      st.parity = constI32(b, loc, 0);
      st.explicitBuffer = true;
      g.copyBuffers[arg] = st;
      continue;
    }
    auto type = cast<BarriersType>(arg.getType());
    GpuLowering::BarrierArray a;
    a.count = type.getCount();
    a.arrivals = type.getArrivals();
    a.memref = g.sharedBuffer(b, loc, a.count, b.getI64Type(), SharedLifetime::kScope, 8,
                              "run_scoped barriers " + std::to_string(arg.getArgNumber()));
    OpBuilder eb = g.entryBuilder();
    a.phases = LLVM::AllocaOp::create(eb, loc, LLVM::LLVMPointerType::get(b.getContext()),
                                      b.getI32Type(), constI32(eb, loc, 1));
    LLVM::StoreOp::create(b, loc, constI32(b, loc, 0), a.phases);
    g.barrierArrays[arg] = a;
    arrays.push_back(a);
  }
  if (!arrays.empty()) {
    onThread0(b, loc, g, [&](OpBuilder& tb, Location l) {
      for (const GpuLowering::BarrierArray& a : arrays)
        for (int64_t k = 0; k < a.count; ++k)
          NVVM::MBarrierInitOp::create(
              tb, l, barrierPointer(tb, l, a.memref, arith::ConstantIndexOp::create(tb, l, k)),
              constI32(tb, l, a.arrivals), Value());
      if (g.usesTma()) NVVM::FenceMbarrierInitOp::create(tb, l);
    });
    gpu::BarrierOp::create(b, loc);
  }
  if (failed(g.lowerBlock(body, b))) return failure();
  // The buffers' bytes go to others after the scope: the TMA stores reading
  // them must be done, and so must every thread.
  bool tmaStores = false;
  op.walk([&](CopyToGlobalOp out) { tmaStores |= !out.getDirect(); });
  if (tmaStores && g.usesTma())
    onThread0(b, loc, g, [&](OpBuilder& tb, Location l) {
      NVVM::CpAsyncBulkWaitGroupOp::create(tb, l, tb.getI32IntegerAttr(0), tb.getUnitAttr());
    });
  gpu::BarrierOp::create(b, loc);
  if (!arrays.empty())
    onThread0(b, loc, g, [&](OpBuilder& tb, Location l) {
      for (const GpuLowering::BarrierArray& a : arrays)
        for (int64_t k = 0; k < a.count; ++k)
          NVVM::MBarrierInvalOp::create(
              tb, l, barrierPointer(tb, l, a.memref, arith::ConstantIndexOp::create(tb, l, k)));
    });
  g.closeScope();
  return success();
}

LogicalResult lowerCopyToShared(CopyToSharedOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  FailureOr<StagedBlock> st = copyBuffer(op, op.getBuffer(), op.getArray(), op.getDirect(), g);
  if (failed(st)) return failure();
  const GpuLowering::BarrierArray& bars = g.barrierArrays.at(op.getBarriers());
  Value bar = barrierPointer(b, loc, bars.memref, g.map.lookup(op.getBarrier()));
  SmallVector<Value> coords = tmaCoords(b, loc, g.mapped(op.getOffsets()));
  if (op.getDirect()) {
    copyByThreads(b, loc, g, *st, coords, /*toShared=*/true, /*add=*/false);
  } else if (g.cpAsync) {
    issueCopyIn(b, loc, g, *st, bar, coords);
  } else {
    onThread0(b, loc, g,
              [&](OpBuilder& tb, Location l) { issueCopyIn(tb, l, g, *st, bar, coords); });
    return success();
  }
  // Every thread's part is issued (cp.async) or done (direct): the program's arrival.
  gpu::BarrierOp::create(b, loc);
  arriveOnce(b, loc, g, bar);
  return success();
}

LogicalResult lowerCopyToGlobal(CopyToGlobalOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  const bool byThreads = op.getDirect() || g.cpAsync;  // sm_80 has no bulk stores
  FailureOr<StagedBlock> st = copyBuffer(op, op.getBuffer(), op.getArray(), byThreads, g);
  if (failed(st)) return failure();
  SmallVector<Value> coords = tmaCoords(b, loc, g.mapped(op.getOffsets()));
  if (byThreads) {
    copyByThreads(b, loc, g, *st, coords, /*toShared=*/false, op.getAdd());
    return success();
  }
  onThread0(b, loc, g, [&](OpBuilder& tb, Location l) {
    issueStageStore(tb, l, *st, st->slot, coords, op.getAdd());
    if (!op.getUncommitted()) NVVM::CpAsyncBulkCommitGroupOp::create(tb, l);
  });
  return success();
}

LogicalResult lowerPrefetch(PrefetchOp op, GpuLowering& g, OpBuilder& b) {
  Value descriptor = g.tmaDescriptors.lookup(op.getArray());
  if (op.getDirect() || !g.usesTma() || !descriptor) return success();  // a hint
  Location loc = op.getLoc();
  SmallVector<Value> coords = tmaCoords(b, loc, g.mapped(op.getOffsets()));
  onThread0(b, loc, g, [&](OpBuilder& tb, Location l) {
    NVVM::CpAsyncBulkTensorPrefetchOp::create(
        tb, l, descriptor, coords, ValueRange{},
        NVVM::TMALoadModeAttr::get(tb.getContext(), NVVM::TMALoadMode::TILE), Value());
  });
  return success();
}

LogicalResult lowerBarrierWait(BarrierWaitOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  const GpuLowering::BarrierArray& bars = g.barrierArrays.at(op.getBarriers());
  Value index = g.map.lookup(op.getBarrier());
  Value k = arith::IndexCastOp::create(b, loc, b.getI32Type(), index);
  Value bits = LLVM::LoadOp::create(b, loc, b.getI32Type(), bars.phases);
  Value parity =
      arith::AndIOp::create(b, loc, arith::ShRUIOp::create(b, loc, bits, k), constI32(b, loc, 1));
  waitForPhase(b, loc, g, barrierPointer(b, loc, bars.memref, index), parity);
  Value flipped =
      arith::XOrIOp::create(b, loc, bits, arith::ShLIOp::create(b, loc, constI32(b, loc, 1), k));
  LLVM::StoreOp::create(b, loc, flipped, bars.phases);
  return success();
}

LogicalResult lowerBarrierArrive(BarrierArriveOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  const GpuLowering::BarrierArray& bars = g.barrierArrays.at(op.getBarriers());
  Value bar = barrierPointer(b, loc, bars.memref, g.map.lookup(op.getBarrier()));
  gpu::BarrierOp::create(b, loc);  // what every thread did comes before the arrival
  arriveOnce(b, loc, g, bar);
  return success();
}

LogicalResult lowerCommitShared(CommitSharedOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  if (g.usesTma())  // the threads' writes, then the async proxy (TMA) reads them
    NVVM::FenceProxyOp::create(
        b, loc, NVVM::ProxyKindAttr::get(b.getContext(), NVVM::ProxyKind::async_shared),
        NVVM::SharedSpaceAttr::get(b.getContext(), NVVM::SharedSpace::shared_cta));
  gpu::BarrierOp::create(b, loc);
  return success();
}

LogicalResult lowerCommitCopies(CommitCopiesToGlobalOp op, GpuLowering& g, OpBuilder& b) {
  if (g.usesTma())
    onThread0(b, op.getLoc(), g,
              [&](OpBuilder& tb, Location l) { NVVM::CpAsyncBulkCommitGroupOp::create(tb, l); });
  return success();
}

LogicalResult lowerWaitCopies(WaitCopiesToGlobalOp op, GpuLowering& g, OpBuilder& b) {
  Location loc = op.getLoc();
  if (g.usesTma())
    onThread0(b, loc, g, [&](OpBuilder& tb, Location l) {
      NVVM::CpAsyncBulkWaitGroupOp::create(
          tb, l, tb.getI32IntegerAttr(static_cast<int32_t>(op.getPending())),
          op.getReadOnly() ? tb.getUnitAttr() : UnitAttr());
    });
  gpu::BarrierOp::create(b, loc);  // every thread may now write what the copies read
  return success();
}

}  // namespace

LogicalResult lowerBufferBlock(BlockOp blk, GpuLowering& g, OpBuilder& b) {
  StagedBlock st = g.copyBuffers.at(blk.getArray());
  st.op = blk;
  g.staged[blk.getResult()] = st;
  return success();
}

void populateAsyncCopyRules(RuleRegistry& rules) {
  rules.add(RunScopedOp::getOperationName(), ruleFor(lowerRunScoped));
  rules.add(CopyToSharedOp::getOperationName(), ruleFor(lowerCopyToShared));
  rules.add(CopyToGlobalOp::getOperationName(), ruleFor(lowerCopyToGlobal));
  rules.add(PrefetchOp::getOperationName(), ruleFor(lowerPrefetch));
  rules.add(BarrierWaitOp::getOperationName(), ruleFor(lowerBarrierWait));
  rules.add(BarrierArriveOp::getOperationName(), ruleFor(lowerBarrierArrive));
  rules.add(CommitSharedOp::getOperationName(), ruleFor(lowerCommitShared));
  rules.add(CommitCopiesToGlobalOp::getOperationName(), ruleFor(lowerCommitCopies));
  rules.add(WaitCopiesToGlobalOp::getOperationName(), ruleFor(lowerWaitCopies));
}

}  // namespace mlir::pallas::gpu_lowering

//===- PipelineRules.cpp - pipelined sequential loops (pallas.pipeline) ---===//
//
// An scf.for marked `pallas.pipeline` (an arbitrary grid axis with staged
// blocks, or the EDSL's emit_pipeline) runs its staged blocks as a software
// pipeline, as Pallas' emit_pipeline does on Mosaic GPU: a stage (a staged
// pallas.block defined in the loop body) with n = `buffers` gets n stage
// buffers and, for an input, n mbarriers; step i (counting from the loop's
// lower bound) uses buffer i % n and waits for phase i / n of its barrier,
// i.e. parity (i / n) % 2. Thread 0 is the producer (with cp.async on sm_80
// every thread copies its pieces: StagingRules.cpp), every thread a consumer:
//
//   thread 0: mbarrier.init (one arrival) of every input stage's barriers
//   bar.sync
//   thread 0: for s < n, if lo + s < hi: expect-tx + TMA copies of step s's
//             block into buffer s
//   for k = lo .. hi:
//     body: a load of an input stage waits try_wait.parity(bar[slot], parity),
//           then reads buffer `slot`; a store of an output stage writes buffer `slot`
//     [an input some step may not read: its loads under a `when`] the same wait
//           (readEveryStep), so no copy is left in flight into a buffer being refilled
//     [outputs] fence.proxy.async; thread 0: cp.async.bulk.wait_group.read n - 2
//               (the store that last read the buffer step k + 1 writes is done)
//     bar.sync  (release: every thread is done with this step's buffers)
//     thread 0: [outputs] TMA store of buffer `slot` to step k's block, commit_group
//               [inputs]  if k + n < hi: expect-tx + TMA copies of step k + n's block
//                         into buffer `slot` (the one just released)
//     [an output with n = 1] thread 0: wait_group.read 0; bar.sync
//   thread 0: [outputs] wait_group.read 0; mbarrier.inval of every barrier
//
// so the copies of steps k + 1 .. k + n - 1 are in flight while step k
// computes. With Pallas' delay_release d (`pallas.delay_release`, for
// multiplies still reading a step's buffers after it: wgmma_wait(1)), step k
// refills the buffer of step k - d with step k - d + n instead, once k >= d:
// n = 3, d = 1: step 1 refills buffer 0 with step 3, step 2 buffer 1 with
// step 4; steps k + 1 .. k + n - 1 - d are in flight during step k. The block indices of step k + n
// are the loop body's index ops lowered once more with the induction variable at k + n
// (lowerAgainWith); they must be free of side effects and independent of loop carries.
//
// Worked example, n = 2 over steps 0..4 of one input: the prologue fetches
// steps 0 and 1 into buffers 0 and 1; step 0 waits bar[0] parity 0, then
// refills buffer 0 with step 2; step 1 waits bar[1] parity 0 and fetches
// step 3; step 2 waits bar[0] parity 1 (its second phase) and fetches step
// 4; steps 3 and 4 fetch nothing.
//
// The barriers are invalidated when the loop ends so that a pipeline run
// again (under an outer loop) initialises them afresh.
//
// Warp specialization (`pallas.warp_specialized` = [producer, launch,
// consumer] registers per thread; the loop is the kernel's outermost op and
// stages inputs only): a producer warpgroup (threads C..C + 127) runs beside
// the body's C = 128 W consumer threads (W consumer warpgroups), and each
// slot also gets a release mbarrier of C / 32 arrivals, one per consumer
// warp (one set for all inputs when they have as many slots, else one per
// input). With d =
// delay_release, C = 128:
//
//   thread 0: mbarrier.init of the full (1 arrival) and release (C / 32) barriers
//   bar.sync 0 (all 256 threads)
//   if tid < 128 (`pallas.consumer`): setmaxnreg.inc consumer
//     for k = lo .. hi: body (a load waits full[slot] parity (i / n) % 2;
//                       an input some step may not read waits at the step's end)
//                       if i >= d: bar.warp.sync, then lane 0 of every warp
//                       arrives on release[(i + n - d) % n]
//                       (at the end of the step, or right after the body's
//                       wgmma_wait(n <= d) that follows its wgmma: before an
//                       epilogue in the step; see `releaseAfter`)
//   else: setmaxnreg.dec producer
//     thread 128: for k = lo .. hi: if i >= n: wait release[i % n] parity (i / n - 1) % 2
//                                   expect-tx + TMA copies of step k into slot i % n
//
// The consumer's own bar.syncs become named barrier 1 over its 128 threads
// (ConvertPallasToGPU), since the producer never reaches them. Worked example,
// n = 3, d = 1: the producer copies steps 0, 1, 2 at once; step 3 (slot 0)
// waits for phase 0 of release[0], which the consumers complete at the end of
// step 1 (releasing step 0, whose wgmma step 1's wgmma_wait(1) retired). The
// sm_80 form (no setmaxnreg, cp.async copies by every thread) launches no
// producer (ConvertPallasToGPU): its C threads run the pipeline above, and
// keep every register of the SM for themselves.
//
// Clusters (a persistent grid in thread-block clusters, KernelSpec::persistent;
// a stage marked `multicast`: the same block in every CTA of the cluster).
// With S = %cluster_nctarank > 1 and R = %cluster_ctarank, a
// warp-specialized pipeline loads each multicast stage once per cluster:
//
//   thread 0: release barriers expect 4 W S arrivals (every CTA's consumer warps)
//   barrier.cluster arrive + wait (every CTA's barriers are initialised before
//                                  a peer's copy or arrival reaches them)
//   producer, step k: wait release[slot] as above (the consumers of all S CTAs
//             are done with it), expect-tx of the whole block on its own full
//             barrier, then copies R, R + S, ... of the block with
//             .multicast::cluster (mask 2^S - 1): each lands at the same
//             offset in every CTA and completes transactions on that CTA's
//             full barrier, whose phase ends when all S shares are in
//   consumer release: after bar.warp.sync, lane r of each warp arrives on
//             release[slot] of CTA r (mapa, then mbarrier.arrive on the
//             shared::cluster address)
//   kernel end: barrier.cluster arrive + wait by every thread, so no CTA
//             exits while a peer may still arrive on its barriers
//
// Worked example, S = 2, a 128 x 256 matmul tile whose B block [256, 64] is
// tiled [128, 64]: rank 0 copies B rows 0-127 and rank 1 rows 128-255 into
// both CTAs, each its own A; a K step reads 16 + 16 KiB from L2 per CTA
// instead of 16 + 32. With S = 1 (a launch without clusters) every branch
// above takes the plain path: local copies and arrivals, bar.sync.
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::pallas::gpu_lowering {
namespace {

/// The ops of `body` that `values` are computed from (in block order), for
/// lowering them again at another step.
FailureOr<SmallVector<Operation*>> indexSlice(BlockOp stage, scf::ForOp loop) {
  Block* body = loop.getBody();
  llvm::SetVector<Operation*> slice;
  SmallVector<Value> work(stage.getIndices().begin(), stage.getIndices().end());
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner() == body && arg != loop.getInductionVar())
        return stage.emitOpError(
            "a pipeline stage's block indices depend on a loop carry; they must be computable "
            "for any step ahead (from the step, program ids and scalars)");
      continue;
    }
    Operation* def = v.getDefiningOp();
    if (def->getBlock() != body || slice.contains(def)) continue;
    if (!isMemoryEffectFree(def) || def->getNumRegions() != 0)
      return stage.emitOpError("a pipeline stage's block indices depend on '")
             << def->getName()
             << "', which has side effects or regions; they must be computable for any step "
                "ahead";
    slice.insert(def);
    work.append(def->getOperands().begin(), def->getOperands().end());
  }
  SmallVector<Operation*> ops = slice.takeVector();
  llvm::sort(ops, [](Operation* a, Operation* b) { return a->isBeforeInBlock(b); });
  return ops;
}

struct Stage {
  BlockOp op;
  StagedBlock st;
  SmallVector<Operation*> slice;  // what its indices are computed from
  // An input stage that some step may not read (see readEveryStep): each
  // step waits for its phase at its end.
  bool waitAtStepEnd = false;
};

/// Whether every step of `loop` reads input stage `stage`: a load or wgmma of
/// it in the loop body's own block, not under a `when` or in an inner loop.
/// Such a read waits for the step's phase of the stage's barrier. A stage
/// read only under a condition (or not at all) may end a step with its copy
/// unawaited: on the GPU still in flight, where the refill of its buffer
/// (expect-tx and copy for step k + n) would arrive on the same barrier and
/// race it into the buffer, and the barrier might be invalidated under it
/// at the pipeline's end. Such a stage waits for each step's phase at the
/// step's end instead (at once where the body did wait).
bool readEveryStep(BlockOp stage, scf::ForOp loop) {
  return llvm::any_of(stage.getResult().getUsers(), [&](Operation* user) {
    return user->getBlock() == loop.getBody() && isa<LoadOp, WgmmaOp>(user);
  });
}

Value indexConst(OpBuilder& b, Location loc, int64_t v) {
  return arith::ConstantIndexOp::create(b, loc, v);
}

/// Step `i`'s slot, (i + offset) mod n, and round, (i + offset) / n (index values), computed in
/// 32 bits. i counts a pipeline's steps from 0; in a persistent program, over all its tiles,
/// so 2^32 steps would be one program running for about an hour (a K step is at least a few
/// hundred cycles), past which slots and phases would go wrong: no kernel comes near it. On index
/// (i64) a division by a slot count that is not a power of two is a 64-bit multiply-high sequence:
/// in splitk_deep's seven stages (thirty-second session) ~17 dependent instructions between the
/// wait for a step's multiply and the arrival that releases its slot, and ~25 at each step's
/// start; in 32 bits, a multiply-high and a shift.
struct SlotAndRound {
  Value slot, round;
};
SlotAndRound slotAndRound(OpBuilder& b, Location loc, Value i, int64_t offset, int64_t n,
                          bool withRound = true) {
  Value i32 = arith::IndexCastUIOp::create(b, loc, b.getI32Type(), i);
  if (offset != 0) i32 = arith::AddIOp::create(b, loc, i32, constI32(b, loc, offset));
  Value n32 = constI32(b, loc, n);
  auto widen = [&](Value v) {
    return arith::IndexCastUIOp::create(b, loc, b.getIndexType(), v).getResult();
  };
  SlotAndRound out{widen(arith::RemUIOp::create(b, loc, i32, n32)), Value()};
  if (withRound) out.round = widen(arith::DivUIOp::create(b, loc, i32, n32));
  return out;
}
/// Step `i`'s slot alone: (i + offset) mod n.
Value slotOf(OpBuilder& b, Location loc, Value i, int64_t offset, int64_t n) {
  return slotAndRound(b, loc, i, offset, n, /*withRound=*/false).slot;
}

/// The TMA coordinates of `stage`'s block at step `step` (lowered index value).
FailureOr<SmallVector<Value>> coordsAt(const Stage& stage, scf::ForOp loop, Value step,
                                       GpuLowering& g, OpBuilder& b) {
  BlockOp op = stage.op;
  FailureOr<SmallVector<Value>> indices =
      g.lowerAgainWith(stage.slice, loop.getInductionVar(), step, op.getIndices(), b);
  if (failed(indices)) return failure();
  // stageCoords reads the mapped indices: map them for the call, then restore.
  SmallVector<std::pair<Value, Value>> saved;
  for (auto [from, to] : llvm::zip(op.getIndices(), *indices)) {
    saved.push_back({from, g.map.lookupOrNull(from)});
    g.map.map(from, to);
  }
  SmallVector<Value> coords = stageCoords(op, g, b);
  for (auto [v, old] : llvm::reverse(saved)) {
    if (old)
      g.map.map(v, old);
    else
      g.map.erase(v);
  }
  return coords;
}

}  // namespace

LogicalResult lowerPipelinedFor(scf::ForOp loop, GpuLowering& g, OpBuilder& b) {
  Location loc = loop.getLoc();
  // The stages: the staged blocks defined in the loop body.
  std::vector<Stage> stages;
  for (BlockOp blk : loop.getBody()->getOps<BlockOp>()) {
    if (!g.stagesBlock(blk)) continue;  // sm_80 stores staged outputs from registers
    FailureOr<SmallVector<Operation*>> slice = indexSlice(blk, loop);
    if (failed(slice)) return failure();
    FailureOr<StagedBlock> st = allocateStage(blk, blk.getBuffers().value_or(1), g, b);
    if (failed(st)) return failure();
    stages.push_back(Stage{blk, *st, std::move(*slice), !st->output && !readEveryStep(blk, loop)});
  }
  if (auto step = getConstantIntValue(loop.getStep()); !step || *step != 1)
    return loop.emitOpError("a pipelined loop steps by 1");
  Value lo = g.map.lookup(loop.getLowerBound()), hi = g.map.lookup(loop.getUpperBound());
  int64_t delay = 0;  // Pallas' delay_release
  if (auto attr = loop->getAttrOfType<IntegerAttr>(kDelayReleaseAttrName)) delay = attr.getInt();
  for (const Stage& s : stages)
    if (!s.st.output && s.st.slots <= delay)
      return BlockOp(s.op).emitOpError("a pipeline stage of ")
             << s.st.slots << " buffers with delay_release " << delay
             << "; it needs more buffers than the delay";
  const bool hasInputs = llvm::any_of(stages, [](const Stage& s) { return !s.st.output; });
  int64_t minOutputSlots = 0;  // 0: no staged outputs
  for (const Stage& s : stages)
    if (s.st.output)
      minOutputSlots = minOutputSlots ? std::min(minOutputSlots, s.st.slots) : s.st.slots;
  auto onThread0 = [&](OpBuilder& at, function_ref<void(OpBuilder&, Location)> body) {
    scf::IfOp::create(at, loc, g.isThread(at, loc, 0), [&](OpBuilder& tb, Location l) {
      body(tb, l);
      scf::YieldOp::create(tb, l);
    });
  };

  // Warp specialization (the file comment): the barriers first, for
  // both warpgroups; then the producer's branch, and `b` moves into the
  // consumer's, where the rest of this function and of the kernel go.
  auto wsAttr = loop->getAttrOfType<DenseI64ArrayAttr>(kWarpSpecializedAttrName);
  // sm_80 (cp.async, no setmaxnreg) launches no producer warpgroup: the
  // consumers run the pipeline themselves, as without warp specialization.
  const bool producer = wsAttr && !g.cpAsync;
  // Release barriers (producer only): one per slot, shared by every staged
  // input when they all have the same number of slots (the consumer arrives
  // once a step, the producer waits once); else one set per input.
  SmallVector<Value> empties;
  const bool sharedRelease =
      llvm::all_of(stages, [&](const Stage& s) { return s.st.slots == stages.front().st.slots; });
  // Multicast stages (BlockOp's `multicast`: the same block in every CTA of
  // the cluster): see "Clusters" in the file comment.
  const bool multicast = producer && llvm::any_of(stages, [](const Stage& s) {
                           return !s.st.output && BlockOp(s.op).getMulticast();
                         });
  Value clusterSize, clusterRank;  // i32
  if (multicast) {
    clusterSize =
        arith::IndexCastUIOp::create(b, loc, b.getI32Type(), g.clusterValue(b, loc, /*size=*/true));
    clusterRank = arith::IndexCastUIOp::create(b, loc, b.getI32Type(),
                                               g.clusterValue(b, loc, /*size=*/false));
    for (Stage& s : stages)
      if (!s.st.output && BlockOp(s.op).getMulticast()) {
        s.st.clusterSize = clusterSize;
        s.st.clusterRank = clusterRank;
      }
    g.clusterSyncAtExit = true;
  }
  // In clusters of several CTAs (multicast only): `inCluster`, else `alone`.
  auto byClusterSize = [&](OpBuilder& at, function_ref<void(OpBuilder&, Location)> inCluster,
                           function_ref<void(OpBuilder&, Location)> alone) {
    Value several = arith::CmpIOp::create(at, loc, arith::CmpIPredicate::ugt, clusterSize,
                                          constI32(at, loc, 1));
    scf::IfOp::create(
        at, loc, several,
        [&](OpBuilder& tb, Location l) {
          inCluster(tb, l);
          scf::YieldOp::create(tb, l);
        },
        [&](OpBuilder& eb, Location l) {
          alone(eb, l);
          scf::YieldOp::create(eb, l);
        });
  };
  if (producer) {
    ArrayRef<int64_t> regs = wsAttr.asArrayRef();  // producer, launch, consumer
    if (!isa<func::FuncOp>(loop->getParentOp()) || minOutputSlots)
      return loop.emitOpError(
          "a warp-specialized pipeline is the kernel's outermost loop and stages inputs only");
    const int64_t consumers = g.strided().getThreads();
    for (const Stage& s : stages)
      if (!sharedRelease || empties.empty())
        empties.push_back(g.sharedBuffer(b, loc, s.st.slots, b.getI64Type(),
                                         SharedLifetime::kKernel, 8,
                                         "stage buffers' release barriers"));
    onThread0(b, [&](OpBuilder& tb, Location l) {
      for (const Stage& s : stages) initStageBarriers(tb, l, g, s.st);
      // One arrival per consumer warp (see `release`); multicast: the
      // consumers of every CTA of the cluster release a slot (each CTA's
      // producer writes it in all of them).
      Value arrivals = constI32(tb, l, consumers / 32);
      if (multicast) arrivals = arith::MulIOp::create(tb, l, arrivals, clusterSize);
      for (auto [empty, s] : llvm::zip_first(empties, stages))
        for (int64_t k = 0; k < s.st.slots; ++k)
          NVVM::MBarrierInitOp::create(tb, l, barrierPointer(tb, l, empty, indexConst(tb, l, k)),
                                       arrivals, Value());
      NVVM::FenceMbarrierInitOp::create(tb, l);
    });
    if (multicast)  // every CTA's barriers are initialised before any copy or arrival reaches them
      g.clusterBarrier(b, loc, clusterSize, /*barSyncAlone=*/true);
    else
      gpu::BarrierOp::create(b, loc);  // every thread of every warpgroup
    Value isConsumer = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, g.tid,
                                             indexConst(b, loc, consumers));
    auto branch = scf::IfOp::create(b, loc, isConsumer, /*withElseRegion=*/true);
    branch->setAttr("pallas.consumer", b.getUnitAttr());
    OpBuilder pb = OpBuilder::atBlockTerminator(branch.elseBlock());
    NVVM::SetMaxRegisterOp::create(pb, loc, static_cast<int32_t>(regs[0]),
                                   NVVM::SetMaxRegisterAction::decrease);
    {
      // The producer's first thread: step k waits until the consumer released
      // its buffer's previous use (step k - n: phase (i / n - 1) of the
      // release barrier), then copies step k into it.
      Value first = arith::CmpIOp::create(pb, loc, arith::CmpIPredicate::eq, g.tid,
                                          indexConst(pb, loc, consumers));
      auto issuer = scf::IfOp::create(pb, loc, first, /*withElseRegion=*/false);
      OpBuilder ib = OpBuilder::atBlockTerminator(issuer.thenBlock());
      auto steps = scf::ForOp::create(ib, loc, lo, hi, indexConst(ib, loc, 1));
      OpBuilder sb = OpBuilder::atBlockTerminator(steps.getBody());
      Value k = steps.getInductionVar();
      Value i = arith::SubIOp::create(sb, loc, k, lo);
      for (auto [index, s] : llvm::enumerate(stages)) {
        Value n = indexConst(sb, loc, s.st.slots);
        auto [slot, round] = slotAndRound(sb, loc, i, 0, s.st.slots);
        Value reused = arith::CmpIOp::create(sb, loc, arith::CmpIPredicate::uge, i, n);
        Value empty = empties[sharedRelease ? 0 : index];
        if (!sharedRelease || index == 0)
          scf::IfOp::create(sb, loc, reused, [&](OpBuilder& wb, Location l) {
            Value parity = arith::IndexCastOp::create(
                wb, l, wb.getI32Type(),
                arith::AndIOp::create(wb, l,
                                      arith::SubIOp::create(wb, l, round, indexConst(wb, l, 1)),
                                      indexConst(wb, l, 1)));
            waitForPhase(wb, l, g, barrierPointer(wb, l, empty, slot), parity);
            scf::YieldOp::create(wb, l);
          });
        FailureOr<SmallVector<Value>> coords = coordsAt(s, loop, k, g, sb);
        if (failed(coords)) return failure();
        emitStageLoad(sb, loc, g, s.st, slot, *coords, Value(), /*issuer=*/true);
      }
    }
    b.setInsertionPoint(branch.thenBlock()->getTerminator());
    NVVM::SetMaxRegisterOp::create(b, loc, static_cast<int32_t>(regs[2]),
                                   NVVM::SetMaxRegisterAction::increase);
  }

  // Prologue: the barriers, then steps lo .. lo + n - 1 of each input in flight.
  if (hasInputs && !producer) {
    onThread0(b, [&](OpBuilder& tb, Location l) {
      for (const Stage& s : stages)
        if (!s.st.output) initStageBarriers(tb, l, g, s.st);
    });
    gpu::BarrierOp::create(b, loc);
  }
  for (const Stage& s : stages) {
    if (s.st.output || producer) continue;
    for (int64_t slot = 0; slot < s.st.slots; ++slot) {
      Value step = arith::AddIOp::create(b, loc, lo, indexConst(b, loc, slot));
      FailureOr<SmallVector<Value>> coords = coordsAt(s, loop, step, g, b);
      if (failed(coords)) return failure();
      Value inRange = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::slt, step, hi);
      emitStageLoad(b, loc, g, s.st, indexConst(b, loc, slot), *coords, inRange);
    }
  }

  // The loop, lowered by the scf.for rule; each step starts by choosing its
  // stage buffers and ends by releasing them.
  auto atStepStart = [&](OpBuilder& nb, Value k) -> LogicalResult {
    Value i = arith::SubIOp::create(nb, loc, k, lo);  // steps since the first
    for (Stage& s : stages) {
      auto [slot, phase] = slotAndRound(nb, loc, i, 0, s.st.slots);
      s.st.slot = slot;
      s.st.parity = arith::IndexCastOp::create(
          nb, loc, nb.getI32Type(), arith::AndIOp::create(nb, loc, phase, indexConst(nb, loc, 1)));
      g.pipelineStages[s.op] = s.st;
    }
    return success();
  };
  // Where the consumers release step k - delay's buffers: at the end of step
  // k, or sooner, right after the body's first top-level wgmma_wait(n) with
  // n <= delay that follows a top-level wgmma. Every step then starts a
  // multiply before that wait, so the n still in flight after it are this
  // step's and the n - 1 before: step k - delay's are done, and no thread
  // reads another step's buffers. In a persistent program this releases
  // step `last - 1` before the tile's epilogue (a `when` after the wait), so
  // the producer copies the next tile's second step during the epilogue.
  // (Not with delay 0: step k's own buffers would be released while the
  // rest of the step may still read them.)
  Operation* releaseAfter = nullptr;
  if (producer && delay >= 1) {
    bool multiplied = false;
    for (Operation& op : loop.getBody()->without_terminator()) {
      multiplied |= isa<WgmmaOp>(op);
      auto wait = dyn_cast<WgmmaWaitOp>(op);
      if (wait && multiplied && wait.getPending() <= delay) {
        releaseAfter = &op;
        break;
      }
    }
  }
  // The consumers' release of step k - delay: each warp meets (bar.warp.sync,
  // which orders its lanes' accesses before what follows), then one lane
  // arrives for the warp (CUTLASS arrives once per warpgroup; one per warp
  // needs no wider meeting): lane 0 on this CTA's barrier, or with
  // multicast in a cluster of S, lane r on CTA r's (mapa; cluster scope).
  auto release = [&](OpBuilder& nb, Value k) -> LogicalResult {
    Value i = arith::SubIOp::create(nb, loc, k, lo);
    Value done =
        arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::uge, i, indexConst(nb, loc, delay));
    scf::IfOp::create(nb, loc, done, [&](OpBuilder& rb, Location l) {
      NVVM::SyncWarpOp::create(rb, l, constI32(rb, l, -1));
      Value lane = arith::IndexCastUIOp::create(
          rb, l, rb.getI32Type(), arith::RemUIOp::create(rb, l, g.tid, indexConst(rb, l, 32)));
      auto when = [&](OpBuilder& at, Location wl, Value cond,
                      function_ref<void(OpBuilder&, Location)> body) {
        scf::IfOp::create(at, wl, cond, [&](OpBuilder& tb, Location tl) {
          body(tb, tl);
          scf::YieldOp::create(tb, tl);
        });
      };
      for (auto [empty, s] : llvm::zip_first(empties, stages)) {
        Value slot = slotOf(rb, l, i, s.st.slots - delay, s.st.slots);
        Value bar = barrierPointer(rb, l, empty, slot);
        auto local = [&](OpBuilder& ab, Location al) {
          Value first =
              arith::CmpIOp::create(ab, al, arith::CmpIPredicate::eq, lane, constI32(ab, al, 0));
          when(ab, al, first, [&](OpBuilder& tb, Location tl) {
            NVVM::MBarrierArriveOp::create(tb, tl, tb.getI64Type(), bar, Value(),
                                           NVVM::MemScopeKindAttr(), BoolAttr());
          });
        };
        if (!multicast) {
          local(rb, l);
          continue;
        }
        byClusterSize(
            rb,
            [&](OpBuilder& cb, Location cl) {
              Value mine =
                  arith::CmpIOp::create(cb, cl, arith::CmpIPredicate::ult, lane, clusterSize);
              when(cb, cl, mine, [&](OpBuilder& tb, Location tl) {
                Value remote = NVVM::MapaOp::create(
                    tb, tl, LLVM::LLVMPointerType::get(tb.getContext(), 7), bar, lane);
                // CTA scope, as CUTLASS's ClusterBarrier::arrive: what it
                // orders is this warp's reads of its own stage buffers, done
                // (wgmma waited for, loads in registers) before the peer's
                // producer issues its copy. (.release.cluster costs a
                // MEMBAR.ALL.GPU before every arrive, on every step.)
                NVVM::MBarrierArriveOp::create(tb, tl, Type(), remote, Value(),
                                               NVVM::MemScopeKindAttr(), BoolAttr());
              });
            },
            local);
      }
      scf::YieldOp::create(rb, l);
    });
    return success();
  };
  if (releaseAfter)
    g.afterLowering[releaseAfter] = [&, iv = loop.getInductionVar()](OpBuilder& nb) {
      return release(nb, g.map.lookup(iv));
    };
  auto atStepEnd = [&](OpBuilder& nb, Value k) -> LogicalResult {
    // Before this step's release (a mid-step release, releaseAfter, frees step
    // k - delay, which waited at its own end): see readEveryStep.
    for (const Stage& s : stages)
      if (s.waitAtStepEnd) waitForStage(nb, loc, g, g.staged.at(BlockOp(s.op).getResult()));
    if (producer) return releaseAfter ? success() : release(nb, k);
    if (minOutputSlots) {
      NVVM::FenceProxyOp::create(
          nb, loc, NVVM::ProxyKindAttr::get(nb.getContext(), NVVM::ProxyKind::async_shared),
          NVVM::SharedSpaceAttr::get(nb.getContext(), NVVM::SharedSpace::shared_cta));
      if (minOutputSlots >= 2)
        onThread0(nb, [&](OpBuilder& tb, Location l) {
          NVVM::CpAsyncBulkWaitGroupOp::create(tb, l, tb.getI32IntegerAttr(minOutputSlots - 2),
                                               tb.getUnitAttr());
        });
    }
    gpu::BarrierOp::create(nb, loc);  // release: every thread is done with the step's buffers
    // Step k releases the input buffers of step k - delay: they are refilled
    // with step k - delay + n.
    SmallVector<std::pair<const Stage*, SmallVector<Value>>> refills;
    for (const Stage& s : stages) {
      if (s.st.output) continue;
      Value next = arith::AddIOp::create(nb, loc, k, indexConst(nb, loc, s.st.slots - delay));
      FailureOr<SmallVector<Value>> coords = coordsAt(s, loop, next, g, nb);
      if (failed(coords)) return failure();
      refills.push_back({&s, *coords});
    }
    if (minOutputSlots)
      onThread0(nb, [&](OpBuilder& tb, Location l) {
        for (const Stage& s : stages) {
          if (!s.st.output) continue;
          const StagedBlock& current = g.staged.at(BlockOp(s.op).getResult());
          issueStageStore(tb, l, current, current.slot, current.coords);
        }
        NVVM::CpAsyncBulkCommitGroupOp::create(tb, l);
        if (minOutputSlots == 1)
          NVVM::CpAsyncBulkWaitGroupOp::create(tb, l, tb.getI32IntegerAttr(0), tb.getUnitAttr());
      });
    for (auto& [s, coords] : refills) {
      Value next = arith::AddIOp::create(nb, loc, k, indexConst(nb, loc, s->st.slots - delay));
      Value inRange = arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::slt, next, hi);
      const StagedBlock& current = g.staged.at(BlockOp(s->op).getResult());
      Value slot = current.slot;
      if (delay > 0) {  // step k - delay's buffer, once there is such a step
        Value i = arith::SubIOp::create(nb, loc, k, lo);
        slot = slotOf(nb, loc, i, s->st.slots - delay, s->st.slots);
        inRange = arith::AndIOp::create(nb, loc, inRange,
                                        arith::CmpIOp::create(nb, loc, arith::CmpIPredicate::uge, i,
                                                              indexConst(nb, loc, delay)));
      }
      emitStageLoad(nb, loc, g, current, slot, coords, inRange);
    }
    if (minOutputSlots == 1) gpu::BarrierOp::create(nb, loc);
    return success();
  };
  const LogicalResult lowered = lowerForWith(loop, g, b, atStepStart, atStepEnd);
  if (releaseAfter) g.afterLowering.erase(releaseAfter);
  if (failed(lowered)) return failure();
  // No wgmma outlives the loop: without this wait on its exit path ptxas
  // waits for every wgmma where the loop may exit, on every step (C7517 at
  // the latch), when no epilogue after the loop waits (a persistent
  // program's epilogue is inside it).
  if (g.wgmma && !loop.getBody()->getOps<WgmmaOp>().empty())
    NVVM::WgmmaWaitGroupSyncOp::create(b, loc, 0);
  for (const Stage& s : stages) g.pipelineStages.erase(s.op);

  // Epilogue: the last stores have read their buffers; the barriers can be
  // reused. (A warp-specialized kernel ends here: its barriers die with it.)
  if ((minOutputSlots || hasInputs) && !producer)
    onThread0(b, [&](OpBuilder& tb, Location l) {
      if (minOutputSlots)
        NVVM::CpAsyncBulkWaitGroupOp::create(tb, l, tb.getI32IntegerAttr(0), tb.getUnitAttr());
      for (const Stage& s : stages)
        if (!s.st.output) invalidateStageBarriers(tb, l, s.st);
    });
  return success();
}

}  // namespace mlir::pallas::gpu_lowering

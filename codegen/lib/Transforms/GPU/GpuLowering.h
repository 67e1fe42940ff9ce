//===- GpuLowering.h - the state and rule registry of convert-pallas-to-gpu -*- C++ -*-===//
//
// convert-pallas-to-gpu walks a kernel's ops in order and lowers each with
// the rule registered for it. A rule reads the layouts `pallas-assign-layouts`
// put on the IR (PallasLayouts.td), emits gpu/nvvm/vector/memref ops for one
// thread of the program, and maps the op's results to their per-thread form
// (a fragment for a `strided` block, the whole flattened value for a
// `replicated` one). Rules live one op family per file:
//
//   LoadStoreRules.cpp         pallas.block/load/store/load_scalar/iota/scratch
//   ElementwiseRules.cpp       elementwise arith/math ops, splats, broadcasts, shape casts
//   ReductionRules.cpp         vector.multi_reduction (whole block, rows, leading axes)
//   ControlFlowRules.cpp       scf.for, scf.while, scf.if (when)
//   SemaphoreRules.cpp         pallas.semaphore_*, pallas.check
//   LayoutConversionRules.cpp  pallas.convert_layout, vector.transpose
//   StagingRules.cpp           blocks staged in shared memory by TMA (called by the
//                              pallas.block/load/store rules for `staged` blocks)
//   PipelineRules.cpp          scf.for marked pallas.pipeline: stage buffers, mbarrier
//                              phases, producer refills (called by the scf.for rule)
//   AsyncCopyRules.cpp         pallas.run_scoped and the explicit copies and barriers
//                              (copy_to_shared/global, barrier_wait/arrive, commits)
//   MatmulRules.cpp            pallas.dot: wgmma on shared-memory descriptors (sm_90a),
//                              mma.sync (sm_80); pallas.wgmma/wgmma_wait; accumulators
//
// Shared memory is one dynamic buffer per kernel (SharedMemoryPlan.h): a rule
// asks for a buffer with `sharedBuffer`, and the plan gives it an offset once
// the whole kernel is lowered.
//
//===----------------------------------------------------------------------===//
#ifndef PALLAS_TRANSFORMS_GPU_GPULOWERING_H
#define PALLAS_TRANSFORMS_GPU_GPULOWERING_H

#include "../BlockIndexing.h"
#include "SharedMemoryPlan.h"
#include "pallas/Dialect/PallasDialect.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/IR/IRMapping.h"

#include <algorithm>
#include <functional>
#include <map>

namespace mlir::pallas::gpu_lowering {

class GpuLowering;

/// Lowers one op; its results must be mapped (`lowering.map`) on success.
using Rule = std::function<LogicalResult(Operation* op, GpuLowering& lowering, OpBuilder& b)>;

/// The rules of the GPU lowering, by op name, plus rules for op families
/// matched by a predicate (the elementwise ops of arith and math).
class RuleRegistry {
 public:
  void add(StringRef opName, Rule rule);
  void addFamily(StringRef description, std::function<bool(Operation*)> matches, Rule rule);
  /// The rule for `op`, or null.
  const Rule* find(Operation* op) const;
  /// Every registered rule, for the error naming a missing one.
  std::string known() const;

 private:
  std::map<std::string, Rule, std::less<>> byName_;
  struct Family {
    std::string description;
    std::function<bool(Operation*)> matches;
    Rule rule;
  };
  std::vector<Family> families_;
};

/// A block staged in shared memory by TMA (`pallas.block {staged}`;
/// StagingRules.cpp). Outside a pipeline it has one stage buffer; a stage of
/// a pipelined loop (PipelineRules.cpp) has `slots` of them, used in turn.
struct StagedBlock {
  BlockOp op;                    // the pallas.block
  Value buffer;                  // 1-D shared memref: `slots` stage buffers of slotElements
  Value barriers;                // inputs: memref<slots x i64>, one mbarrier per stage buffer
  Value descriptor;              // the array's TMA descriptor parameter (!llvm.ptr)
  Value array;                   // the array (its lowered memref), for cp.async and direct copies
  SmallVector<Value> coords;     // the current block's origin, i32, innermost dim first
  SmallVector<int64_t> box;      // block extent per array dim (1 for squeezed dims)
  SmallVector<int64_t> copyBox;  // the box of one TMA copy (at most 256 a dim)
  SmallVector<int64_t> refDims;  // array dim of each ref dim
  int64_t swizzle = 0;           // bytes: 0, 32, 64, 128
  int64_t elementBytes = 0;
  int64_t slots = 1;
  int64_t slotElements = 0;  // elements from one stage buffer to the next (aligned)
  Value slot;                // index: the stage buffer of the current step
  Value parity;              // i32: the phase of its barrier the current step waits for
  bool output = false;
  /// A run_scoped buffer (AsyncCopyRules.cpp): the body's copies and waits
  /// fill it, so its loads do not wait, and its stores go anywhere.
  bool explicitBuffer = false;
  /// A multicast stage of a warp-specialized pipeline (BlockOp's
  /// `multicast`): the cluster's rank and size (i32). With a size above 1
  /// the producer of rank r issues copies r, r + size, ... of the block with
  /// .multicast::cluster to every CTA; null: every copy, to this CTA.
  Value clusterRank, clusterSize;
  int64_t bytes() const;  // of one block (every copy), what its barrier expects
};

/// A Rule from a function taking the op's own class.
template <typename OpT>
Rule ruleFor(LogicalResult (*lower)(OpT, GpuLowering&, OpBuilder&)) {
  return
      [lower](Operation* op, GpuLowering& g, OpBuilder& b) { return lower(cast<OpT>(op), g, b); };
}

void populateLoadStoreRules(RuleRegistry& rules);
void populateElementwiseRules(RuleRegistry& rules);
void populateReductionRules(RuleRegistry& rules);
void populateControlFlowRules(RuleRegistry& rules);
void populateSemaphoreRules(RuleRegistry& rules);
void populateLayoutConversionRules(RuleRegistry& rules);
void populateAsyncCopyRules(RuleRegistry& rules);
void populateMatmulRules(RuleRegistry& rules);
void populateClusterRules(RuleRegistry& rules);

// MatmulRules.cpp: a dot operand that wgmma reads where a pipeline staged it.
/// Whether operand `operandNumber` (0: a, 1: b) of `dot` is a whole-block
/// load of a block staged in shared memory in a layout wgmma reads directly
/// (swizzled, rows of exactly the swizzle's bytes), when dots use wgmma.
bool dotReadsStagedOperand(DotOp dot, unsigned operandNumber, const GpuLowering& g);
/// Whether every use of `load`'s result is such a dot operand: the load
/// rule then only waits for the copy.
bool onlyFeedsStagedDots(LoadOp load, const GpuLowering& g);
/// Accumulators (spec.accumulator): a block over one is a per-thread alloca
/// of its WGMMA-layout fragment; loads and stores move the whole fragment.
LogicalResult lowerAccumulatorBlock(BlockOp blk, GpuLowering& g, OpBuilder& b);
LogicalResult lowerAccumulatorLoad(LoadOp load, GpuLowering& g, OpBuilder& b);
LogicalResult lowerAccumulatorStore(StoreOp store, GpuLowering& g, OpBuilder& b);

// StagingRules.cpp: the staged forms of the pallas.block, load and store rules.
LogicalResult lowerStagedBlock(BlockOp blk, GpuLowering& g, OpBuilder& b);
/// The element index in `st`'s stage buffers (the current slot, swizzle
/// applied) of the block element at (`row`, `col`) of its 2-D ref; the 16-byte
/// piece starting there is contiguous (StagingRules.cpp).
Value stagedElement(OpBuilder& b, Location loc, const StagedBlock& st, Value row, Value col);
LogicalResult lowerStagedLoad(LoadOp load, GpuLowering& g, OpBuilder& b);
LogicalResult lowerStagedStore(StoreOp store, GpuLowering& g, OpBuilder& b);
/// A pallas.block over a run_scoped buffer (AsyncCopyRules.cpp).
LogicalResult lowerBufferBlock(BlockOp blk, GpuLowering& g, OpBuilder& b);
/// When the program ends: TMA stores of the staged output blocks.
void copyOutStagedBlocks(GpuLowering& g, OpBuilder& b);
/// For each register of a thread's `accShape` value in `acc` (an
/// accumulator), the register of its `rowsShape` per-row value in `rows`
/// (wgmmaRow, wgmmaRowKeepdims) that holds the same row (dim 0): how a row
/// reduction folds an accumulator and a broadcast spreads a row value. None
/// when the layouts give some thread different rows, or a row no register
/// holds. Worked example, [64, 64] and [64]: register 4 of thread 37 holds
/// (17, 10), row 17 (17 % 16 < 8): row register 0; register 6, (25, 10): 1.
std::optional<SmallVector<int64_t>> rowRegisterOf(TiledLayoutAttr acc, ArrayRef<int64_t> accShape,
                                                  TiledLayoutAttr rows,
                                                  ArrayRef<int64_t> rowsShape);
/// Waits for the copies of every top-level staged input before the program
/// exits (see the definition).
void waitForStagedInputs(GpuLowering& g, OpBuilder& b);
// The pieces StagingRules and PipelineRules share.
/// The stage buffers (and, for an input, barriers) of `blk`, `slots` of each.
FailureOr<StagedBlock> allocateStage(BlockOp blk, int64_t slots, GpuLowering& g, OpBuilder& b);
/// Thread 0: mbarrier.init of every barrier of `st` (one arrival each for
/// TMA, one per thread for cp.async) and fence.mbarrier_init; the caller
/// puts a barrier after it.
void initStageBarriers(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st);
/// Thread 0: mbarrier.inval of every barrier of `st` (its memory may be
/// initialised again: the pipeline runs again).
void invalidateStageBarriers(OpBuilder& b, Location loc, const StagedBlock& st);
/// Copies the block at `coords` (i32, innermost first) into stage buffer
/// `slot`, completing on the slot's barrier, when `when` (i1) holds: TMA
/// (thread 0: expect-tx and the box copies) or cp.async (every thread: its
/// 16-byte pieces, then cp.async.mbarrier.arrive.noinc). Every thread calls
/// it, except with `issuer`: then only the TMA producer thread does.
void emitStageLoad(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st, Value slot,
                   ValueRange coords, Value when, bool issuer = false);
/// Every thread: waits until the current step's copy of `st` has completed.
void waitForStage(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st);
/// Every thread: waits until the phase of parity `parity` (i32) of mbarrier
/// `bar` has completed (try_wait with TMA, a test_wait loop without).
void waitForPhase(OpBuilder& b, Location loc, GpuLowering& g, Value bar, Value parity);
/// Thread 0: the TMA copies of stage buffer `slot` to the block at `coords`
/// (no commit); with `add`, TMA reductions adding to the array.
void issueStageStore(OpBuilder& b, Location loc, const StagedBlock& st, Value slot,
                     ValueRange coords, bool add = false);
/// The mbarrier `index` of a memref<N x i64> of them, as !llvm.ptr<3>.
Value barrierPointer(OpBuilder& b, Location loc, Value barriers, Value index);
/// The copy of the box at `coords` into `st`'s buffer (slot 0), completing on
/// `bar`: with TMA, thread 0's expect-tx (the one arrival) and copies; with
/// cp.async, every thread's pieces, each holding the phase until it lands.
void issueCopyIn(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st, Value bar,
                 ValueRange coords);
/// Every thread moves its 16-byte pieces of the box at `coords` between the
/// array and `st`'s buffer (slot 0) with ordinary loads and stores, element
/// by element at the array (any alignment and stride): elements outside the
/// array read as zero and are not written; with `add` they are added
/// atomically. No barrier.
void copyByThreads(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st,
                   ValueRange coords, bool toShared, bool add);
/// The TMA coordinates (i32, innermost first) of `blk`'s block origin.
SmallVector<Value> stageCoords(BlockOp blk, GpuLowering& g, OpBuilder& b);

// ControlFlowRules.cpp: the scf.for rule, with code of the caller's at the
// start and the end of each step (given the lowered induction variable).
using StepHook = std::function<LogicalResult(OpBuilder& b, Value step)>;
LogicalResult lowerForWith(scf::ForOp loop, GpuLowering& g, OpBuilder& b, StepHook atStepStart,
                           StepHook atStepEnd);
// PipelineRules.cpp: an scf.for marked pallas.pipeline (called by the scf.for rule).
// A warp-specialized one leaves `b` in its consumer branch: the rest of the
// kernel runs there (an scf.if marked `pallas.consumer`, whose barriers
// become the named barrier kConsumerBarrier of the consumer's threads).
LogicalResult lowerPipelinedFor(scf::ForOp loop, GpuLowering& g, OpBuilder& b);
inline constexpr int64_t kConsumerBarrier = 1;

/// NVVM's address space of shared memory (`!llvm.ptr<3>`).
inline constexpr unsigned kSharedSpace = 3;
/// An i32 constant (barrier counts, TMA coordinates, PTX operands).
inline Value constI32(OpBuilder& b, Location loc, int64_t v) {
  return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
}

/// The lowering of one kernel: a func.func with layouts assigned becomes a
/// gpu.func in `gpuModule`.
class GpuLowering {
 public:
  GpuLowering(func::FuncOp kernel, gpu::GPUModuleOp gpuModule, const RuleRegistry& rules);
  LogicalResult run();

  /// Lowers every op of `block` but its terminator, in order, at `b`.
  LogicalResult lowerBlock(Block& block, OpBuilder& b);
  /// Lowers `ops` (side-effect free, in order) once more at `b` with `from`
  /// standing for `to`, and returns what `values` then map to; the mapping
  /// is restored after. A pipeline computes the next steps' block indices so.
  FailureOr<SmallVector<Value>> lowerAgainWith(ArrayRef<Operation*> ops, Value from, Value to,
                                               ValueRange values, OpBuilder& b);

  // --- Layouts -------------------------------------------------------------
  /// The layout of block value `v` (null for scalars), from `pallas.layouts`.
  Attribute layoutOf(Value v) const;
  bool isReplicated(Value v) const { return isa_and_nonnull<ReplicatedLayoutAttr>(layoutOf(v)); }
  /// The kernel's strided layout (every distributed block value has it).
  WarpgroupStridedLayoutAttr strided() const { return strided_; }
  /// Warpgroups of the kernel's own threads (a warp-specialized producer
  /// not counted): the consumer warpgroups that split an accumulator's rows.
  int64_t warpgroups() const { return std::max<int64_t>(1, strided_.getThreads() / 128); }
  /// The WGMMA accumulator layout over those warpgroups (PallasLayouts.td).
  TiledLayoutAttr accumulatorLayout() const {
    return TiledLayoutAttr::getWgmmaAccumulator(strided_.getContext(), warpgroups());
  }
  /// The per-thread type of a block value of type `block` in `layout`.
  VectorType threadType(VectorType block, Attribute layout) const;

  // --- The strided layout's index arithmetic ---------------------------------
  /// Flat element index where run `r` of this thread starts.
  Value runStart(OpBuilder& b, Location loc, int64_t r);
  /// Builds a fragment of `block` from one vector<vec> per run.
  Value assemble(OpBuilder& b, Location loc, VectorType block,
                 function_ref<Value(int64_t r, SmallVector<Value>& coords)> run);
  /// Stores strided fragment `frag` of `block` into 1-D shared `buffer`, each
  /// run at its row-major position (no barrier).
  void storeRunsToShared(OpBuilder& b, Location loc, Value frag, VectorType block, Value buffer);
  int64_t runs(VectorType block) const {
    return block.getNumElements() / (strided_.getThreads() * strided_.getVec());
  }

  // --- Tiled layouts (PallasLayouts.td) ------------------------------------------
  /// The coordinates of this thread's register 0 of a value of `shape` in
  /// `layout`, from its warp and lane digits; register r's element is this
  /// plus layout.elementAt(shape, 0, 0, r) (coordinates are additive).
  SmallVector<Value> tiledThreadOrigin(OpBuilder& b, Location loc, TiledLayoutAttr layout,
                                       ArrayRef<int64_t> shape);
  /// Calls `each(reg, coords)` for every register of this thread's fragment
  /// of a `shape` value in `layout`, with the element's coordinates.
  void forEachTiledElement(OpBuilder& b, Location loc, TiledLayoutAttr layout,
                           ArrayRef<int64_t> shape,
                           function_ref<void(int64_t reg, SmallVector<Value>& coords)> each);

  // --- Replicated values -------------------------------------------------------
  static VectorType flat(VectorType t) {
    return VectorType::get({t.getNumElements()}, t.getElementType());
  }
  /// The per-thread form of `v` in `layout`: its mapping when it has that
  /// layout; a splat (constant or broadcast scalar) is made again in it.
  /// Fails for anything else: such uses get a pallas.convert_layout.
  FailureOr<Value> operandIn(OpBuilder& b, Location loc, Value v, Attribute layout);

  // --- Shared memory -------------------------------------------------------------
  /// A buffer of `elements` x `et` in the kernel's dynamic shared memory.
  /// kRule buffers are dead once the current rule is done, and the rule must
  /// end with a barrier after its last access to it (so the next user of the
  /// bytes cannot overwrite what a slower thread still reads).
  Value sharedBuffer(OpBuilder& b, Location loc, int64_t elements, Type et,
                     SharedLifetime lifetime = SharedLifetime::kRule, int64_t align = 16,
                     StringRef purpose = "");
  Value sharedBuffer(OpBuilder& b, Location loc, MemRefType type, SharedLifetime lifetime,
                     int64_t align, StringRef purpose);

  // --- Small helpers -------------------------------------------------------------
  Value index(OpBuilder& b, Location loc, int64_t v) {
    return arith::ConstantIndexOp::create(b, loc, v);
  }
  SmallVector<Value> mapped(ValueRange values) const;
  /// i1: this is thread `t`.
  Value isThread(OpBuilder& b, Location loc, int64_t t);

  // --- State rules share -------------------------------------------------------------
  IRMapping map;
  DenseMap<Value, BlockRef> refs;
  DenseMap<Value, StagedBlock> staged;  // by pallas.ref
  SmallVector<Value> stagedOutputs;     // refs, copied out when the program ends
  SmallVector<Value> stagedInputs;      // top-level refs, their copies waited for before exit
  /// The stages of the pipelines being lowered, by pallas.block (their
  /// buffers, and the current step's slot and parity; PipelineRules.cpp).
  DenseMap<Operation*, StagedBlock> pipelineStages;
  /// Run right after an op of the kernel is lowered, at the builder that
  /// lowered it (PipelineRules: a warp-specialized pipeline's release right
  /// after the body's wgmma_wait).
  DenseMap<Operation*, std::function<LogicalResult(OpBuilder&)>> afterLowering;
  DenseMap<Value, Value> tmaDescriptors;  // kernel array argument -> its descriptor parameter
  Value tid;                              // gpu.thread_id x, index
  gpu::GPUFuncOp func;
  func::FuncOp kernel;
  /// The kernel's `pallas.approx_math`: every float input is f16 or bf16, so
  /// transcendentals may be approximate (ElementwiseRules.cpp: relaxFloatSemantics).
  bool approxTranscendentals = false;
  /// Staged inputs are copied with cp.async by every thread (sm_80), not TMA;
  /// staged outputs are stored from registers (convert-pallas-to-gpu's async-copies).
  bool cpAsync = false;
  /// pallas.dot multiplies with wgmma (sm_90a); otherwise with FMAs
  /// (convert-pallas-to-gpu's mma option; MatmulRules.cpp).
  bool wgmma = true;
  /// Accumulators (spec.accumulator), by pallas.scratch and by pallas.block
  /// ref: a per-thread alloca of the fragment, which LLVM keeps in registers.
  DenseMap<Value, Value> accumulators;
  /// With wgmma, per accumulator (keyed as `accumulators`): an i1 alloca,
  /// true while its value is zero but its registers are not: a store of zero
  /// only sets it, the next wgmma ignores the registers (scale-d 0) and a
  /// load reads zeros. No register is written where zero is stored: in a
  /// persistent program's epilogue (inside the K loop) such writes made
  /// ptxas wait for every wgmma at the loop's join, on every step (C7517).
  DenseMap<Value, Value> accumulatorIsZero;
  /// Whether `blk` is staged in this lowering: staged, and not an output
  /// when copies are cp.async (sm_80 has no bulk stores).
  bool stagesBlock(BlockOp blk) const;
  /// Whether the kernel copies with TMA (it has descriptors and is built for
  /// sm_90a): mbarrier waits may use try_wait, fences the async proxy.
  bool usesTma() const { return !cpAsync && !tmaDescriptors.empty(); }
  /// The program's rank in its cluster (`size` false) or the cluster's CTA
  /// count, as index values: %cluster_ctarank / %cluster_nctarank, or 0 / 1
  /// on sm_80, which has no clusters.
  Value clusterValue(OpBuilder& b, Location loc, bool size);
  /// Every thread: barrier.cluster arrive + wait when the cluster has more
  /// than one CTA (`size`, i32 %cluster_nctarank); else bar.sync with
  /// `barSyncAlone`, nothing without.
  void clusterBarrier(OpBuilder& b, Location loc, Value size, bool barSyncAlone);
  /// A warp-specialized pipeline multicasts a stage (PipelineRules.cpp):
  /// every thread meets the cluster's others before the kernel exits (a
  /// peer may still arrive on this CTA's barriers until then).
  bool clusterSyncAtExit = false;
  /// run_scoped buffers and barriers (AsyncCopyRules.cpp), by region argument.
  DenseMap<Value, StagedBlock> copyBuffers;
  struct BarrierArray {
    Value memref;  // memref<count x i64> in shared memory
    Value phases;  // !llvm.ptr to this thread's i32: bit k is the parity barrier k waits for next
    int64_t count = 0, arrivals = 0;
  };
  DenseMap<Value, BarrierArray> barrierArrays;

  // --- Scoped shared memory ----------------------------------------------------
  /// Buffers asked for with SharedLifetime::kScope live from now until the
  /// matching closeScope (a run_scoped region).
  void openScope() { scopes_.push_back({}); }
  void closeScope();
  /// Where function-entry allocas go (per-thread state such as barrier phases).
  OpBuilder entryBuilder();

 private:
  LogicalResult lowerOp(Operation* op, OpBuilder& b);

  gpu::GPUModuleOp gpuModule_;
  const RuleRegistry& rules_;
  WarpgroupStridedLayoutAttr strided_;
  SharedMemoryPlan plan_;
  Value sharedBase_;
  int64_t currentRule_ = 0;
  SmallVector<SmallVector<size_t>> scopes_;  // per open scope: its plan entries
};

}  // namespace mlir::pallas::gpu_lowering

#endif  // PALLAS_TRANSFORMS_GPU_GPULOWERING_H

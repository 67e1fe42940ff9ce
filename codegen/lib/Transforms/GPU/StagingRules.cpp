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
// A TMA box has at most 256 elements a dim: a longer block dim (a multiple
// of 256) is several copies, each writing its box densely after the previous
// one, all completing on the block's barrier. The buffer is then tiled by
// the copy box: element e of the block lives in copy (e / copyBox), at
// (e % copyBox) inside it, row-major both. A block's `tiling` (Pallas'
// TilingTransform) sets the copy box itself: a [64, 128] bf16 block with
// tiling [64, 64] is two copies, element (k, n) in copy n / 64 at
// (k, n % 64). Worked example, a [1, 2048] f32
// block (a chunk of a row): 8 copies of [1, 256], 1024 bytes each; element
// 700 is in copy 2 at 188, i.e. buffer element 2 * 256 + 188 = 700 (a 1-row
// block's tiling is its row-major order).
//
// sm_80 has no TMA: with cp.async copies (GpuLowering::cpAsync) every
// thread copies 16-byte pieces of the block into the same swizzled layout,
// piece p of the box (row-major, 16 bytes each) by thread p % threads, with
// `cp.async.cg.shared.global [dst], [src], 16, n` where n < 16 bytes lie in
// the array (the rest zero-filled, as TMA fills), then
// `cp.async.mbarrier.arrive.noinc` on the block's barrier, which expects one
// such arrival per thread; loads spin on `mbarrier.test_wait.parity`.
// Worked example: a [1, 2048] f32 chunk is 512 pieces, 4 per thread of 128;
// on a row of 2050 elements, chunk 1's piece 0 has 8 bytes in the array
// (elements 2048 and 2049) and n = 8, its other pieces n = 0.
//
// In a pipeline (PipelineRules.cpp) a block has several stage buffers
// (slots) of slotElements each and a barrier per slot; the current step's
// slot and phase parity come from the pipeline, and loads and stores add
// slot * slotElements (a multiple of the swizzle period, so the swizzle of a
// slot is that of the first).
//
//===----------------------------------------------------------------------===//

#include "GpuLowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::pallas::gpu_lowering {
namespace {

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

/// The buffer element (before swizzling) of the block element at block
/// coordinates `coords`: copy-major over the copy boxes, row-major inside one.
Value boxFlat(OpBuilder& b, Location loc, const StagedBlock& st, ValueRange coords) {
  auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
  Value copy = c(0), inner = c(0);
  int64_t copyElements = 1;
  for (auto [x, extent, copyExtent] : llvm::zip(coords, st.box, st.copyBox)) {
    copyElements *= copyExtent;
    Value q = x, r = x;
    if (copyExtent != extent) {
      q = arith::DivUIOp::create(b, loc, x, c(copyExtent));
      r = arith::RemUIOp::create(b, loc, x, c(copyExtent));
    } else {
      q = c(0);
    }
    copy = arith::AddIOp::create(b, loc,
                                 arith::MulIOp::create(b, loc, copy, c(extent / copyExtent)), q);
    inner = arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, inner, c(copyExtent)), r);
  }
  return arith::AddIOp::create(b, loc, arith::MulIOp::create(b, loc, copy, c(copyElements)), inner);
}

/// The barrier of stage buffer `slot` as !llvm.ptr<3>.
Value slotBarrier(OpBuilder& b, Location loc, const StagedBlock& st, Value slot) {
  return barrierPointer(b, loc, st.barriers, slot);
}

/// The shared address of copy `copy` in stage buffer `slot`, as !llvm.ptr<3>.
Value copyAddress(OpBuilder& b, Location loc, const StagedBlock& st, Value slot, int64_t copy) {
  int64_t copyBytes = st.elementBytes;
  for (int64_t e : st.copyBox) copyBytes *= e;
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, st.buffer);
  Value at = arith::AddIOp::create(
      b, loc, base,
      arith::AddIOp::create(b, loc,
                            arith::MulIOp::create(b, loc, slot,
                                                  arith::ConstantIndexOp::create(
                                                      b, loc, st.slotElements * st.elementBytes)),
                            arith::ConstantIndexOp::create(b, loc, copy * copyBytes)));
  Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), at);
  return LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext(), kSharedSpace),
                                  i64);
}

/// Calls `each(copy, offsets)` for every TMA copy of the block: its index
/// and its origin inside the block, per array dim.
void forEachCopy(const StagedBlock& st,
                 function_ref<void(int64_t copy, ArrayRef<int64_t> offsets)> each) {
  int64_t copies = 1;
  for (auto [extent, copyExtent] : llvm::zip(st.box, st.copyBox)) copies *= extent / copyExtent;
  for (int64_t copy = 0; copy < copies; ++copy) {
    SmallVector<int64_t> offsets(st.box.size());
    for (int64_t d = static_cast<int64_t>(st.box.size()) - 1, k = copy; d >= 0; --d) {
      const int64_t n = st.box[d] / st.copyBox[d];
      offsets[d] = (k % n) * st.copyBox[d];
      k /= n;
    }
    each(copy, offsets);
  }
}

/// The TMA coordinates of the copy at `offsets` from the block origin `coords`.
SmallVector<Value> copyCoords(OpBuilder& b, Location loc, ValueRange coords,
                              ArrayRef<int64_t> offsets) {
  SmallVector<Value> out;
  for (auto [k, c] : llvm::enumerate(coords)) {  // innermost first
    const int64_t o = offsets[offsets.size() - 1 - k];
    out.push_back(o == 0 ? c : arith::AddIOp::create(b, loc, c, constI32(b, loc, o)).getResult());
  }
  return out;
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
  if (st.copyBox.back() % vec != 0 || (vec * elementBytes) % 16 != 0)
    return op->emitOpError("a staged block moves runs of ")
           << vec << " elements (" << vec * elementBytes << " bytes) along its last dim of "
           << st.box.back() << " (TMA boxes of " << st.copyBox.back()
           << "); the runs must be whole 16-byte pieces of a box's rows";
  return success();
}

/// The slot's offset in elements (index) into the stage buffers.
Value slotOffset(OpBuilder& b, Location loc, const StagedBlock& st) {
  return arith::MulIOp::create(b, loc, st.slot,
                               arith::ConstantIndexOp::create(b, loc, st.slotElements));
}

/// Whether `blk` is a stage of a pipelined loop (its parent is one).
bool inPipeline(BlockOp blk) {
  auto loop = dyn_cast<scf::ForOp>(blk->getParentOp());
  return loop && loop->hasAttr(kPipelineAttrName);
}

}  // namespace

int64_t StagedBlock::bytes() const {
  int64_t n = elementBytes;
  for (int64_t e : box) n *= e;
  return n;
}

FailureOr<StagedBlock> allocateStage(BlockOp blk, int64_t slots, GpuLowering& g, OpBuilder& b) {
  Location loc = blk.getLoc();
  Type et = cast<MemRefType>(blk.getArray().getType()).getElementType();
  StagedBlock st;
  st.op = blk;
  st.elementBytes = et.getIntOrFloatBitWidth() / 8;
  st.swizzle = blk.getSwizzle().value_or(0);
  st.slots = slots;
  st.output =
      llvm::any_of(blk.getResult().getUsers(), [](Operation* u) { return isa<StoreOp>(u); });
  std::optional<ArrayRef<int64_t>> tiling = blk.getTiling();
  for (auto [d, extent, squeezed] : llvm::enumerate(blk.getBlockShape(), blk.getSqueezed())) {
    st.box.push_back(extent);
    st.copyBox.push_back(tiling ? (*tiling)[d] : std::min<int64_t>(extent, kTmaMaxBoxDim));
    if (extent % st.copyBox.back() != 0)
      return blk.emitOpError("staged block dim of ")
             << extent << " is longer than a TMA box (" << kTmaMaxBoxDim
             << " elements) and not a multiple of it";
    if (!squeezed) st.refDims.push_back(static_cast<int64_t>(st.box.size()) - 1);
  }
  st.descriptor = g.tmaDescriptors.lookup(blk.getArray());
  st.array = g.map.lookup(blk.getArray());
  if (!st.descriptor)
    return blk.emitOpError(
        "a staged block's array must be a kernel argument (it has a TMA "
        "descriptor parameter)");
  // Each copy, and each stage buffer, starts at a multiple of the swizzle
  // pattern's period (TMA's alignment rule for its destination).
  const int64_t align = st.swizzle == 0 ? 128 : st.swizzle * 8;
  int64_t copyBytes = st.elementBytes;
  for (int64_t e : st.copyBox) copyBytes *= e;
  if (copyBytes % align != 0 && copyBytes != st.bytes())
    return blk.emitOpError("a TMA box of ")
           << copyBytes << " bytes; the copies of a block longer than a box must each be a "
           << "multiple of " << align << " bytes (the staged buffer's alignment)";
  const int64_t slotBytes = (st.bytes() + align - 1) / align * align;
  st.slotElements = slotBytes / st.elementBytes;
  std::string purpose =
      (st.output ? "staged output block '" : "staged input block '") +
      (blk->hasAttr("name") ? blk->getAttrOfType<StringAttr>("name").str() : std::string("?")) +
      "'" + (slots > 1 ? " (" + std::to_string(slots) + " stage buffers)" : std::string());
  st.buffer =
      g.sharedBuffer(b, loc, slots * st.slotElements, et, SharedLifetime::kKernel, align, purpose);
  if (!st.output)
    st.barriers = g.sharedBuffer(b, loc, slots, b.getI64Type(), SharedLifetime::kKernel, 8,
                                 purpose + " barriers");
  st.slot = arith::ConstantIndexOp::create(b, loc, 0);
  st.parity = constI32(b, loc, 0);
  return st;
}

Value stagedElement(OpBuilder& b, Location loc, const StagedBlock& st, Value row, Value col) {
  SmallVector<Value> coords(st.box.size(), arith::ConstantIndexOp::create(b, loc, 0));
  coords[st.refDims[0]] = row;
  coords[st.refDims[1]] = col;
  return arith::AddIOp::create(
      b, loc, slotOffset(b, loc, st),
      swizzled(b, loc, boxFlat(b, loc, st, coords), st.elementBytes, st.swizzle));
}

bool GpuLowering::stagesBlock(BlockOp blk) const {
  if (!blk.getStaged()) return false;
  const bool output =
      llvm::any_of(blk.getResult().getUsers(), [](Operation* u) { return isa<StoreOp>(u); });
  return !(cpAsync && output);
}

void initStageBarriers(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st) {
  // TMA: thread 0's expect-tx is the one arrival; cp.async: every thread's.
  const int64_t arrivals = g.cpAsync ? g.strided().getThreads() : 1;
  for (int64_t s = 0; s < st.slots; ++s)
    NVVM::MBarrierInitOp::create(b, loc,
                                 slotBarrier(b, loc, st, arith::ConstantIndexOp::create(b, loc, s)),
                                 constI32(b, loc, arrivals), Value());
  if (g.usesTma()) NVVM::FenceMbarrierInitOp::create(b, loc);  // sm_90's fence.mbarrier_init
}

void invalidateStageBarriers(OpBuilder& b, Location loc, const StagedBlock& st) {
  for (int64_t s = 0; s < st.slots; ++s)
    NVVM::MBarrierInvalOp::create(
        b, loc, slotBarrier(b, loc, st, arith::ConstantIndexOp::create(b, loc, s)));
}

namespace {

/// Thread 0's TMA copies of the block at `coords` into stage buffer `slot`,
/// completing on `bar`.
void issueTmaLoad(OpBuilder& b, Location loc, const StagedBlock& st, Value slot, Value bar,
                  ValueRange coords) {
  // This CTA's barrier expects the whole block, multicast or not: a
  // multicast stage's other copies come from the cluster's other producers.
  NVVM::MBarrierArriveExpectTxOp::create(b, loc, Type(), bar, constI32(b, loc, st.bytes()),
                                         NVVM::MemScopeKindAttr(), b.getBoolAttr(false), Value());
  auto copies = [&](OpBuilder& cb, Location l, Value mask) {
    forEachCopy(st, [&](int64_t copy, ArrayRef<int64_t> offsets) {
      auto issue = [&](OpBuilder& ib, Location il) {
        Value dst =
            LLVM::AddrSpaceCastOp::create(ib, il, LLVM::LLVMPointerType::get(ib.getContext(), 7),
                                          copyAddress(ib, il, st, slot, copy));
        NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp::create(
            ib, il, dst, st.descriptor, copyCoords(ib, il, coords, offsets), bar, ValueRange{},
            mask, Value(), NVVM::TMALoadModeAttr::get(ib.getContext(), NVVM::TMALoadMode::TILE),
            ib.getBoolAttr(false), NVVM::CTAGroupKindAttr(), Value());
      };
      if (!mask) return issue(cb, l);
      // Copy `copy` is rank (copy % size)'s, for every CTA of the cluster.
      Value mine = arith::CmpIOp::create(
          cb, l, arith::CmpIPredicate::eq,
          arith::RemUIOp::create(cb, l, constI32(cb, l, copy), st.clusterSize), st.clusterRank);
      scf::IfOp::create(cb, l, mine, [&](OpBuilder& ib, Location il) {
        issue(ib, il);
        scf::YieldOp::create(ib, il);
      });
    });
  };
  if (!st.clusterSize) return copies(b, loc, Value());
  // A multicast stage: in clusters of several CTAs, this CTA's share of the
  // copies to all of them (mask: ranks 0 .. size - 1); alone, every copy.
  Value clustered =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ugt, st.clusterSize, constI32(b, loc, 1));
  scf::IfOp::create(
      b, loc, clustered,
      [&](OpBuilder& cb, Location l) {
        Value all = arith::SubIOp::create(
            cb, l, arith::ShLIOp::create(cb, l, constI32(cb, l, 1), st.clusterSize),
            constI32(cb, l, 1));
        copies(cb, l, arith::TruncIOp::create(cb, l, cb.getI16Type(), all));
        scf::YieldOp::create(cb, l);
      },
      [&](OpBuilder& cb, Location l) {
        copies(cb, l, Value());
        scf::YieldOp::create(cb, l);
      });
}

/// This thread's cp.async pieces of the block at `coords` (TMA's i32,
/// innermost first) into stage buffer `slot`, then its arrival on `bar` once
/// they have landed: `noinc`, an arrival the barrier's count expects (one
/// per thread); else one that only holds the phase until they land.
void issueCpAsyncLoad(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st, Value slot,
                      Value bar, ValueRange coords, bool noinc) {
  auto c = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v); };
  const int64_t rank = static_cast<int64_t>(st.box.size());
  const int64_t perPiece = 16 / st.elementBytes, pieces = st.bytes() / 16;
  const int64_t threads = g.strided().getThreads();
  Value array = st.array;
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, array);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, array);
  SmallVector<Value> origin;  // per array dim, outermost first
  for (int64_t d = rank - 1; d >= 0; --d)
    origin.push_back(arith::IndexCastOp::create(b, loc, b.getIndexType(), coords[d]));
  Value slotBytes = arith::MulIOp::create(b, loc, slot, c(st.slotElements * st.elementBytes));
  Value smem = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, st.buffer);
  for (int64_t k = 0; k < (pieces + threads - 1) / threads; ++k) {
    Value piece = arith::AddIOp::create(b, loc, g.tid, c(k * threads));
    auto copy = [&](OpBuilder& pb, Location l) {
      auto pc = [&](int64_t v) { return arith::ConstantIndexOp::create(pb, l, v); };
      // The piece's block coordinates (row-major over the box).
      SmallVector<Value> at(rank);
      Value rest = arith::MulIOp::create(pb, l, piece, pc(perPiece));
      for (int64_t d = rank - 1; d >= 0; --d) {
        at[d] = arith::RemUIOp::create(pb, l, rest, pc(st.box[d]));
        rest = arith::DivUIOp::create(pb, l, rest, pc(st.box[d]));
      }
      // Its elements in the array: every outer coordinate inside, and how
      // many of its elements along the last dim (0 to perPiece).
      Value inside = arith::ConstantIntOp::create(pb, l, pb.getI1Type(), 1);
      Value offset = meta.getOffset();
      Value valid;
      for (int64_t d = 0; d < rank; ++d) {
        Value gd = arith::AddIOp::create(pb, l, origin[d], at[d]);
        Value extent = meta.getSizes()[d];
        Value ok;
        if (d == rank - 1) {
          Value left = arith::SubIOp::create(pb, l, extent, gd);
          valid = arith::MaxSIOp::create(pb, l, arith::MinSIOp::create(pb, l, left, pc(perPiece)),
                                         pc(0));
          ok = arith::CmpIOp::create(pb, l, arith::CmpIPredicate::sgt, valid, pc(0));
        } else {
          ok = arith::CmpIOp::create(pb, l, arith::CmpIPredicate::slt, gd, extent);
          inside = arith::AndIOp::create(pb, l, inside, ok);
        }
        // Outside the array the piece reads nothing: its address stays in it.
        Value used = arith::SelectOp::create(pb, l, ok, gd, pc(0));
        offset = arith::AddIOp::create(pb, l, offset,
                                       arith::MulIOp::create(pb, l, used, meta.getStrides()[d]));
      }
      Value inBytes = arith::SelectOp::create(
          pb, l, inside, arith::MulIOp::create(pb, l, valid, pc(st.elementBytes)), pc(0));
      offset = arith::SelectOp::create(pb, l, inside, offset, meta.getOffset());
      Value src = arith::AddIOp::create(pb, l, base,
                                        arith::MulIOp::create(pb, l, offset, pc(st.elementBytes)));
      Value dstElement = swizzled(pb, l, boxFlat(pb, l, st, at), st.elementBytes, st.swizzle);
      Value dst =
          arith::AddIOp::create(pb, l, arith::AddIOp::create(pb, l, smem, slotBytes),
                                arith::MulIOp::create(pb, l, dstElement, pc(st.elementBytes)));
      auto ptr = [&](Value addr, unsigned space) {
        Value i64 = arith::IndexCastOp::create(pb, l, pb.getI64Type(), addr);
        return LLVM::IntToPtrOp::create(pb, l, LLVM::LLVMPointerType::get(pb.getContext(), space),
                                        i64);
      };
      NVVM::CpAsyncOp::create(
          pb, l, ptr(dst, kSharedSpace), ptr(src, 1), pb.getI32IntegerAttr(16),
          NVVM::LoadCacheModifierKindAttr::get(pb.getContext(), NVVM::LoadCacheModifierKind::CG),
          arith::IndexCastOp::create(pb, l, pb.getI32Type(), inBytes));
    };
    if ((k + 1) * threads <= pieces) {
      copy(b, loc);
    } else {  // the last round: threads past the last piece copy nothing
      Value has = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, piece, c(pieces));
      scf::IfOp::create(b, loc, has, [&](OpBuilder& pb, Location l) {
        copy(pb, l);
        scf::YieldOp::create(pb, l);
      });
    }
  }
  NVVM::CpAsyncMBarrierArriveOp::create(b, loc, bar, b.getBoolAttr(noinc));
}

}  // namespace

void emitStageLoad(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st, Value slot,
                   ValueRange coords, Value when, bool issuer) {
  SmallVector<Value> at(coords.begin(), coords.end());
  Value go = when;
  if (!g.cpAsync && !issuer) {  // thread 0 issues the TMA copies
    Value first = g.isThread(b, loc, 0);
    go = when ? arith::AndIOp::create(b, loc, when, first).getResult() : first;
  }
  auto issue = [&](OpBuilder& ib, Location l) {
    Value bar = slotBarrier(ib, l, st, slot);
    if (g.cpAsync)
      issueCpAsyncLoad(ib, l, g, st, slot, bar, at, /*noinc=*/true);
    else
      issueTmaLoad(ib, l, st, slot, bar, at);
  };
  if (!go) return issue(b, loc);
  scf::IfOp::create(b, loc, go, [&](OpBuilder& ib, Location l) {
    issue(ib, l);
    scf::YieldOp::create(ib, l);
  });
}

void waitForStage(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st) {
  waitForPhase(b, loc, g, slotBarrier(b, loc, st, st.slot), st.parity);
}

void waitForPhase(OpBuilder& b, Location loc, GpuLowering& g, Value bar, Value parity) {
  if (g.usesTma()) {  // sm_90: try_wait suspends the thread for a while per attempt
    NVVM::MBarrierTryWaitParityOp::create(b, loc, bar, parity, constI32(b, loc, 1000000));
    return;
  }
  // sm_80: test_wait.parity until the phase has completed.
  scf::WhileOp::create(
      b, loc, TypeRange{}, ValueRange{},
      [&](OpBuilder& wb, Location l, ValueRange) {
        Value done = NVVM::MBarrierTestWaitOp::create(wb, l, wb.getI1Type(), bar, parity);
        Value again = arith::XOrIOp::create(wb, l, done,
                                            arith::ConstantIntOp::create(wb, l, wb.getI1Type(), 1));
        scf::ConditionOp::create(wb, l, again, ValueRange{});
      },
      [&](OpBuilder& wb, Location l, ValueRange) { scf::YieldOp::create(wb, l); });
}

void issueStageStore(OpBuilder& b, Location loc, const StagedBlock& st, Value slot,
                     ValueRange coords, bool add) {
  forEachCopy(st, [&](int64_t copy, ArrayRef<int64_t> offsets) {
    if (add) {
      NVVM::CpAsyncBulkTensorReduceOp::create(
          b, loc, st.descriptor, copyAddress(b, loc, st, slot, copy),
          NVVM::TMAReduxKindAttr::get(b.getContext(), NVVM::TMAReduxKind::ADD),
          NVVM::TMAStoreModeAttr::get(b.getContext(), NVVM::TMAStoreMode::TILE),
          copyCoords(b, loc, coords, offsets), Value());
      return;
    }
    NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp::create(
        b, loc, st.descriptor, copyAddress(b, loc, st, slot, copy),
        copyCoords(b, loc, coords, offsets), Value(),
        NVVM::TMAStoreModeAttr::get(b.getContext(), NVVM::TMAStoreMode::TILE), Value());
  });
}

Value barrierPointer(OpBuilder& b, Location loc, Value barriers, Value index) {
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, barriers);
  Value at = arith::AddIOp::create(
      b, loc, base,
      arith::MulIOp::create(b, loc, index, arith::ConstantIndexOp::create(b, loc, 8)));
  Value i64 = arith::IndexCastOp::create(b, loc, b.getI64Type(), at);
  return LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext(), kSharedSpace),
                                  i64);
}

void issueCopyIn(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st, Value bar,
                 ValueRange coords) {
  Value slot = arith::ConstantIndexOp::create(b, loc, 0);
  if (g.cpAsync) return issueCpAsyncLoad(b, loc, g, st, slot, bar, coords, /*noinc=*/false);
  issueTmaLoad(b, loc, st, slot, bar, coords);
}

void copyByThreads(OpBuilder& b, Location loc, GpuLowering& g, const StagedBlock& st,
                   ValueRange coords, bool toShared, bool add) {
  auto c = [&](OpBuilder& cb, Location l, int64_t v) {
    return arith::ConstantIndexOp::create(cb, l, v);
  };
  const int64_t rank = static_cast<int64_t>(st.box.size());
  const int64_t perPiece = 16 / st.elementBytes, pieces = st.bytes() / 16;
  const int64_t threads = g.strided().getThreads();
  Type et = cast<MemRefType>(st.buffer.getType()).getElementType();
  VectorType pieceType = VectorType::get({perPiece}, et);
  SmallVector<Value> origin;  // per array dim, outermost first
  for (int64_t d = rank - 1; d >= 0; --d)
    origin.push_back(arith::IndexCastOp::create(b, loc, b.getIndexType(), coords[d]));
  SmallVector<Value> extents;
  for (int64_t d = 0; d < rank; ++d) extents.push_back(memref::DimOp::create(b, loc, st.array, d));
  for (int64_t k = 0; k < (pieces + threads - 1) / threads; ++k) {
    Value piece = arith::AddIOp::create(b, loc, g.tid, c(b, loc, k * threads));
    auto copy = [&](OpBuilder& pb, Location l) {
      // The piece's first element in the box (row-major) and in the buffer.
      SmallVector<Value> at(rank);
      Value rest = arith::MulIOp::create(pb, l, piece, c(pb, l, perPiece));
      for (int64_t d = rank - 1; d >= 0; --d) {
        at[d] = arith::RemUIOp::create(pb, l, rest, c(pb, l, st.box[d]));
        rest = arith::DivUIOp::create(pb, l, rest, c(pb, l, st.box[d]));
      }
      Value smem = swizzled(pb, l, boxFlat(pb, l, st, at), st.elementBytes, st.swizzle);
      // Element j of the piece: its array coordinates and whether it is inside.
      auto element = [&](OpBuilder& eb, Location el, int64_t j, SmallVector<Value>& where) {
        Value inside = arith::ConstantIntOp::create(eb, el, eb.getI1Type(), 1);
        for (int64_t d = 0; d < rank; ++d) {
          Value x = arith::AddIOp::create(eb, el, origin[d], at[d]);
          if (d == rank - 1) x = arith::AddIOp::create(eb, el, x, c(eb, el, j));
          Value lo = arith::CmpIOp::create(eb, el, arith::CmpIPredicate::sge, x, c(eb, el, 0));
          Value hi = arith::CmpIOp::create(eb, el, arith::CmpIPredicate::slt, x, extents[d]);
          inside = arith::AndIOp::create(eb, el, inside, arith::AndIOp::create(eb, el, lo, hi));
          where.push_back(x);
        }
        return inside;
      };
      if (toShared) {
        Value run = arith::ConstantOp::create(pb, l, pb.getZeroAttr(pieceType));
        for (int64_t j = 0; j < perPiece; ++j) {
          SmallVector<Value> where;
          Value inside = element(pb, l, j, where);
          Value v =
              scf::IfOp::create(
                  pb, l, inside,
                  [&](OpBuilder& tb, Location tl) {
                    scf::YieldOp::create(
                        tb, tl, memref::LoadOp::create(tb, tl, st.array, where).getResult());
                  },
                  [&](OpBuilder& eb, Location el) {
                    scf::YieldOp::create(
                        eb, el, arith::ConstantOp::create(eb, el, eb.getZeroAttr(et)).getResult());
                  })
                  .getResult(0);
          run = vector::InsertOp::create(pb, l, v, run, ArrayRef<int64_t>{j});
        }
        vector::StoreOp::create(pb, l, run, st.buffer, ValueRange{smem}, /*nontemporal=*/false,
                                llvm::MaybeAlign(16));
        return;
      }
      Value run = vector::LoadOp::create(pb, l, pieceType, st.buffer, ValueRange{smem},
                                         /*nontemporal=*/false, llvm::MaybeAlign(16));
      for (int64_t j = 0; j < perPiece; ++j) {
        SmallVector<Value> where;
        Value inside = element(pb, l, j, where);
        Value v = vector::ExtractOp::create(pb, l, run, ArrayRef<int64_t>{j});
        scf::IfOp::create(pb, l, inside, [&](OpBuilder& tb, Location tl) {
          if (!add) {
            memref::StoreOp::create(tb, tl, v, st.array, where);
          } else {
            auto kind =
                isa<FloatType>(et) ? arith::AtomicRMWKind::addf : arith::AtomicRMWKind::addi;
            memref::AtomicRMWOp::create(tb, tl, kind, v, st.array, where);
          }
          scf::YieldOp::create(tb, tl);
        });
      }
    };
    if ((k + 1) * threads <= pieces) {
      copy(b, loc);
    } else {  // the last round: threads past the last piece copy nothing
      Value has =
          arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, piece, c(b, loc, pieces));
      scf::IfOp::create(b, loc, has, [&](OpBuilder& pb, Location l) {
        copy(pb, l);
        scf::YieldOp::create(pb, l);
      });
    }
  }
}

SmallVector<Value> stageCoords(BlockOp blk, GpuLowering& g, OpBuilder& b) {
  Location loc = blk.getLoc();
  BlockRef origin =
      resolveBlock(b, loc, blk, g.map.lookup(blk.getArray()), g.mapped(blk.getIndices()));
  SmallVector<Value> coords;
  for (Value o : llvm::reverse(origin.origin))
    coords.push_back(arith::IndexCastOp::create(b, loc, b.getI32Type(), o));
  return coords;
}

LogicalResult lowerStagedBlock(BlockOp blk, GpuLowering& g, OpBuilder& b) {
  if (inPipeline(blk)) {  // a stage: buffers, slot and parity from the pipeline
    auto it = g.pipelineStages.find(blk);
    if (it == g.pipelineStages.end())
      return blk.emitOpError("is a stage of a pipeline that was not set up (internal error)");
    StagedBlock st = it->second;
    st.coords = stageCoords(blk, g, b);
    g.staged[blk.getResult()] = st;
    return success();
  }
  if (!isa<func::FuncOp>(blk->getParentOp()))
    return blk.emitOpError(
        "a block staged in shared memory is declared at the top level of the body or of a "
        "pipelined loop (pallas.pipeline), not under another loop or a condition");
  FailureOr<StagedBlock> st = allocateStage(blk, 1, g, b);
  if (failed(st)) return failure();
  st->coords = stageCoords(blk, g, b);
  g.staged[blk.getResult()] = *st;
  if (st->output) {  // copied out when the program ends (copyOutStagedBlocks)
    g.stagedOutputs.push_back(blk.getResult());
    return success();
  }
  g.stagedInputs.push_back(blk.getResult());
  Location loc = blk.getLoc();
  scf::IfOp::create(b, loc, g.isThread(b, loc, 0), [&](OpBuilder& tb, Location l) {
    initStageBarriers(tb, l, g, *st);
    scf::YieldOp::create(tb, l);
  });
  gpu::BarrierOp::create(b, loc);
  emitStageLoad(b, loc, g, *st, st->slot, st->coords, Value());
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
  // A block only wgmma reads stays where it is: wait for its copy, no loads.
  if (onlyFeedsStagedDots(load, g)) {
    if (!st.explicitBuffer) waitForStage(b, load.getLoc(), g, st);
    return success();
  }
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
  // Wait for the copy: the current phase of the slot's barrier (at once once
  // complete). The body waits for a run_scoped buffer's copies itself.
  if (!st.explicitBuffer) waitForStage(b, loc, g, st);
  const int64_t perPiece = 16 / elementBytes;
  VectorType pieceType = VectorType::get({perPiece}, et);
  Value slotStart = slotOffset(b, loc, st);
  Value frag = g.assemble(b, loc, type, [&](int64_t, SmallVector<Value>& rc) -> Value {
    SmallVector<Value> coords = arrayCoords(b, loc, box, load.getOffsets(), ValueRange{},
                                            load.getSizes(), type.getShape(), rc);
    Value flat = boxFlat(b, loc, st, coords);
    Value run = arith::ConstantOp::create(b, loc, b.getZeroAttr(VectorType::get({vec}, et)));
    for (int64_t j = 0; j < vec; j += perPiece) {
      Value at = arith::AddIOp::create(
          b, loc, slotStart,
          swizzled(b, loc,
                   arith::AddIOp::create(b, loc, flat, arith::ConstantIndexOp::create(b, loc, j)),
                   elementBytes, st.swizzle));
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

static LogicalResult lowerBufferStore(StoreOp store, const StagedBlock& st, GpuLowering& g,
                                      OpBuilder& b);
static LogicalResult storeRunsToBox(StoreOp store, const StagedBlock& st, GpuLowering& g,
                                    OpBuilder& b);

LogicalResult lowerStagedStore(StoreOp store, GpuLowering& g, OpBuilder& b) {
  Location loc = store.getLoc();
  const StagedBlock& st = g.staged.at(store.getRef());
  auto type = dyn_cast<VectorType>(store.getValue().getType());
  RefType ref = store.getRef().getType();
  if (st.explicitBuffer) return lowerBufferStore(store, st, g, b);
  // The TMA store writes the whole box, so the body must have written all of
  // it, in every program and step: one whole-block store where the block is.
  if (!type || type.getShape() != ref.getShape() || !store.getDynamicOffsets().empty() ||
      llvm::any_of(store.getOffsets(), [](int64_t o) { return o != 0; }))
    return store.emitOpError(
        "a block staged in shared memory is stored whole (the TMA copy "
        "writes the whole block)");
  if (store->getBlock() != st.op->getBlock())
    return store.emitOpError(
        "a block staged in shared memory is stored at the top level of "
        "the body (or of its pipelined loop), not under a loop or a condition");
  return storeRunsToBox(store, st, g, b);
}

/// A store to a run_scoped buffer: anywhere, of any static slice of whole
/// runs, fenced by barriers as a store to scratch is (any thread may then
/// load what another stored, and no thread still reads what it overwrites).
static LogicalResult lowerBufferStore(StoreOp store, const StagedBlock& st, GpuLowering& g,
                                      OpBuilder& b) {
  auto type = dyn_cast<VectorType>(store.getValue().getType());
  if (!type || !store.getDynamicOffsets().empty())
    return store.emitOpError(
        "a run_scoped buffer is stored a block value at static offsets (whole 16-byte runs)");
  gpu::BarrierOp::create(b, store.getLoc());
  if (failed(storeRunsToBox(store, st, g, b))) return failure();
  gpu::BarrierOp::create(b, store.getLoc());
  return success();
}

static LogicalResult storeRunsToBox(StoreOp store, const StagedBlock& st, GpuLowering& g,
                                    OpBuilder& b) {
  Location loc = store.getLoc();
  auto type = cast<VectorType>(store.getValue().getType());
  FailureOr<Value> frag = g.operandIn(b, loc, store.getValue(), g.strided());
  if (failed(frag)) return store.emitOpError("stores a value that is not in the strided layout");
  Type et = type.getElementType();
  const int64_t elementBytes = et.getIntOrFloatBitWidth() / 8, vec = g.strided().getVec();
  if (failed(checkRuns(store, st, vec, elementBytes))) return failure();
  BlockRef box = boxRef(b, loc, st);
  const int64_t perPiece = 16 / elementBytes;
  Value slotStart = slotOffset(b, loc, st);
  for (int64_t r = 0; r < g.runs(type); ++r) {
    SmallVector<Value> rc = unflatten(b, loc, g.runStart(b, loc, r), type.getShape());
    SmallVector<Value> coords = arrayCoords(b, loc, box, store.getOffsets(), ValueRange{},
                                            type.getShape(), type.getShape(), rc);
    Value flat = boxFlat(b, loc, st, coords);
    for (int64_t j = 0; j < vec; j += perPiece) {
      Value piece =
          vector::ExtractStridedSliceOp::create(b, loc, *frag, ArrayRef<int64_t>{r * vec + j},
                                                ArrayRef<int64_t>{perPiece}, ArrayRef<int64_t>{1});
      Value at = arith::AddIOp::create(
          b, loc, slotStart,
          swizzled(b, loc,
                   arith::AddIOp::create(b, loc, flat, arith::ConstantIndexOp::create(b, loc, j)),
                   elementBytes, st.swizzle));
      vector::StoreOp::create(b, loc, piece, st.buffer, ValueRange{at}, /*nontemporal=*/false,
                              llvm::MaybeAlign(16));
    }
  }
  return success();
}

/// A top-level staged input is copied when the program starts, but a
/// program may end without reading it (attention's causal programs whose
/// rows see no key skip the loop that reads Q). Its copy must not land, nor
/// complete its barrier's transaction, in shared memory that the SM has
/// given to the next program: every thread waits for the phase before
/// exit, which returns at once where the body already waited for it.
void waitForStagedInputs(GpuLowering& g, OpBuilder& b) {
  for (Value ref : g.stagedInputs) {
    const StagedBlock& st = g.staged.at(ref);
    if (!st.explicitBuffer) waitForStage(b, g.kernel.getLoc(), g, st);
  }
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
      issueStageStore(tb, l, st, st.slot, st.coords);
    }
    NVVM::CpAsyncBulkCommitGroupOp::create(tb, l);
    // The buffers must stay until the copies have read them: wait before exit.
    NVVM::CpAsyncBulkWaitGroupOp::create(tb, l, tb.getI32IntegerAttr(0), tb.getUnitAttr());
    scf::YieldOp::create(tb, l);
  });
}

}  // namespace mlir::pallas::gpu_lowering

//===- NVVMToEmulator.cpp - GPU kernels at NVVM level as SIMT host code ---===//
//
// See ConvertNVVMToEmulator in Passes.td. The rewrite happens on the NVVM
// dialect, after the whole GPU pipeline and just before translation to LLVM
// IR, so the emulator runs the code the cubin is made from.
//
//===----------------------------------------------------------------------===//

#include "pallas/Dialect/PallasDialect.h"
#include "pallas/Transforms/Passes.h"

#include "pallas/emulator/abi.h"

#include "llvm/ADT/StringSwitch.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/AttrTypeSubElements.h"
#include "mlir/Interfaces/DataLayoutInterfaces.h"

#include <algorithm>
#include <map>

namespace mlir::pallas {
#define GEN_PASS_DEF_CONVERTNVVMTOEMULATOR
#include "pallas/Transforms/Passes.h.inc"

namespace emu = ::pallas::emulator;

namespace {

constexpr unsigned kSharedAddressSpace = 3;

/// PTX special register names (after "nvvm.read.ptx.sreg.") to runtime codes.
std::optional<int32_t> specialRegister(StringRef name) {
  return llvm::StringSwitch<std::optional<int32_t>>(name)
      .Case("tid.x", emu::kTidX)
      .Case("tid.y", emu::kTidY)
      .Case("tid.z", emu::kTidZ)
      .Case("ntid.x", emu::kNtidX)
      .Case("ntid.y", emu::kNtidY)
      .Case("ntid.z", emu::kNtidZ)
      .Case("ctaid.x", emu::kCtaidX)
      .Case("ctaid.y", emu::kCtaidY)
      .Case("ctaid.z", emu::kCtaidZ)
      .Case("nctaid.x", emu::kNctaidX)
      .Case("nctaid.y", emu::kNctaidY)
      .Case("nctaid.z", emu::kNctaidZ)
      .Case("laneid", emu::kLaneId)
      .Case("warpid", emu::kWarpId)
      .Case("nwarpid", emu::kNwarpId)
      .Case("cluster.ctarank", emu::kClusterCtaRank)
      .Case("cluster.nctarank", emu::kClusterNctaRank)
      .Case("cluster.ctaid.x", emu::kClusterCtaidX)
      .Case("cluster.ctaid.y", emu::kClusterCtaidY)
      .Case("cluster.ctaid.z", emu::kClusterCtaidZ)
      .Case("cluster.nctaid.x", emu::kClusterNctaidX)
      .Case("cluster.nctaid.y", emu::kClusterNctaidY)
      .Case("cluster.nctaid.z", emu::kClusterNctaidZ)
      .Case("clusterid.x", emu::kClusteridX)
      .Case("clusterid.y", emu::kClusteridY)
      .Case("clusterid.z", emu::kClusteridZ)
      .Case("nclusterid.x", emu::kNclusteridX)
      .Case("nclusterid.y", emu::kNclusteridY)
      .Case("nclusterid.z", emu::kNclusteridZ)
      .Default(std::nullopt);
}

class Rewriter {
 public:
  explicit Rewriter(ModuleOp module)
      : module_(module), ctx_(module.getContext()), b_(ctx_), layout_(module) {}

  LogicalResult run() {
    hoistGpuModules();
    if (failed(placeSharedGlobals())) return failure();
    WalkResult result = module_.walk([&](Operation* op) -> WalkResult {
      return succeeded(rewrite(op)) ? WalkResult::advance() : WalkResult::interrupt();
    });
    if (result.wasInterrupted()) return failure();
    for (Operation* op : toErase_) op->erase();
    flattenAddressSpaces();
    return success();
  }

 private:
  Type i32() { return b_.getI32Type(); }
  Type i64() { return b_.getI64Type(); }
  Type ptr() { return LLVM::LLVMPointerType::get(ctx_); }

  /// The runtime function `name`, declared once in the module.
  LLVM::LLVMFuncOp runtime(StringRef name, Type result, ArrayRef<Type> params) {
    if (auto f = module_.lookupSymbol<LLVM::LLVMFuncOp>(name)) return f;
    OpBuilder mb = OpBuilder::atBlockBegin(module_.getBody());
    if (!result) result = LLVM::LLVMVoidType::get(ctx_);
    return LLVM::LLVMFuncOp::create(mb, module_.getLoc(), name,
                                    LLVM::LLVMFunctionType::get(result, params));
  }

  Value call(Location loc, StringRef name, Type result, ValueRange args) {
    SmallVector<Type> params;
    for (Value a : args) params.push_back(a.getType());
    LLVM::LLVMFuncOp f = runtime(name, result, params);
    auto c = LLVM::CallOp::create(b_, loc, f, args);
    return c.getNumResults() ? c.getResult() : Value();
  }

  Value constI32(Location loc, int64_t v) {
    return LLVM::ConstantOp::create(b_, loc, i32(), b_.getI32IntegerAttr(static_cast<int32_t>(v)));
  }

  /// Moves every gpu.module's contents to the top level; kernels get the
  /// `pallas_emu_thread_` prefix and lose their GPU attributes.
  void hoistGpuModules() {
    SmallVector<gpu::GPUModuleOp> gpuModules(module_.getOps<gpu::GPUModuleOp>());
    for (gpu::GPUModuleOp gm : gpuModules) {
      for (Operation& op : llvm::make_early_inc_range(gm.getBody()->getOperations())) {
        if (auto f = dyn_cast<LLVM::LLVMFuncOp>(op); f && f->hasAttr("nvvm.kernel")) {
          for (StringRef attr : {"nvvm.kernel", "gpu.kernel", "nvvm.maxntid", "nvvm.reqntid",
                                 "gpu.known_block_size", "nvvm.minctasm", "nvvm.maxnreg"})
            f->removeAttr(attr);
          f.setSymName(("pallas_emu_thread_" + f.getSymName()).str());
        }
        op.moveBefore(gm);
      }
      gm.erase();
    }
    module_->removeAttr(gpu::GPUDialect::getContainerModuleAttrName());
  }

  /// Lays out, per kernel, the shared-memory globals it uses in one per-CTA
  /// buffer, in order of first use, each at its alignment (dynamic shared
  /// memory, of size 0, last), and exports the kernel's total as
  /// `pallas_emu_kernel_<kernel>_shared_bytes`.
  LogicalResult placeSharedGlobals() {
    llvm::StringMap<LLVM::GlobalOp> shared;
    for (auto g : module_.getOps<LLVM::GlobalOp>())
      if (g.getAddrSpace() == kSharedAddressSpace) {
        shared[g.getSymName()] = g;
        toErase_.push_back(g);
      }
    for (auto f : module_.getOps<LLVM::LLVMFuncOp>()) {
      SmallVector<LLVM::GlobalOp> used;
      f.walk([&](LLVM::AddressOfOp a) {
        auto it = shared.find(a.getGlobalName());
        if (it != shared.end() && !llvm::is_contained(used, it->second)) used.push_back(it->second);
      });
      StringRef name = f.getSymName();
      bool kernel = name.consume_front("pallas_emu_thread_");
      if (!used.empty() && !kernel)
        return f.emitOpError(
            "uses shared memory outside a kernel; the emulator lays shared "
            "memory out per kernel");
      std::stable_partition(used.begin(), used.end(), [&](LLVM::GlobalOp g) {
        return layout_.getTypeSize(g.getGlobalType()) > 0;
      });
      int64_t offset = 0;
      for (LLVM::GlobalOp g : used) {
        // Exactly the declared alignment, never by luck more: a buffer
        // declared 4-aligned but accessed with 16-byte vectors then fails the
        // alignment check, as it can on the GPU.
        auto align = static_cast<int64_t>(
            g.getAlignment().value_or(layout_.getTypeABIAlignment(g.getGlobalType())));
        offset = (offset + align - 1) / align * align;
        if (align < 16 && offset % (2 * align) == 0) offset += align;
        sharedOffsets_[{f, g.getSymName()}] = offset;
        offset += static_cast<int64_t>(layout_.getTypeSize(g.getGlobalType()));
      }
      if (!kernel) continue;
      OpBuilder mb = OpBuilder::atBlockEnd(module_.getBody());
      LLVM::GlobalOp::create(
          mb, module_.getLoc(), i64(), /*isConstant=*/true, LLVM::Linkage::External,
          ("pallas_emu_kernel_" + name + "_shared_bytes").str(), b_.getI64IntegerAttr(offset));
    }
    return success();
  }

  LogicalResult rewrite(Operation* op) {
    Location loc = op->getLoc();
    b_.setInsertionPoint(op);
    StringRef name = op->getName().getStringRef();
    if (auto addr = dyn_cast<LLVM::AddressOfOp>(op)) {
      auto it =
          sharedOffsets_.find({addr->getParentOfType<LLVM::LLVMFuncOp>(), addr.getGlobalName()});
      if (it == sharedOffsets_.end()) return success();
      Value base = call(loc, "pallas_emu_shared_base", ptr(), {});
      Value at = LLVM::GEPOp::create(b_, loc, ptr(), b_.getI8Type(), base,
                                     ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(it->second)});
      replace(op, at);
      return success();
    }
    if (auto cast = dyn_cast<LLVM::AddrSpaceCastOp>(op)) {
      replace(op, cast.getArg());
      return success();
    }
    if (name.consume_front("nvvm.read.ptx.sreg.")) {
      std::optional<int32_t> which = specialRegister(name);
      if (!which) return op->emitOpError("no emulator rule for this special register");
      Value v = call(loc, "pallas_emu_sreg", i32(), {constI32(loc, *which)});
      Type t = op->getResult(0).getType();
      if (t != i32()) v = LLVM::ZExtOp::create(b_, loc, t, v);
      replace(op, v);
      return success();
    }
    if (isa<NVVM::Barrier0Op>(op)) {
      call(loc, "pallas_emu_barrier", Type(), {constI32(loc, 0), constI32(loc, 0)});
      replace(op, {});
      return success();
    }
    if (auto bar = dyn_cast<NVVM::BarrierOp>(op)) {
      if (bar.getReductionOp())
        return op->emitOpError("no emulator rule for barrier reductions yet");
      Value id = bar.getBarrierId() ? bar.getBarrierId() : constI32(loc, 0);
      Value count = bar.getNumberOfThreads() ? bar.getNumberOfThreads() : constI32(loc, 0);
      call(loc, "pallas_emu_barrier", Type(), {id, count});
      replace(op, {});
      return success();
    }
    if (auto shfl = dyn_cast<NVVM::ShflOp>(op)) return rewriteShuffle(shfl);
    if (auto ld = dyn_cast<NVVM::LdMatrixOp>(op)) return rewriteLdmatrix(ld);
    if (auto fence = dyn_cast<LLVM::InlineAsmOp>(op);
        fence && (fence.getAsmString() == kFenceOperandsAsm ||
                  fence.getAsmString().starts_with(kCopyOperandsAsm))) {
      // Accumulator registers (f32) hold the runtime's tokens for wgmma results: the copy
      // (an accumulator's load) reads them, checked against the wgmma groups waited for;
      // the in-place fence around a multiply resolves them unchecked (emulator/src/wgmma.cc,
      // "Accumulator tokens"). A's words (i32) pass through.
      Type structType = fence.getResult(0).getType();
      const auto count = static_cast<int64_t>(fence.getOperands().size());
      if (count > 0 && fence.getOperands()[0].getType().isF32()) {
        Value registers = storeOnStack(op, b_.getF32Type(), fence.getOperands());
        const bool copy = fence.getAsmString().starts_with(kCopyOperandsAsm);
        call(loc, "pallas_emu_wgmma_read", Type(),
             {registers, constI32(loc, static_cast<int32_t>(count)), constI32(loc, copy ? 1 : 0)});
        replace(op, structFromStack(loc, registers, structType, b_.getF32Type(), count));
        return success();
      }
      Value s = LLVM::UndefOp::create(b_, loc, structType);
      for (auto [i, v] : llvm::enumerate(fence.getOperands()))
        s = LLVM::InsertValueOp::create(b_, loc, s, v, ArrayRef<int64_t>{static_cast<int64_t>(i)});
      replace(op, s);
      return success();
    }
    if (auto rs = dyn_cast<LLVM::InlineAsmOp>(op); rs && rs->hasAttr(kWgmmaRegisterAAttrName))
      return rewriteWgmmaRegisterA(rs);
    if (auto pinned = dyn_cast<LLVM::InlineAsmOp>(op);
        pinned && pinned->hasAttr(kPinnedWaitAttrName)) {
      auto pending = dyn_cast<IntegerAttr>(pinned->getAttr(kPinnedWaitAttrName));
      if (!pending)
        return op->emitOpError("a pinned wgmma wait: malformed ") << kPinnedWaitAttrName;
      call(loc, "pallas_emu_wgmma_wait", Type(),
           {constI32(loc, static_cast<int32_t>(pending.getInt()))});
      replace(op, {});
      return success();
    }
    if (auto mma = dyn_cast<NVVM::MmaOp>(op)) return rewriteMmaSync(mma);
    if (auto sync = dyn_cast<NVVM::SyncWarpOp>(op)) {  // bar.warp.sync: the lanes meet
      call(loc, "pallas_emu_vote", i32(),
           {constI32(loc, emu::kVoteAll), sync.getMask(), constI32(loc, 1)});
      replace(op, {});
      return success();
    }
    if (auto vote = dyn_cast<NVVM::VoteSyncOp>(op)) {
      Value pred = LLVM::ZExtOp::create(b_, loc, i32(), vote.getPred());
      Value r = call(loc, "pallas_emu_vote", i32(),
                     {constI32(loc, static_cast<int32_t>(vote.getKind())), vote.getMask(), pred});
      if (vote.getType() != i32()) r = LLVM::TruncOp::create(b_, loc, vote.getType(), r);
      replace(op, r);
      return success();
    }
    if (auto match = dyn_cast<NVVM::MatchSyncOp>(op)) {
      Value value = match.getVal();
      if (value.getType() != i64()) value = LLVM::ZExtOp::create(b_, loc, i64(), value);
      Value r = call(
          loc, "pallas_emu_match", i64(),
          {constI32(loc, static_cast<int32_t>(match.getKind())), match.getThreadMask(), value});
      Value mask = LLVM::TruncOp::create(b_, loc, i32(), r);
      if (!isa<LLVM::LLVMStructType>(match.getType())) {
        replace(op, mask);
        return success();
      }
      Value shift = LLVM::ConstantOp::create(b_, loc, i64(), b_.getI64IntegerAttr(32));
      Value all =
          LLVM::TruncOp::create(b_, loc, b_.getI1Type(), LLVM::LShrOp::create(b_, loc, r, shift));
      Value s = LLVM::PoisonOp::create(b_, loc, match.getType());
      s = LLVM::InsertValueOp::create(b_, loc, s, mask, ArrayRef<int64_t>{0});
      s = LLVM::InsertValueOp::create(b_, loc, s, all, ArrayRef<int64_t>{1});
      replace(op, s);
      return success();
    }
    if (auto redux = dyn_cast<NVVM::ReduxOp>(op)) {
      if (!redux.getVal().getType().isInteger(32))
        return op->emitOpError("no emulator rule for floating-point redux.sync yet");
      Value r = call(loc, "pallas_emu_redux", i32(),
                     {constI32(loc, static_cast<int32_t>(redux.getKind())), redux.getMaskAndClamp(),
                      redux.getVal()});
      replace(op, r);
      return success();
    }
    if (isa<NVVM::NanosleepOp>(op)) {  // a spin-wait point: let the other threads run
      call(loc, "pallas_emu_yield", Type(), {});
      replace(op, {});
      return success();
    }
    if (succeeded(rewriteAsync(op))) return success();
    if (auto regs = dyn_cast<NVVM::SetMaxRegisterOp>(op)) {
      call(loc, "pallas_emu_setmaxnreg", Type(), {constI32(loc, regs.getRegCount())});
      replace(op, {});
      return success();
    }
    // A thread's stores reach the async proxy (TMA stores, wgmma) through
    // fence.proxy.async, which the runtime tracks (check_proxy_fenced).
    if (auto fence = dyn_cast<NVVM::FenceProxyOp>(op);
        fence && (fence.getKind() == NVVM::ProxyKind::async_shared ||
                  fence.getKind() == NVVM::ProxyKind::async)) {
      call(loc, "pallas_emu_fence_proxy_async", Type(), {});
      replace(op, {});
      return success();
    }
    // A prefetch (a cache line, or a TMA descriptor into the tensormap cache) is a hint:
    // nothing to emulate.
    if (isa<NVVM::PrefetchOp>(op)) {
      replace(op, {});
      return success();
    }
    // Other fences order memory for other threads; the emulator is
    // sequentially consistent.
    if (isa<NVVM::MembarOp, NVVM::FenceScClusterOp, NVVM::FenceProxyOp>(op) ||
        op->getName().getStringRef().starts_with("nvvm.fence.")) {
      replace(op, {});
      return success();
    }
    // The thread's own stack (an alloca: barrier phase bits) is private: nothing to check.
    if (auto load = dyn_cast<LLVM::LoadOp>(op);
        load && load.getAddr().getDefiningOp<LLVM::AllocaOp>())
      return success();
    if (auto store = dyn_cast<LLVM::StoreOp>(op);
        store && store.getAddr().getDefiningOp<LLVM::AllocaOp>()) {
      // A block value stored into an accumulator's registers: no wgmma writing them may
      // still be in flight (emulator/src/wgmma.cc, "Accumulator tokens").
      if (store->hasAttr(kAccumulatorStoreAttrName))
        if (auto type = dyn_cast<VectorType>(store.getValue().getType());
            type && type.getElementType().isF32()) {
          // The accumulator's registers start zero here, not as stale stack bytes, which a
          // fiber stack reused from an earlier program may have left holding tokens that
          // look like this thread's own.
          auto alloca = store.getAddr().getDefiningOp<LLVM::AllocaOp>();
          if (zeroedAccumulators_.insert(alloca.getOperation()).second) {
            OpBuilder zb(alloca->getContext());
            zb.setInsertionPointAfter(alloca);
            LLVM::StoreOp::create(
                zb, alloca.getLoc(),
                LLVM::ConstantOp::create(zb, alloca.getLoc(), type, zb.getZeroAttr(type)), alloca);
          }
          call(loc, "pallas_emu_wgmma_overwrite", Type(),
               {store.getAddr(), constI32(loc, type.getNumElements())});
        }
      return success();
    }
    if (auto load = dyn_cast<LLVM::LoadOp>(op)) {
      // An atomic load (a semaphore or flag read) may sit in a spin loop:
      // yield first, so the threads it waits for get to run.
      if (load.getOrdering() != LLVM::AtomicOrdering::not_atomic)
        call(loc, "pallas_emu_yield", Type(), {});
      return check(loc, load.getAddr(), load.getType(), emu::kAccessLoad, load.getAlignment());
    }
    if (auto store = dyn_cast<LLVM::StoreOp>(op))
      return check(loc, store.getAddr(), store.getValue().getType(), emu::kAccessStore,
                   store.getAlignment());
    if (auto rmw = dyn_cast<LLVM::AtomicRMWOp>(op)) {
      // Semaphore polls are RMWs too: yield, but as progress (an RMW may change
      // memory; a reduction through atomics is a long run of them).
      call(loc, "pallas_emu_yield_rmw", Type(), {});
      return check(loc, rmw.getPtr(), rmw.getVal().getType(),
                   emu::kAccessStore | emu::kAccessAtomic);
    }
    if (auto cas = dyn_cast<LLVM::AtomicCmpXchgOp>(op)) {
      call(loc, "pallas_emu_yield", Type(), {});  // a lock's retry loop is a spin loop too
      return check(loc, cas.getPtr(), cas.getVal().getType(),
                   emu::kAccessStore | emu::kAccessAtomic);
    }
    if (auto intrinsic = dyn_cast<LLVM::CallIntrinsicOp>(op);
        intrinsic && intrinsic.getIntrin().starts_with("llvm.nvvm.")) {
      StringRef emulated = llvm::StringSwitch<StringRef>(intrinsic.getIntrin())
                               .Case("llvm.nvvm.ex2.approx.ftz.f32", "pallas_emu_ex2_approx_ftz")
                               .Case("llvm.nvvm.lg2.approx.ftz.f", "pallas_emu_lg2_approx_ftz")
                               .Case("llvm.nvvm.rcp.approx.ftz.f", "pallas_emu_rcp_approx_ftz")
                               .Default("");
      if (emulated.empty())
        return op->emitOpError("no emulator rule for ") << intrinsic.getIntrin();
      replace(op, call(loc, emulated, intrinsic.getResult(0).getType(), intrinsic.getArgs()));
      return success();
    }
    if (isa<LLVM::InlineAsmOp>(op)) return op->emitOpError("inline PTX has no emulator rule");
    if (isa<NVVM::NVVMDialect>(op->getDialect()))
      return op->emitOpError("no emulator rule for this NVVM operation");
    return success();
  }

  /// mbarriers, TMA copies and bulk groups -> the runtime's (emulator/src/tma.cc).
  /// Fails (without a diagnostic) for any other op.
  LogicalResult rewriteAsync(Operation* op) {
    Location loc = op->getLoc();
    // TMA coordinates: `rank` of them, padded to five.
    auto coords = [&](ValueRange given) {
      SmallVector<Value> out{constI32(loc, static_cast<int64_t>(given.size()))};
      out.append(given.begin(), given.end());
      while (out.size() < 6) out.push_back(constI32(loc, 0));
      return out;
    };
    if (auto init = dyn_cast<NVVM::MBarrierInitOp>(op)) {
      call(loc, "pallas_emu_mbarrier_init", Type(), {init.getAddr(), init.getCount()});
    } else if (auto inval = dyn_cast<NVVM::MBarrierInvalOp>(op)) {
      call(loc, "pallas_emu_mbarrier_inval", Type(), {inval.getAddr()});
    } else if (auto arrive = dyn_cast<NVVM::MBarrierArriveExpectTxOp>(op)) {
      if (arrive.getPredicate() || arrive.getNumResults())
        return op->emitOpError("no emulator rule for a predicated or valued expect-tx");
      call(loc, "pallas_emu_mbarrier_arrive_expect_tx", Type(),
           {arrive.getAddr(), arrive.getTxcount()});
    } else if (auto wait = dyn_cast<NVVM::MBarrierTryWaitParityOp>(op)) {
      call(loc, "pallas_emu_mbarrier_wait_parity", Type(), {wait.getAddr(), wait.getPhase()});
    } else if (auto load = dyn_cast<NVVM::CpAsyncBulkTensorGlobalToSharedClusterOp>(op)) {
      if (!load.getIm2colOffsets().empty() || load.getPredicate())
        return op->emitOpError("no emulator rule for im2col or predicated TMA loads");
      SmallVector<Value> args{load.getDstMem(), load.getTmaDescriptor(), load.getMbar()};
      if (Value mask = load.getMulticastMask()) {
        args.push_back(LLVM::ZExtOp::create(b_, loc, i32(), mask));
        args.append(coords(load.getCoordinates()));
        call(loc, "pallas_emu_tma_load_multicast", Type(), args);
      } else {
        args.append(coords(load.getCoordinates()));
        call(loc, "pallas_emu_tma_load", Type(), args);
      }
    } else if (auto store = dyn_cast<NVVM::CpAsyncBulkTensorSharedCTAToGlobalOp>(op)) {
      if (store.getPredicate())
        return op->emitOpError("no emulator rule for predicated TMA stores");
      SmallVector<Value> args{store.getTmaDescriptor(), store.getSrcMem()};
      args.append(coords(store.getCoordinates()));
      call(loc, "pallas_emu_tma_store", Type(), args);
    } else if (auto copy = dyn_cast<NVVM::CpAsyncOp>(op)) {  // sm_80's 4/8/16-byte copies
      Value srcSize = copy.getCpSize() ? copy.getCpSize() : constI32(loc, copy.getSize());
      call(loc, "pallas_emu_cp_async", Type(),
           {copy.getDst(), copy.getSrc(), constI32(loc, copy.getSize()), srcSize});
    } else if (auto arrive = dyn_cast<NVVM::CpAsyncMBarrierArriveOp>(op)) {
      call(loc,
           arrive.getNoinc() ? "pallas_emu_cp_async_mbarrier_arrive_noinc"
                             : "pallas_emu_cp_async_mbarrier_arrive",
           Type(), {arrive.getAddr()});
    } else if (auto arrive = dyn_cast<NVVM::MBarrierArriveOp>(op)) {
      if (arrive.getCount() || arrive.getRelaxed())
        return op->emitOpError("no emulator rule for a counted or relaxed arrive");
      Value state = call(loc, "pallas_emu_mbarrier_arrive", i64(), {arrive.getAddr()});
      replace(op, arrive.getRes() ? state : Value());
      return success();
    } else if (auto reduce = dyn_cast<NVVM::CpAsyncBulkTensorReduceOp>(op)) {
      if (reduce.getRedKind() != NVVM::TMAReduxKind::ADD ||
          reduce.getMode() != NVVM::TMAStoreMode::TILE)
        return op->emitOpError("no emulator rule for TMA reductions other than a tiled add");
      SmallVector<Value> args{reduce.getTmaDescriptor(), reduce.getSrcMem()};
      args.append(coords(reduce.getCoordinates()));
      call(loc, "pallas_emu_tma_reduce_add", Type(), args);
    } else if (auto prefetch = dyn_cast<NVVM::CpAsyncBulkTensorPrefetchOp>(op)) {
      SmallVector<Value> args{prefetch.getTmaDescriptor()};
      args.append(coords(prefetch.getCoordinates()));
      call(loc, "pallas_emu_tma_prefetch", Type(), args);
    } else if (auto test = dyn_cast<NVVM::MBarrierTestWaitOp>(op)) {
      if (!test.getStateOrPhase().getType().isInteger(32))
        return op->emitOpError("no emulator rule for mbarrier.test.wait on a state");
      Value done = call(loc, "pallas_emu_mbarrier_test_parity", i32(),
                        {test.getAddr(), test.getStateOrPhase()});
      replace(op, {LLVM::TruncOp::create(b_, loc, b_.getI1Type(), done)});
      return success();
    } else if (auto mma = dyn_cast<NVVM::WgmmaMmaAsyncOp>(op)) {
      return rewriteWgmma(mma);
    } else if (isa<NVVM::WgmmaFenceAlignedOp>(op)) {
      call(loc, "pallas_emu_wgmma_fence", Type(), {});
    } else if (isa<NVVM::WgmmaGroupSyncAlignedOp>(op)) {
      call(loc, "pallas_emu_wgmma_commit", Type(), {});
    } else if (auto wait = dyn_cast<NVVM::WgmmaWaitGroupSyncOp>(op)) {
      call(loc, "pallas_emu_wgmma_wait", Type(), {constI32(loc, wait.getGroup())});
    } else if (isa<NVVM::ClusterArriveOp, NVVM::ClusterArriveRelaxedOp>(op)) {
      call(loc, "pallas_emu_cluster_arrive", Type(), {});
    } else if (isa<NVVM::ClusterWaitOp>(op)) {
      call(loc, "pallas_emu_cluster_wait", Type(), {});
    } else if (auto mapa = dyn_cast<NVVM::MapaOp>(op)) {
      replace(op, call(loc, "pallas_emu_mapa", ptr(), {mapa.getA(), mapa.getB()}));
      return success();
    } else if (isa<NVVM::CpAsyncBulkCommitGroupOp>(op)) {
      call(loc, "pallas_emu_bulk_commit", Type(), {});
    } else if (auto wait = dyn_cast<NVVM::CpAsyncBulkWaitGroupOp>(op)) {
      call(loc, "pallas_emu_bulk_wait", Type(),
           {constI32(loc, wait.getGroup()), constI32(loc, wait.getRead() ? 1 : 0)});
    } else {
      return failure();
    }
    replace(op, {});
    return success();
  }

  /// wgmma.mma_async -> pallas_emu_wgmma(acc, n, descA, descB, type, transA,
  /// transB, scaleD): the thread's accumulator registers go through a stack
  /// array the runtime reads and updates (emulator/src/wgmma.cc).
  LogicalResult rewriteWgmma(NVVM::WgmmaMmaAsyncOp mma) {
    Location loc = mma.getLoc();
    auto type = cast<LLVM::LLVMStructType>(mma.getInouts().getType());
    const int64_t count = type.getBody().size();
    if (mma.getTypeD() != NVVM::WGMMATypes::f32 || mma.getShape().getK() != 16 ||
        mma.getShape().getM() != 64 || mma.getTypeA() != mma.getTypeB() ||
        (mma.getTypeA() != NVVM::WGMMATypes::f16 && mma.getTypeA() != NVVM::WGMMATypes::bf16) ||
        mma.getScaleA() != NVVM::WGMMAScaleIn::one || mma.getScaleB() != NVVM::WGMMAScaleIn::one)
      return mma.emitOpError("no emulator rule for wgmma other than m64nNk16 f16/bf16 -> f32");
    SmallVector<Value> registers;
    for (int64_t i = 0; i < count; ++i)
      registers.push_back(
          LLVM::ExtractValueOp::create(b_, loc, mma.getInouts(), ArrayRef<int64_t>{i}));
    Value acc = storeOnStack(mma, b_.getF32Type(), registers);
    call(loc, "pallas_emu_wgmma", Type(),
         {acc, constI32(loc, mma.getShape().getN()), mma.getDescriptorA(), mma.getDescriptorB(),
          constI32(loc, mma.getTypeA() == NVVM::WGMMATypes::bf16 ? 1 : 0),
          constI32(loc, mma.getLayoutA() == NVVM::MMALayout::row ? 0 : 1),
          constI32(loc, mma.getLayoutB() == NVVM::MMALayout::col ? 0 : 1),
          constI32(loc, mma.getScaleD() == NVVM::WGMMAScaleOut::one ? 1 : 0)});
    replace(mma, structFromStack(loc, acc, type, b_.getF32Type(), count));
    return success();
  }

  /// The inline PTX of a wgmma with A in registers (kWgmmaRegisterAAttrName)
  /// -> pallas_emu_wgmma_register_a(acc, n, aWords, descB, type, transB, scaleD).
  LogicalResult rewriteWgmmaRegisterA(LLVM::InlineAsmOp mma) {
    Location loc = mma.getLoc();
    auto params = dyn_cast<DenseI64ArrayAttr>(mma->getAttr(kWgmmaRegisterAAttrName));
    const int64_t count = params && params.size() == 3 ? params[0] / 2 : -1;
    if (count <= 0 || static_cast<int64_t>(mma.getOperands().size()) != count + 6)
      return mma.emitOpError("wgmma with A in registers: malformed ") << kWgmmaRegisterAAttrName;
    // Operands: the accumulator's registers, A's four words, B's descriptor, scale-d.
    Value acc = storeOnStack(mma, b_.getF32Type(), mma.getOperands().take_front(count));
    Value words = storeOnStack(mma, i32(), mma.getOperands().slice(count, 4));
    call(loc, "pallas_emu_wgmma_register_a", Type(),
         {acc, constI32(loc, static_cast<int32_t>(params[0])), words, mma.getOperands()[count + 4],
          constI32(loc, static_cast<int32_t>(params[1])),
          constI32(loc, static_cast<int32_t>(params[2])), mma.getOperands()[count + 5]});
    replace(mma, structFromStack(loc, acc, mma.getResult(0).getType(), b_.getF32Type(), count));
    return success();
  }

  /// A stack array of `count` elements of type `type` at the start of `op`'s
  /// kernel: registers the runtime reads or writes go through one.
  Value arrayOnStack(Operation* op, Type type, int64_t count) {
    OpBuilder eb(op->getParentOfType<LLVM::LLVMFuncOp>().getBody());
    Value one = LLVM::ConstantOp::create(eb, op->getLoc(), i32(), eb.getI32IntegerAttr(1));
    return LLVM::AllocaOp::create(eb, op->getLoc(), ptr(), LLVM::LLVMArrayType::get(type, count),
                                  one);
  }

  Value elementAt(Location loc, Value array, Type type, int64_t i) {
    return LLVM::GEPOp::create(b_, loc, ptr(), type, array,
                               ArrayRef<LLVM::GEPArg>{static_cast<int32_t>(i)});
  }

  /// A new stack array holding `values` (of type `type`), stored before `op`.
  Value storeOnStack(Operation* op, Type type, ValueRange values) {
    Value array = arrayOnStack(op, type, values.size());
    for (auto [i, v] : llvm::enumerate(values))
      LLVM::StoreOp::create(b_, op->getLoc(), v, elementAt(op->getLoc(), array, type, i));
    return array;
  }

  /// The struct of type `structType` whose `count` members (of type `type`)
  /// are read back from `array`.
  Value structFromStack(Location loc, Value array, Type structType, Type type, int64_t count) {
    Value result = LLVM::UndefOp::create(b_, loc, structType);
    for (int64_t i = 0; i < count; ++i)
      result = LLVM::InsertValueOp::create(
          b_, loc, result, LLVM::LoadOp::create(b_, loc, type, elementAt(loc, array, type, i)),
          ArrayRef<int64_t>{i});
    return result;
  }

  /// A stack array of `count` words at the start of the kernel.
  Value wordsOnStack(Operation* op, int64_t count) { return arrayOnStack(op, i32(), count); }

  Value wordAt(Location loc, Value words, int64_t i) { return elementAt(loc, words, i32(), i); }

  /// ldmatrix -> pallas_emu_ldmatrix(num, trans, row, out): the lane's words
  /// through a stack array.
  LogicalResult rewriteLdmatrix(NVVM::LdMatrixOp ld) {
    Location loc = ld.getLoc();
    if (ld.getShape().getM() != 8 || ld.getShape().getN() != 8 ||
        ld.getEltType() != NVVM::LdStMatrixEltType::B16)
      return ld.emitOpError("no emulator rule for ldmatrix other than m8n8 b16");
    const int64_t num = ld.getNum();
    Value out = wordsOnStack(ld, num);
    call(loc, "pallas_emu_ldmatrix", Type(),
         {constI32(loc, num), constI32(loc, ld.getLayout() == NVVM::MMALayout::col ? 1 : 0),
          ld.getPtr(), out});
    if (num == 1) {
      replace(ld, LLVM::LoadOp::create(b_, loc, i32(), out));
      return success();
    }
    Value result = LLVM::UndefOp::create(b_, loc, ld.getType());
    for (int64_t j = 0; j < num; ++j)
      result = LLVM::InsertValueOp::create(
          b_, loc, result, LLVM::LoadOp::create(b_, loc, i32(), wordAt(loc, out, j)),
          ArrayRef<int64_t>{j});
    replace(ld, result);
    return success();
  }

  /// mma.sync m16n8k16 f16/bf16 -> f32 -> pallas_emu_mma_sync(type, frag):
  /// A, B, C and D words through a stack array (emulator/src/collectives.cc).
  LogicalResult rewriteMmaSync(NVVM::MmaOp mma) {
    Location loc = mma.getLoc();
    auto typeA = mma.getMultiplicandAPtxType();
    if (mma.getShape().getM() != 16 || mma.getShape().getN() != 8 || mma.getShape().getK() != 16 ||
        !typeA || (*typeA != NVVM::MMATypes::f16 && *typeA != NVVM::MMATypes::bf16) ||
        mma.getMultiplicandBPtxType() != typeA || mma.accumPtxType() != NVVM::MMATypes::f32 ||
        mma.resultPtxType() != NVVM::MMATypes::f32 || mma.getOperandA().size() != 4 ||
        mma.getOperandB().size() != 2 || mma.getOperandC().size() != 4)
      return mma.emitOpError(
          "no emulator rule for mma.sync other than m16n8k16 f16/bf16 with f32 accumulators");
    Value frag = wordsOnStack(mma, 14);
    int64_t word = 0;
    SmallVector<Value> words(mma.getOperandA());
    llvm::append_range(words, mma.getOperandB());
    llvm::append_range(words, mma.getOperandC());
    for (Value v : words) {
      if (v.getType() != i32()) v = LLVM::BitcastOp::create(b_, loc, i32(), v);
      LLVM::StoreOp::create(b_, loc, v, wordAt(loc, frag, word++));
    }
    call(loc, "pallas_emu_mma_sync", Type(),
         {constI32(loc, *typeA == NVVM::MMATypes::bf16 ? 1 : 0), frag});
    Value result = LLVM::UndefOp::create(b_, loc, mma.getType());
    for (int64_t i = 0; i < 4; ++i)
      result = LLVM::InsertValueOp::create(
          b_, loc, result,
          LLVM::LoadOp::create(b_, loc, b_.getF32Type(), wordAt(loc, frag, 10 + i)),
          ArrayRef<int64_t>{i});
    replace(mma, result);
    return success();
  }

  /// shfl.sync -> pallas_emu_shfl(mode, mask, bits, b, c): value in the low
  /// 32 bits, predicate in bit 32.
  LogicalResult rewriteShuffle(NVVM::ShflOp shfl) {
    Location loc = shfl.getLoc();
    Value bits = shfl.getVal();
    bool isFloat = isa<FloatType>(bits.getType());
    if (isFloat) bits = LLVM::BitcastOp::create(b_, loc, i32(), bits);
    Value r = call(loc, "pallas_emu_shfl", i64(),
                   {constI32(loc, static_cast<int32_t>(shfl.getKind())), shfl.getThreadMask(), bits,
                    shfl.getOffset(), shfl.getMaskAndClamp()});
    Value value = LLVM::TruncOp::create(b_, loc, i32(), r);
    if (isFloat) value = LLVM::BitcastOp::create(b_, loc, b_.getF32Type(), value);
    if (!shfl.getReturnValueAndIsValid()) {
      replace(shfl, value);
      return success();
    }
    Value shift = LLVM::ConstantOp::create(b_, loc, i64(), b_.getI64IntegerAttr(32));
    Value valid =
        LLVM::TruncOp::create(b_, loc, b_.getI1Type(), LLVM::LShrOp::create(b_, loc, r, shift));
    Type structType = shfl.getType();
    Value s = LLVM::PoisonOp::create(b_, loc, structType);
    s = LLVM::InsertValueOp::create(b_, loc, s, value, ArrayRef<int64_t>{0});
    s = LLVM::InsertValueOp::create(b_, loc, s, valid, ArrayRef<int64_t>{1});
    replace(shfl, s);
    return success();
  }

  /// `align` is the alignment the access declares: its `alignment` attribute,
  /// else its type's ABI alignment (what NVPTX assumes; atomics are naturally
  /// aligned).
  LogicalResult check(Location loc, Value address, Type type, int32_t flags,
                      std::optional<uint64_t> align = std::nullopt) {
    auto bytes = static_cast<int64_t>(layout_.getTypeSize(type));
    auto declared = static_cast<int64_t>(align.value_or(layout_.getTypeABIAlignment(type)));
    Value size = LLVM::ConstantOp::create(b_, loc, i64(), b_.getI64IntegerAttr(bytes));
    Value alignment = LLVM::ConstantOp::create(b_, loc, i64(), b_.getI64IntegerAttr(declared));
    call(loc, "pallas_emu_access", Type(), {address, size, alignment, constI32(loc, flags)});
    return success();
  }

  void replace(Operation* op, Value v) {
    if (v) op->getResult(0).replaceAllUsesWith(v);
    toErase_.push_back(op);
  }

  /// Every pointer in every type becomes a host pointer (address space 0).
  void flattenAddressSpaces() {
    AttrTypeReplacer replacer;
    replacer.addReplacement([&](LLVM::LLVMPointerType t) -> std::optional<Type> {
      if (t.getAddressSpace() == 0) return std::nullopt;
      return LLVM::LLVMPointerType::get(ctx_);
    });
    replacer.recursivelyReplaceElementsIn(module_, /*replaceAttrs=*/true, /*replaceLocs=*/false,
                                          /*replaceTypes=*/true);
  }

  ModuleOp module_;
  MLIRContext* ctx_;
  OpBuilder b_;
  /// Accumulator allocas given a zero store at their definition (the store rule above).
  llvm::DenseSet<Operation*> zeroedAccumulators_;
  DataLayout layout_;
  std::map<std::pair<Operation*, StringRef>, int64_t> sharedOffsets_;
  SmallVector<Operation*> toErase_;
};

struct ConvertNVVMToEmulatorPass : impl::ConvertNVVMToEmulatorBase<ConvertNVVMToEmulatorPass> {
  void runOnOperation() override {
    if (failed(Rewriter(getOperation()).run())) signalPassFailure();
  }
};

}  // namespace
}  // namespace mlir::pallas

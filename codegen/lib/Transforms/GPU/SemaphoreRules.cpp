//===- SemaphoreRules.cpp - semaphores and run-time checks on the GPU ------===//
//
// Semaphores are int32 counters in global memory; each operation is done once
// per program by thread 0, ordered against the program's other threads by
// barriers and against other programs by GPU-scope fences.
//
//===----------------------------------------------------------------------===//

#include "../ErrorRecord.h"
#include "GpuLowering.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"

namespace mlir::pallas::gpu_lowering {
namespace {

/// The scope of every semaphore access: the programs of one launch share a
/// device, so their ordering needs no more than `.gpu` (LLVM's "device"
/// sync scope). An atomic or fence without a scope is `.sys` in PTX, which
/// also orders against the host and peer devices (a wider, slower fence).
constexpr StringLiteral kDeviceScope = "device";

/// Pointer to element `index` of a 1-D memref, for LLVM atomics.
Value elementPointer(OpBuilder& b, Location loc, Value memref, Value index) {
  auto meta = memref::ExtractStridedMetadataOp::create(b, loc, memref);
  Value base = memref::ExtractAlignedPointerAsIndexOp::create(b, loc, memref);
  auto type = cast<MemRefType>(memref.getType());
  Value element = arith::ConstantIndexOp::create(b, loc, type.getElementTypeBitWidth() / 8);
  Value linear = arith::AddIOp::create(b, loc, meta.getOffset(), index);
  Value addr = arith::AddIOp::create(b, loc, base, arith::MulIOp::create(b, loc, linear, element));
  Value bits = arith::IndexCastUIOp::create(b, loc, b.getI64Type(), addr);
  return LLVM::IntToPtrOp::create(b, loc, LLVM::LLVMPointerType::get(b.getContext()), bits);
}

/// One atomic operation per program: after a barrier (so every thread's
/// earlier writes precede a release), thread 0 runs `atomic` and, when the
/// result is wanted, publishes it in shared memory; after a second barrier
/// every thread reads it (so an acquire orders every thread's later reads).
Value onceInThreadZero(GpuLowering& g, OpBuilder& b, Location loc, bool wantResult,
                       function_ref<Value(OpBuilder&, Location)> atomic) {
  Value slot;
  if (wantResult)  // no barrier follows the reads: the slot is never reused
    slot = g.sharedBuffer(b, loc, 1, b.getI32Type(), SharedLifetime::kKernel, 16,
                          "semaphore result slot");
  Value c0 = arith::ConstantIndexOp::create(b, loc, 0);
  gpu::BarrierOp::create(b, loc);
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.tid, c0);
  scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
    Value result = atomic(tb, l);
    if (slot) memref::StoreOp::create(tb, l, result, slot, ValueRange{c0});
    scf::YieldOp::create(tb, l);
  });
  if (!slot) return {};
  gpu::BarrierOp::create(b, loc);
  return memref::LoadOp::create(b, loc, slot, ValueRange{c0});
}

/// An atomic add once per program, with release semantics (and acquire
/// when the old value is wanted); returns the old value in every thread, or
/// nothing for a signal (`wantOld` false). NVPTX emits atomicrmw as a
/// relaxed `atom` whatever its ordering, so the ordering comes from GPU-scope
/// fences around it: fence; atom (release), atom; fence (acquire).
Value semaphoreAdd(GpuLowering& g, OpBuilder& b, Location loc, Value semaphores, Value index,
                   Value value, bool wantOld = true) {
  return onceInThreadZero(g, b, loc, wantOld, [&](OpBuilder& tb, Location l) {
    LLVM::FenceOp::create(tb, l, LLVM::AtomicOrdering::release, kDeviceScope);
    Value old =
        memref::AtomicRMWOp::create(tb, l, arith::AtomicRMWKind::addi, value,
                                    g.map.lookup(semaphores), ValueRange{g.map.lookup(index)});
    if (wantOld) LLVM::FenceOp::create(tb, l, LLVM::AtomicOrdering::acquire, kDeviceScope);
    return old;
  });
}

/// An acquire load once per program, in every thread. A load rather than an
/// add of 0: programs spinning on a counter then only read its cache line.
Value semaphoreRead(GpuLowering& g, OpBuilder& b, Location loc, Value semaphores, Value index) {
  return onceInThreadZero(g, b, loc, true, [&](OpBuilder& tb, Location l) {
    Value ptr = elementPointer(tb, l, g.map.lookup(semaphores), g.map.lookup(index));
    return LLVM::LoadOp::create(tb, l, tb.getI32Type(), ptr, /*alignment=*/4,
                                /*isVolatile=*/false, /*isNonTemporal=*/false,
                                /*isInvariant=*/false, /*isInvariantGroup=*/false,
                                LLVM::AtomicOrdering::acquire, kDeviceScope)
        .getResult();
  });
}

/// Thread 0 spins until it takes `value` from the counter:
///
///   do { have = atomic load (relaxed);
///        took = have >= value && cmpxchg(ptr, have, have - value, acq_rel) }
///   while (!took);
///
/// then a barrier holds the other threads until it has. The counter is read
/// with an atomic load on every iteration (memref.generic_atomic_rmw starts
/// from a plain load, a data race with the signalling programs).
void semaphoreWait(GpuLowering& g, OpBuilder& b, Location loc, Value semaphores, Value index,
                   Value value) {
  Value first = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, g.tid,
                                      arith::ConstantIndexOp::create(b, loc, 0));
  scf::IfOp::create(b, loc, first, [&](OpBuilder& tb, Location l) {
    Value ptr = elementPointer(tb, l, semaphores, index);
    auto spin = scf::WhileOp::create(tb, l, TypeRange{}, ValueRange{});
    OpBuilder wb = OpBuilder::atBlockEnd(tb.createBlock(&spin.getBefore()));
    Type i32 = wb.getI32Type();
    Value have = LLVM::LoadOp::create(wb, l, i32, ptr, /*alignment=*/4, /*isVolatile=*/false,
                                      /*isNonTemporal=*/false, /*isInvariant=*/false,
                                      /*isInvariantGroup=*/false, LLVM::AtomicOrdering::monotonic,
                                      kDeviceScope);
    Value enough = arith::CmpIOp::create(wb, l, arith::CmpIPredicate::sge, have, value);
    auto take = scf::IfOp::create(
        wb, l, enough,
        [&](OpBuilder& ib, Location il) {
          Value rest = arith::SubIOp::create(ib, il, have, value);
          auto cas =
              LLVM::AtomicCmpXchgOp::create(ib, il, ptr, have, rest, LLVM::AtomicOrdering::acq_rel,
                                            LLVM::AtomicOrdering::monotonic, kDeviceScope);
          scf::YieldOp::create(
              ib, il, LLVM::ExtractValueOp::create(ib, il, cas, ArrayRef<int64_t>{1}).getResult());
        },
        [&](OpBuilder& eb, Location el) {
          scf::YieldOp::create(eb, el, arith::ConstantIntOp::create(eb, el, 0, 1).getResult());
        });
    Value notYet =
        arith::XOrIOp::create(wb, l, take.getResult(0), arith::ConstantIntOp::create(wb, l, 1, 1));
    scf::ConditionOp::create(wb, l, notYet, ValueRange{});
    OpBuilder ab = OpBuilder::atBlockEnd(tb.createBlock(&spin.getAfter()));
    scf::YieldOp::create(ab, l);
    tb.setInsertionPointAfter(spin);
    scf::YieldOp::create(tb, l);
  });
  gpu::BarrierOp::create(b, loc);
}

LogicalResult lowerSemaphoreAdd(SemaphoreAddOp add, GpuLowering& g, OpBuilder& b) {
  Value old = semaphoreAdd(g, b, add.getLoc(), add.getSemaphores(), add.getIndex(),
                           g.map.lookup(add.getValue()), !add.getOld().use_empty());
  if (old) g.map.map(add.getOld(), old);
  return success();
}

LogicalResult lowerSemaphoreWait(SemaphoreWaitOp wait, GpuLowering& g, OpBuilder& b) {
  semaphoreWait(g, b, wait.getLoc(), g.map.lookup(wait.getSemaphores()),
                g.map.lookup(wait.getIndex()), g.map.lookup(wait.getValue()));
  return success();
}

LogicalResult lowerSemaphoreRead(SemaphoreReadOp read, GpuLowering& g, OpBuilder& b) {
  g.map.map(read.getValue(),
            semaphoreRead(g, b, read.getLoc(), read.getSemaphores(), read.getIndex()));
  return success();
}

/// Once per failing program, by thread 0 (see pallas.check).
LogicalResult lowerCheck(CheckOp check, GpuLowering& g, OpBuilder& b) {
  Location loc = check.getLoc();
  Value record =
      arith::AndIOp::create(b, loc, g.isThread(b, loc, 0), g.map.lookup(check.getFailed()));
  scf::IfOp::create(b, loc, record, [&](OpBuilder& tb, Location l) {
    Value errors = g.map.lookup(check.getErrors());
    Value one = arith::ConstantIntOp::create(tb, l, tb.getI32Type(), 1);
    Value old = memref::AtomicRMWOp::create(tb, l, arith::AtomicRMWKind::addi, one, errors,
                                            ValueRange{g.index(tb, l, 0)});
    writeFirstFailure(tb, l, errors, old, static_cast<int32_t>(check.getCheck()),
                      g.mapped(check.getValues()));
    scf::YieldOp::create(tb, l);
  });
  return success();
}

}  // namespace

void populateSemaphoreRules(RuleRegistry& rules) {
  rules.add(SemaphoreAddOp::getOperationName(), ruleFor(lowerSemaphoreAdd));
  rules.add(SemaphoreWaitOp::getOperationName(), ruleFor(lowerSemaphoreWait));
  rules.add(SemaphoreReadOp::getOperationName(), ruleFor(lowerSemaphoreRead));
  rules.add(CheckOp::getOperationName(), ruleFor(lowerCheck));
}

}  // namespace mlir::pallas::gpu_lowering

// RUN: pallas-opt %s --split-input-file --verify-diagnostics --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s
// RUN: pallas-opt %s --split-input-file --verify-diagnostics --pallas-assign-layouts --convert-pallas-to-gpu=async-copies=cp-async | FileCheck %s --check-prefix=CPASYNC

// The sm_80 form (async-copies=cp-async): the same stages, barriers and
// phases, but every thread copies its 16-byte pieces (a 32x32 f32 block is
// 256 pieces: 2 per thread, each with the bytes it has in the array), then
// arrives on the slot's barrier, which counts 128 arrivals; loads spin on
// test.wait; the output is stored from registers (no bulk stores on sm_80).
// CPASYNC-LABEL: gpu.func @pipelined_axpb
// CPASYNC: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CPASYNC: nvvm.mbarrier.init %{{.*}}, %c128_i32
// CPASYNC-NOT: nvvm.fence.mbarrier.init
// CPASYNC: gpu.barrier
// CPASYNC: scf.if
// CPASYNC: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg, %{{.*}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// CPASYNC: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg, %{{.*}} : !llvm.ptr<3>, !llvm.ptr<1>, i32
// CPASYNC-NOT: nvvm.cp.async.shared.global
// CPASYNC: nvvm.cp.async.mbarrier.arrive %{{.*}} {noinc = true}
// CPASYNC: scf.for
// CPASYNC: scf.while
// CPASYNC: nvvm.mbarrier.test.wait
// CPASYNC-NOT: nvvm.cp.async.bulk
// CPASYNC: gpu.barrier
// CPASYNC: nvvm.cp.async.shared.global
// CPASYNC: nvvm.cp.async.mbarrier.arrive
// CPASYNC: nvvm.mbarrier.inval
// CPASYNC: gpu.return

// A pipelined sequential axis (PipelineRules.cpp): an scf.for marked
// pallas.pipeline whose staged blocks are its stages, two stage buffers
// each. The input gets two 4096-byte buffers and two mbarriers, the output
// two buffers; every buffer is aligned to the 128-byte swizzle's period.
// CHECK: pallas.shared_align.pipelined_axpb = 1024 : i64, pallas.shared_bytes.pipelined_axpb = 16400 : i64
// CHECK-LABEL: gpu.func @pipelined_axpb
// CHECK-SAME: %[[DX:[a-z0-9]+]]: !llvm.ptr, %[[DY:[a-z0-9]+]]: !llvm.ptr) kernel
// CHECK: %[[XBUF:.*]] = memref.view %{{.*}} to memref<2048xf32, #gpu.address_space<workgroup>>
// CHECK: %[[BARS:.*]] = memref.view %{{.*}} to memref<2xi64, #gpu.address_space<workgroup>>
// CHECK: %[[YBUF:.*]] = memref.view %{{.*}} to memref<2048xf32, #gpu.address_space<workgroup>>
// Prologue: thread 0 initialises both barriers, then every thread sees them.
// CHECK: scf.if
// CHECK: nvvm.mbarrier.init
// CHECK: nvvm.mbarrier.init
// CHECK: nvvm.fence.mbarrier.init
// CHECK: gpu.barrier
// Steps 0 and 1 are requested into buffers 0 and 1, each if the loop has that step.
// CHECK: arith.cmpi slt
// CHECK: scf.if
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c4096_i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %[[DX]], %{{.*}}, box
// CHECK: arith.cmpi slt
// CHECK: scf.if
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c4096_i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %[[DX]], %{{.*}}, box
// Step k uses buffer (k - lo) % 2 and waits for phase (k - lo) / 2 of its
// barrier: parity ((k - lo) / 2) & 1. The division is in 32 bits (a step
// count; a 64-bit one by a slot count that is not a power of two is a long
// multiply-high sequence).
// CHECK: scf.for %[[K:.*]] = %[[LO:.*]] to %{{.*}} step
// CHECK: %[[I:.*]] = arith.subi %[[K]], %[[LO]]
// CHECK: %[[I32:.*]] = arith.index_castui %[[I]] : index to i32
// CHECK: %[[SLOT32:.*]] = arith.remui %[[I32]], %c2_i32 : i32
// CHECK: %[[SLOT:.*]] = arith.index_castui %[[SLOT32]] : i32 to index
// CHECK: %[[PHASE32:.*]] = arith.divui %[[I32]], %c2_i32 : i32
// CHECK: %[[PHASE:.*]] = arith.index_castui %[[PHASE32]] : i32 to index
// CHECK: %[[P:.*]] = arith.andi %[[PHASE]], %c1
// CHECK: %[[PARITY:.*]] = arith.index_cast %[[P]] : index to i32
// CHECK: memref.extract_aligned_pointer_as_index %[[BARS]]
// CHECK: arith.muli %[[SLOT]], %c8
// CHECK: nvvm.mbarrier.try_wait.parity %{{.*}}, %[[PARITY]]
// The slot's data: 1024 elements further per slot, swizzled within it.
// CHECK: %[[SLOTSTART:.*]] = arith.muli %[[SLOT]], %c1024
// CHECK: arith.xori
// CHECK: arith.addi %[[SLOTSTART]]
// CHECK: vector.load %[[XBUF]]
// CHECK: vector.store %{{.*}}, %[[YBUF]]
// End of the step: the threads' writes to the async proxy; thread 0 lets at
// most 0 older stores still read (n - 2 with n = 2), so that the buffer the
// next step writes is free; every thread releases the step's buffers.
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: scf.if
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: gpu.barrier
// Thread 0 stores this step's output and refills the released input buffer
// with step k + 2 when there is one.
// CHECK: scf.if
// CHECK: nvvm.cp.async.bulk.tensor.global.shared.cta %[[DY]]
// CHECK: nvvm.cp.async.bulk.commit.group
// CHECK: arith.cmpi slt
// CHECK: scf.if
// CHECK: nvvm.mbarrier.arrive.expect_tx
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %[[DX]]
// Epilogue: the last stores have read their buffers; the barriers are
// invalidated (a pipeline run again initialises them afresh).
// CHECK: scf.if
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: nvvm.mbarrier.inval
// CHECK: nvvm.mbarrier.inval
// CHECK: gpu.return
func.func @pipelined_axpb(%x: memref<?x?xf32, strided<[?, 1]>>, %y: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 2 : i32, pallas.threads = 128 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c1 : memref<?x?xf32, strided<[?, 1]>>
  scf.for %k = %c0 to %n step %c1 {
    %i = pallas.program_id 0
    %rx = pallas.block %x[%i, %k] {block_shape = array<i64: 32, 32>, buffers = 2 : i64, name = "x", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<32x32xf32>
    %ry = pallas.block %y[%i, %k] {block_shape = array<i64: 32, 32>, buffers = 2 : i64, name = "y", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<32x32xf32>
    %v = pallas.load %rx[[0, 0]] [[32, 32]] : !pallas.ref<32x32xf32> -> vector<32x32xf32>
    %w = arith.addf %v, %v : vector<32x32xf32>
    pallas.store %w, %ry[[0, 0]] : vector<32x32xf32>, !pallas.ref<32x32xf32>
  } {pallas.pipeline}
  return
}

// -----

// A block longer than a TMA box (256 elements a dim) is several copies: a
// [1, 2048] f32 chunk of a row is 8 boxes of [1, 256], 1024 bytes apart in
// its stage buffer, all completing on the slot's barrier (8192 bytes).
// CHECK-LABEL: gpu.func @chunk_copies
// CHECK: scf.for
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c8192_i32
// CHECK-COUNT-8: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK-NOT: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: scf.yield
func.func @chunk_copies(%x: memref<?x?xf32, strided<[?, 1]>>, %out: memref<?xf32, strided<[1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c1 : memref<?x?xf32, strided<[?, 1]>>
  %r = pallas.program_id 0
  %zero = arith.constant dense<0.0> : vector<2048xf32>
  %acc = scf.for %k = %c0 to %n step %c1 iter_args(%a = %zero) -> (vector<2048xf32>) {
    %rx = pallas.block %x[%r, %k] {block_shape = array<i64: 1, 2048>, buffers = 2 : i64, name = "x", squeezed = array<i1: true, false>, staged, swizzle = 0 : i64} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<2048xf32>
    %v = pallas.load %rx[[0]] [[2048]] : !pallas.ref<2048xf32> -> vector<2048xf32>
    %s = arith.addf %a, %v : vector<2048xf32>
    scf.yield %s : vector<2048xf32>
  } {pallas.pipeline}
  %ro = pallas.block %out[%c0] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xf32, strided<[1]>> -> !pallas.ref<2048xf32>
  pallas.store %acc, %ro[[0]] : vector<2048xf32>, !pallas.ref<2048xf32>
  return
}

// -----

// A stage's block indices are computed again for steps ahead, so they cannot
// depend on what the loop carries.
func.func @index_from_carry(%x: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c1 : memref<?x?xf32, strided<[?, 1]>>
  %last = scf.for %k = %c0 to %n step %c1 iter_args(%j = %c0) -> (index) {
    // expected-error @+1 {{a pipeline stage's block indices depend on a loop carry}}
    %rx = pallas.block %x[%j, %k] {block_shape = array<i64: 1, 256>, buffers = 2 : i64, name = "x", squeezed = array<i1: true, false>, staged, swizzle = 0 : i64} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<256xf32>
    %v = pallas.load %rx[[0]] [[256]] : !pallas.ref<256xf32> -> vector<256xf32>
    %next = arith.addi %j, %c1 : index
    scf.yield %next : index
  } {pallas.pipeline}
  return
}

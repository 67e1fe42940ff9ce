// RUN: pallas-opt %s --verify-diagnostics --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s
// RUN: pallas-opt %s --verify-diagnostics --pallas-assign-layouts --convert-pallas-to-gpu=async-copies=cp-async | FileCheck %s --check-prefix=CPASYNC
// RUN: pallas-opt %s --convert-pallas-to-loops | FileCheck %s --check-prefix=HOST

// Explicit copies (AsyncCopyRules.cpp): a run_scoped buffer of 32x32 f32
// (4096 bytes, aligned to the 128-byte swizzle's period of 1024) and two
// mbarriers from the shared-memory plan; one copy in on barrier 1, a wait
// whose parity comes from the thread's phase bits, a store to the buffer,
// commit (fence the async proxy, barrier), a copy out with add, a wait.
// CHECK: pallas.shared_align.copy_wait_scale_copy_out = 1024 : i64, pallas.shared_bytes.copy_wait_scale_copy_out = 4112 : i64
// CHECK-LABEL: gpu.func @copy_wait_scale_copy_out
// CHECK-SAME: %[[DX:[a-z0-9]+]]: !llvm.ptr, %[[DY:[a-z0-9]+]]: !llvm.ptr) kernel
// The phase bits: a per-thread i32 at the function entry, zero at the scope's start.
// CHECK: %[[PHASES:.*]] = llvm.alloca %{{.*}} x i32
// CHECK: memref.view %{{.*}} to memref<1024xf32, #gpu.address_space<workgroup>>
// CHECK: memref.view %{{.*}} to memref<2xi64, #gpu.address_space<workgroup>>
// CHECK: llvm.store %{{.*}}, %[[PHASES]] : i32, !llvm.ptr
// Thread 0 initialises both barriers (one arrival each); every thread sees them.
// CHECK: scf.if
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK: nvvm.fence.mbarrier.init
// CHECK: gpu.barrier
// The copy: thread 0's expect-tx of the box's bytes (its one arrival) and the TMA copy.
// CHECK: scf.if
// CHECK: nvvm.mbarrier.arrive.expect_tx %[[BAR:.*]], %c4096_i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %[[DX]], %[[BAR]], box
// The wait: parity = (bits >> 1) & 1, then bit 1 flips.
// CHECK: %[[BITS:.*]] = llvm.load %[[PHASES]] : !llvm.ptr -> i32
// CHECK: %[[SHIFTED:.*]] = arith.shrui %[[BITS]], %{{.*}} : i32
// CHECK: %[[PARITY:.*]] = arith.andi %[[SHIFTED]], %{{.*}} : i32
// CHECK: nvvm.mbarrier.try_wait.parity %{{.*}}, %[[PARITY]]
// CHECK: %[[FLIPPED:.*]] = arith.xori %[[BITS]]
// CHECK: llvm.store %[[FLIPPED]], %[[PHASES]]
// The store to the buffer is fenced by barriers (as scratch is).
// CHECK: gpu.barrier
// CHECK: vector.store
// CHECK: gpu.barrier
// commit_smem, then thread 0's TMA reduction (add) and its bulk group.
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK-NEXT: gpu.barrier
// CHECK: nvvm.cp.async.bulk.tensor.reduce %[[DY]], %{{.*}}, box[%{{.*}}, %{{.*}}] {redKind = #nvvm.tma_redux_kind<add>}
// CHECK-NEXT: nvvm.cp.async.bulk.commit.group
// wait_smem_to_gmem(0, read_only), then the scope's end: the stores have read
// the buffer, every thread is done, the barriers are invalidated.
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: gpu.barrier
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: gpu.barrier
// CHECK: nvvm.mbarrier.inval
// CHECK: nvvm.mbarrier.inval
// CHECK: gpu.return

// sm_80: every thread's cp.async pieces hold the phase (arrive without
// noinc), a barrier, then thread 0's one arrival; the wait spins on
// test.wait; the copy out adds element by element with atomics; no TMA, no
// async-proxy fence, no bulk groups.
// CPASYNC-LABEL: gpu.func @copy_wait_scale_copy_out
// CPASYNC: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CPASYNC-NOT: nvvm.fence.mbarrier.init
// CPASYNC: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg
// CPASYNC: nvvm.cp.async.shared.global %{{.*}}, %{{.*}}, 16, cache = cg
// CPASYNC: nvvm.cp.async.mbarrier.arrive %[[BAR:[0-9]+]] : !llvm.ptr<3>
// CPASYNC-NEXT: gpu.barrier
// CPASYNC: nvvm.mbarrier.arrive %[[BAR]] : !llvm.ptr<3> -> i64
// CPASYNC: scf.while
// CPASYNC: nvvm.mbarrier.test.wait
// CPASYNC-NOT: nvvm.fence.proxy
// CPASYNC: memref.atomic_rmw addf
// CPASYNC-NOT: nvvm.cp.async.bulk
// CPASYNC: nvvm.mbarrier.inval
// CPASYNC: gpu.return

// The host backend: the buffer is a stack buffer, the copies are loops
// (zero outside the array; the add reads, adds, writes), barriers vanish.
// HOST-LABEL: func.func @pallas_host_copy_wait_scale_copy_out
// HOST: memref.alloca() : memref<32x32xf32>
// HOST-NOT: pallas.
// HOST: arith.addf
// HOST: return
func.func @copy_wait_scale_copy_out(%x: memref<?x?xf32, strided<[?, 1]>>, %y: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  %i = pallas.program_id 0
  %row = arith.muli %i, %c32 : index
  pallas.run_scoped attributes {swizzles = array<i64: 128>} {
  ^bb0(%buf: memref<32x32xf32>, %bars: !pallas.barriers<2, arrivals = 1>):
    %r = pallas.block %buf[%c0, %c0] {block_shape = array<i64: 32, 32>, squeezed = array<i1: false, false>} : memref<32x32xf32> -> !pallas.ref<32x32xf32>
    pallas.copy_to_shared %x[%row, %c0], %buf, %bars[%c1] : memref<?x?xf32, strided<[?, 1]>>, memref<32x32xf32>, !pallas.barriers<2, arrivals = 1>
    pallas.barrier_wait %bars[%c1] : !pallas.barriers<2, arrivals = 1>
    %v = pallas.load %r[[0, 0]] [[32, 32]] : !pallas.ref<32x32xf32> -> vector<32x32xf32>
    %w = arith.addf %v, %v : vector<32x32xf32>
    pallas.store %w, %r[[0, 0]] : vector<32x32xf32>, !pallas.ref<32x32xf32>
    pallas.commit_shared
    pallas.copy_to_global %buf, %y[%row, %c0] {add} : memref<32x32xf32>, memref<?x?xf32, strided<[?, 1]>>
    pallas.wait_copies_to_global 0 {read_only}
  }
  return
}

// Warp specialization (tests/kernels/features.cc, pipelined_wgmma_ws):
// pipelined_wgmma with spec.warp_specialize({40, 232}). The kernel launches a
// producer warpgroup after its 128 threads; thread 128 issues every TMA copy
// and the consumer warpgroup only waits, multiplies and releases stages.
//
// RUN: pallas-opt %s --pallas-peel-last-step --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s --check-prefix=TMA
// RUN: pallas-opt %s --pallas-expand-wgmma --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=cp-async mma=mma_sync' \
// RUN:   | FileCheck %s --check-prefix=CPASYNC
// RUN: pallas-opt %s --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s --check-prefix=EARLY

// sm_90a. 256 threads that start with (40 + 232) / 2 = 136 registers each.
// Per stage and operand a full barrier (1 arrival: the producer's expect-tx,
// completed by the TMA bytes); per stage one release barrier (4 arrivals:
// one per consumer warp), shared by a and b (both have 3 stages).
// TMA-LABEL: gpu.func @pipelined_wgmma_ws
// TMA-SAME: known_block_size = array<i32: 256, 1, 1>, nvvm.maxnreg = 136
// Thread 0 first prefetches a's and b's descriptors (the sm_80 form has none).
// TMA: nvvm.prefetch tensormap in_param_space
// TMA-NEXT: nvvm.prefetch tensormap in_param_space
// TMA-COUNT-3: nvvm.mbarrier.init %{{.*}}, %c1_i32
// TMA-COUNT-3: nvvm.mbarrier.init %{{.*}}, %c1_i32
// TMA-COUNT-3: nvvm.mbarrier.init %{{.*}}, %c4_i32
// TMA-NOT: nvvm.mbarrier.init
// TMA: gpu.barrier
// The consumer warpgroup (threads 0-127) takes 232 registers. Each step
// waits for its two tiles, multiplies, leaves the multiply in flight, and
// (delay_release(1)) releases the stages of step k - 1, slot (k + 2) % 3.
// TMA: %[[CONSUMER:.*]] = arith.cmpi ult, %thread_id_x, %c128
// TMA-NEXT: scf.if %[[CONSUMER]] {
// TMA-NEXT: nvvm.setmaxregister increase 232
// TMA-NEXT: scf.for %[[K:.*]] = %[[ZERO:c0(_[0-9]+)?]] to
// TMA-NOT: nvvm.cp.async.bulk.tensor
// TMA: nvvm.mbarrier.try_wait.parity
// TMA: nvvm.mbarrier.try_wait.parity
// TMA-COUNT-4: nvvm.wgmma.mma_async
// TMA: nvvm.wgmma.wait.group.sync.aligned 1
// TMA-NEXT: %[[STEP:.*]] = arith.subi %[[K]], %[[ZERO]]
// TMA: %[[LATE:.*]] = arith.cmpi uge, %[[STEP]], %c1
// TMA-NEXT: scf.if %[[LATE]] {
// Each warp meets, then its lane 0 arrives for it.
// TMA: nvvm.bar.warp.sync %c-1_i32
// TMA-NEXT: %c32 = arith.constant 32 : index
// TMA-NEXT: %[[LANE:.*]] = arith.remui %thread_id_x, %c32
// TMA-NEXT: %[[LANE32:.*]] = arith.index_castui %[[LANE]] : index to i32
// TMA: %[[STEP32:.*]] = arith.index_castui %[[STEP]] : index to i32
// TMA: %[[SLOT:.*]] = arith.addi %[[STEP32]], %c2_i32 : i32
// TMA: arith.remui %[[SLOT]], %c3_i32{{.*}} : i32
// TMA: %[[FIRST:.*]] = arith.cmpi eq, %[[LANE32]], %c0_i32
// TMA-NEXT: scf.if %[[FIRST]] {
// TMA-NEXT: nvvm.mbarrier.arrive
// TMA-NEXT: }
// TMA-NEXT: }
// TMA-NEXT: }
// The peeled last step waits for every multiply and stores the accumulator
// from its registers straight to d (8-byte stores where inside the array
// and aligned, else masked elements): no shared memory, so no barrier the
// producer would never reach.
// TMA-NOT: gpu.barrier
// TMA: nvvm.wgmma.wait.group.sync.aligned 0
// TMA: vector.store %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<2xf32>
// TMA-NOT: gpu.barrier
// TMA-NOT: nvvm.barrier
// The producer warpgroup gives registers back; its thread 128 refills slot
// i % 3 once the consumers released step i - 3 (parity (i / 3 - 1) & 1; one
// wait for both tiles), announcing each box's 64 x 64 x 2 bytes.
// TMA: nvvm.setmaxregister decrease 40
// TMA: %[[PRODUCER:.*]] = arith.cmpi eq, %thread_id_x, %c128
// TMA-NEXT: scf.if %[[PRODUCER]] {
// TMA-NEXT: %c1{{.*}} = arith.constant 1 : index
// TMA-NEXT: scf.for
// TMA: arith.cmpi uge, %{{.*}}, %c3
// TMA-NEXT: scf.if
// TMA: nvvm.mbarrier.try_wait.parity
// TMA: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c8192_i32
// TMA: nvvm.cp.async.bulk.tensor.shared.cluster.global
// TMA-NOT: nvvm.mbarrier.try_wait.parity
// TMA: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c8192_i32
// TMA: nvvm.cp.async.bulk.tensor.shared.cluster.global
// TMA: } {pallas.consumer}
// TMA-NEXT: gpu.return

// sm_80 has no setmaxnreg: its form launches no producer warpgroup (128
// threads, every register of the SM theirs) and the consumer runs the
// cp.async pipeline itself, with plain barriers: there is no one to skip.
// CPASYNC-LABEL: gpu.func @pipelined_wgmma_ws
// CPASYNC-SAME: known_block_size = array<i32: 128, 1, 1>, nvvm.maxnreg = 255
// CPASYNC-NOT: nvvm.prefetch
// CPASYNC-NOT: setmaxregister
// CPASYNC-NOT: arith.cmpi ult, %thread_id_x
// CPASYNC-NOT: nvvm.barrier id
// CPASYNC: gpu.barrier
// CPASYNC: nvvm.cp.async.shared.global
// CPASYNC-NOT: setmaxregister
// CPASYNC-NOT: nvvm.barrier id
// CPASYNC-NOT: pallas.consumer
// CPASYNC-COUNT-6: nvvm.mbarrier.inval
// CPASYNC-NOT: pallas.consumer
// CPASYNC: gpu.return

// The consumers of a warp-specialized pipeline release step k - 1's stage
// buffers (delay_release(1)) right after the body's wgmma_wait(1), which
// follows its wgmma: every step starts a multiply before that wait, so step
// k - 1's is done. The release then comes before a last-step epilogue left
// in the loop (as a persistent program's is: here --pallas-peel-last-step
// does not run), so the producer refills the buffer while the epilogue
// runs. (The kernel below, not peeled: the EARLY run.)
// EARLY-LABEL: gpu.func @pipelined_wgmma_ws
// EARLY: nvvm.setmaxregister increase 232
// EARLY: scf.for %[[K:.*]] = %[[ZERO:c0(_[0-9]+)?]] to
// EARLY-COUNT-4: nvvm.wgmma.mma_async
// EARLY: nvvm.wgmma.wait.group.sync.aligned 1
// EARLY-NEXT: %[[STEP:.*]] = arith.subi %[[K]], %[[ZERO]]
// EARLY: %[[LATE:.*]] = arith.cmpi uge, %[[STEP]], %c1
// EARLY-NEXT: scf.if %[[LATE]] {
// EARLY: nvvm.mbarrier.arrive
// EARLY: }
// The epilogue follows, and nothing is released after it.
// EARLY: scf.if
// EARLY: nvvm.wgmma.wait.group.sync.aligned 0
// EARLY: vector.store %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<2xf32>
// EARLY-NOT: nvvm.mbarrier.arrive
// EARLY: nvvm.setmaxregister decrease 40

module {
  func.func @pipelined_wgmma_ws(%arg0: memref<?x?xbf16, strided<[?, 1]>>, %arg1: memref<?x?xbf16, strided<[?, 1]>>, %arg2: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.approx_math, pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)", "cdiv(k, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.max_registers = 136 : i64, pallas.operand_names = ["a", "b", "d", "acc"], pallas.threads = 128 : i64} {
    %0 = pallas.scratch accumulator {name = "acc"} : memref<64x64xf32>
    %c1 = arith.constant 1 : index
    %dim = memref.dim %arg0, %c1 : memref<?x?xbf16, strided<[?, 1]>>
    %c64 = arith.constant 64 : index
    %1 = arith.ceildivsi %dim, %c64 : index
    %c0 = arith.constant 0 : index
    %c1_0 = arith.constant 1 : index
    scf.for %arg3 = %c0 to %1 step %c1_0 {
      %2 = pallas.program_id 0
      %3 = pallas.program_id 1
      %4 = pallas.block %arg0[%2, %arg3] {block_shape = array<i64: 64, 64>, buffers = 3 : i64, name = "a", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %5 = pallas.block %arg1[%3, %arg3] {block_shape = array<i64: 64, 64>, buffers = 3 : i64, name = "b", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %6 = pallas.block %arg2[%2, %3] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
      %c0_1 = arith.constant 0 : index
      %c0_2 = arith.constant 0 : index
      %7 = pallas.block %0[%c0_1, %c0_2] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
      %c0_3 = arith.constant 0 : index
      %8 = arith.cmpi eq, %arg3, %c0_3 : index
      scf.if %8 {
        %cst = arith.constant 0.000000e+00 : f32
        %11 = vector.broadcast %cst : f32 to vector<64x64xf32>
        pallas.store %11, %7[[0, 0]] : vector<64x64xf32>, <64x64xf32>
      }
      pallas.wgmma %7, %4, %5 {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
      pallas.wgmma_wait 1
      %c1_4 = arith.constant 1 : index
      %9 = arith.subi %1, %c1_4 : index
      %10 = arith.cmpi eq, %arg3, %9 : index
      scf.if %10 {
        %11 = pallas.load %7[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
        pallas.store %11, %6[[0, 0]] : vector<64x64xf32>, <64x64xf32>
      }
    } {pallas.delay_release = 1 : i64, pallas.pipeline, pallas.warp_specialized = array<i64: 40, 136, 232>}
    return
  }
}


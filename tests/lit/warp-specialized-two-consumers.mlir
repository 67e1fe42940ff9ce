// Two consumer warpgroups (tests/kernels/features.cc, pipelined_wgmma_ws2):
// pipelined_wgmma_ws with threads(256) and a [128, 64] accumulator, CUTLASS's
// cooperative schedule. The accumulator layout gives warpgroup w rows
// [64 w, 64 w + 64) (PallasLayouts.td), so each warpgroup issues the
// wgmmas of its own rows, reading a from 64 w rows into the stage.
//
// RUN: pallas-opt %s --pallas-peel-last-step --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s

// 384 threads (two consumer warpgroups, then the producer) that start with
// (40 + 2 * 232) / 3 = 168 registers each: 64512 of the SM's 65536.
// CHECK-LABEL: gpu.func @pipelined_wgmma_ws2
// CHECK-SAME: known_block_size = array<i32: 384, 1, 1>, nvvm.maxnreg = 168
// Release barriers wait for all 8 consumer warps.
// CHECK-COUNT-3: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK-COUNT-3: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK-COUNT-3: nvvm.mbarrier.init %{{.*}}, %c8_i32
// CHECK: gpu.barrier
// CHECK: %[[CONSUMER:.*]] = arith.cmpi ult, %thread_id_x, %c256
// CHECK-NEXT: scf.if %[[CONSUMER]] {
// CHECK-NEXT: nvvm.setmaxregister increase 232
// Each step: this warpgroup's first row, (tid / 128) * 64, moves a's
// descriptors 64 rows (64 * 128 bytes) into the stage; then the four
// m64n64k16 of its rows (K = 64), one commit, and the wait that keeps one
// step in flight.
// CHECK: %[[WG:.*]] = arith.divui %thread_id_x, %c128
// CHECK: %[[ROW:.*]] = arith.muli %[[WG]], %c64
// CHECK: %[[BYTES:.*]] = arith.muli %[[ROW]], %c128
// CHECK-NEXT: arith.addi %{{.*}}, %[[BYTES]]
// CHECK-COUNT-4: nvvm.wgmma.mma_async {{.*}} <m = 64, n = 64, k = 16>
// CHECK-NOT: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// The peeled last step: 32 registers a thread (64 x 64 / 128), stored as
// 16 pairs straight to d, no barrier.
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-16: vector.store %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<2xf32>
// CHECK-NOT: vector.store
// CHECK-NOT: gpu.barrier
// The producer: thread 256 issues every copy, a's box 128 x 64 x 2 bytes.
// CHECK: nvvm.setmaxregister decrease 40
// CHECK: %[[PRODUCER:.*]] = arith.cmpi eq, %thread_id_x, %c256
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c16384_i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c8192_i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global
// CHECK: } {pallas.consumer}

module {
  func.func @pipelined_wgmma_ws2(%arg0: memref<?x?xbf16, strided<[?, 1]>>, %arg1: memref<?x?xbf16, strided<[?, 1]>>, %arg2: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.approx_math, pallas.grid = ["cdiv(m, 128)", "cdiv(n, 64)", "cdiv(k, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.max_registers = 168 : i64, pallas.operand_names = ["a", "b", "d", "acc"], pallas.threads = 256 : i64} {
    %0 = pallas.scratch accumulator {name = "acc"} : memref<128x64xf32>
    %c1 = arith.constant 1 : index
    %dim = memref.dim %arg0, %c1 : memref<?x?xbf16, strided<[?, 1]>>
    %c64 = arith.constant 64 : index
    %1 = arith.ceildivsi %dim, %c64 : index
    %c0 = arith.constant 0 : index
    %c1_0 = arith.constant 1 : index
    scf.for %arg3 = %c0 to %1 step %c1_0 {
      %2 = pallas.program_id 0
      %3 = pallas.program_id 1
      %4 = pallas.block %arg0[%2, %arg3] {block_shape = array<i64: 128, 64>, buffers = 3 : i64, name = "a", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <128x64xbf16>
      %5 = pallas.block %arg1[%3, %arg3] {block_shape = array<i64: 64, 64>, buffers = 3 : i64, name = "b", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %6 = pallas.block %arg2[%2, %3] {block_shape = array<i64: 128, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <128x64xf32>
      %c0_1 = arith.constant 0 : index
      %c0_2 = arith.constant 0 : index
      %7 = pallas.block %0[%c0_1, %c0_2] {block_shape = array<i64: 128, 64>, squeezed = array<i1: false, false>} : memref<128x64xf32> -> <128x64xf32>
      %c0_3 = arith.constant 0 : index
      %8 = arith.cmpi eq, %arg3, %c0_3 : index
      scf.if %8 {
        %cst = arith.constant 0.000000e+00 : f32
        %11 = vector.broadcast %cst : f32 to vector<128x64xf32>
        pallas.store %11, %7[[0, 0]] : vector<128x64xf32>, <128x64xf32>
      }
      pallas.wgmma %7, %4, %5 {transpose_b} : <128x64xf32>, !pallas.ref<128x64xbf16>, <64x64xbf16>
      pallas.wgmma_wait 1
      %c1_4 = arith.constant 1 : index
      %9 = arith.subi %1, %c1_4 : index
      %10 = arith.cmpi eq, %arg3, %9 : index
      scf.if %10 {
        %11 = pallas.load %7[[0, 0]] [[128, 64]] : <128x64xf32> -> vector<128x64xf32>
        pallas.store %11, %6[[0, 0]] : vector<128x64xf32>, <128x64xf32>
      }
    } {pallas.delay_release = 1 : i64, pallas.pipeline, pallas.warp_specialized = array<i64: 40, 168, 232>}
    return
  }
}

module {
}

// The consumers of a warp-specialized pipeline release step k - 1's stage
// buffers (delay_release(1)) right after the body's wgmma_wait(1), which
// follows its wgmma: every step starts a multiply before that wait, so step
// k - 1's is done. The release then comes before a last-step epilogue left
// in the loop (as a persistent program's is: here --pallas-peel-last-step
// does not run), so the producer refills the buffer while the epilogue
// runs. (pipelined_wgmma_ws of warp-specialized.mlir, not peeled.)
//
// RUN: pallas-opt %s --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s

// CHECK-LABEL: gpu.func @pipelined_wgmma_ws
// CHECK: nvvm.setmaxregister increase 232
// CHECK: scf.for %[[K:.*]] = %c0 to
// CHECK-COUNT-4: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK-NEXT: %[[STEP:.*]] = arith.subi %[[K]], %c0
// CHECK: %[[LATE:.*]] = arith.cmpi uge, %[[STEP]], %c1
// CHECK-NEXT: scf.if %[[LATE]] {
// CHECK: nvvm.mbarrier.arrive
// CHECK: }
// The epilogue follows, and nothing is released after it.
// CHECK: scf.if
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: vector.store %{{.*}} : memref<?x?xf32, strided<[?, 1]>>, vector<2xf32>
// CHECK-NOT: nvvm.mbarrier.arrive
// CHECK: nvvm.setmaxregister decrease 40

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


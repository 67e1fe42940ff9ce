// wgmma reading b as [K, N] in place, N-major (kernel_specs/matmul.cc's
// matmul and gemm): b's [64, 128] block is staged with swizzle 128 and
// tiling [64, 64] (Pallas' TilingTransform), so each stage buffer holds two
// TMA boxes of [64 K rows, 64 N columns], the second 8192 bytes after the
// first, and wgmma reads it with imm-trans-b = 1 (B layout `row`).
//
// RUN: pallas-opt %s --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s

// Each stage of b is two copies on one barrier (16384 bytes expected): the
// second at byte 8192 of the stage, 64 columns further in the array.
// CHECK-LABEL: gpu.func @wgmma_n_major
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c16384_i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg4, %{{.*}}, box[%[[X:.*]], %[[Y:.*]]]
// CHECK: arith.addi %{{.*}}, %c8192
// CHECK: %[[X64:.*]] = arith.addi %[[X]], %c64_i32
// CHECK-NEXT: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg4, %{{.*}}, box[%[[X64]], %[[Y]]]
//
// Four wgmmas a step (K 64 in steps of 16). b's descriptor: 128-byte
// swizzle (bit 62), SBO 1024 bytes (8 rows of K: 0x40 in bits 32-45), LBO
// 8192 bytes (the next tile of 64 columns: 0x200 in bits 16-29), i.e.
// 0x4000_0040_0200_0000 = 4611686293338849280 with the start in bits 0-13;
// instruction k starts 16 k rows of 128 bytes further. a (K-major) has LBO 1
// (unused) and steps 32 bytes of K: 0x4000_0040_0001_0000.
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: %[[B0:.*]] = arith.addi %[[BBASE:[0-9]+]], %c0{{[_0-9]*}} : index
// CHECK-NEXT: arith.index_cast %[[B0]]
// CHECK-NEXT: arith.constant 4 : i64
// CHECK-NEXT: arith.constant 262143 : i64
// CHECK-NEXT: arith.andi
// CHECK-NEXT: arith.shrui
// CHECK-NEXT: arith.constant 4611686293338849280 : i64
// CHECK: %[[A0:.*]] = arith.addi %[[ABASE:[0-9]+]], %c0{{[_0-9]*}} : index
// CHECK-NEXT: arith.index_cast %[[A0]]
// CHECK-NEXT: arith.constant 4 : i64
// CHECK-NEXT: arith.constant 262143 : i64
// CHECK-NEXT: arith.andi
// CHECK-NEXT: arith.shrui
// CHECK-NEXT: arith.constant 4611686293305360384 : i64
// CHECK: nvvm.wgmma.mma_async {{.*}}, A[<bf16>, <one>, <row>], B[<bf16>, <one>, <row>]
// CHECK: arith.addi %[[BBASE]], %c2048 : index
// CHECK: arith.addi %[[ABASE]], %c32 : index
// CHECK: nvvm.wgmma.mma_async {{.*}}, B[<bf16>, <one>, <row>]
// CHECK: arith.addi %[[BBASE]], %c4096 : index
// CHECK: arith.addi %[[ABASE]], %c64{{.*}} : index
// CHECK: nvvm.wgmma.mma_async
// CHECK: arith.addi %[[BBASE]], %c6144 : index
// CHECK: arith.addi %[[ABASE]], %c96 : index
// CHECK: nvvm.wgmma.mma_async
// CHECK-NOT: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned

module {
  func.func @wgmma_n_major(%arg0: memref<?x?xbf16, strided<[?, 1]>>, %arg1: memref<?x?xbf16, strided<[?, 1]>>, %arg2: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.approx_math, pallas.grid = ["cdiv(m, 64)", "cdiv(n, 128)", "cdiv(k, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.operand_names = ["a", "b", "d", "acc"], pallas.threads = 128 : i64} {
    %0 = pallas.scratch accumulator {name = "acc"} : memref<64x128xf32>
    %c1 = arith.constant 1 : index
    %dim = memref.dim %arg0, %c1 : memref<?x?xbf16, strided<[?, 1]>>
    %c64 = arith.constant 64 : index
    %1 = arith.ceildivsi %dim, %c64 : index
    %c0 = arith.constant 0 : index
    scf.for %arg3 = %c0 to %1 step %c1 {
      %2 = pallas.program_id 0
      %3 = pallas.program_id 1
      %4 = pallas.block %arg0[%2, %arg3] {block_shape = array<i64: 64, 64>, buffers = 2 : i64, name = "a", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %5 = pallas.block %arg1[%arg3, %3] {block_shape = array<i64: 64, 128>, buffers = 2 : i64, name = "b", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, tiling = array<i64: 64, 64>} : memref<?x?xbf16, strided<[?, 1]>> -> <64x128xbf16>
      %6 = pallas.block %arg2[%2, %3] {block_shape = array<i64: 64, 128>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x128xf32>
      %7 = pallas.block %0[%c0, %c0] {block_shape = array<i64: 64, 128>, squeezed = array<i1: false, false>} : memref<64x128xf32> -> <64x128xf32>
      %8 = arith.cmpi eq, %arg3, %c0 : index
      scf.if %8 {
        %cst = arith.constant 0.000000e+00 : f32
        %11 = vector.broadcast %cst : f32 to vector<64x128xf32>
        pallas.store %11, %7[[0, 0]] : vector<64x128xf32>, <64x128xf32>
      }
      pallas.wgmma %7, %4, %5 : <64x128xf32>, !pallas.ref<64x64xbf16>, <64x128xbf16>
      pallas.wgmma_wait 0
      %9 = arith.subi %1, %c1 : index
      %10 = arith.cmpi eq, %arg3, %9 : index
      scf.if %10 {
        %11 = pallas.load %7[[0, 0]] [[64, 128]] : <64x128xf32> -> vector<64x128xf32>
        pallas.store %11, %6[[0, 0]] : vector<64x128xf32>, <64x128xf32>
      }
    } {pallas.pipeline}
    return
  }
}

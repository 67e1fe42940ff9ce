// wgmma reading operand a transposed, in place M-major (kernel_specs/matmul.cc's
// split-K with a [K, N] B, whose [64 K, 128 N] block is wgmma's a through a
// transposed view): a's [64 K, 64 M] block is staged with swizzle 128 and
// tiling [8, 64] (tiles of 8 K rows, one swizzle span of M wide), and wgmma
// reads it with imm-trans-a = 1 (A layout `col`), as it reads a [K, N] b.
//
// RUN: pallas-opt %s --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s

// Four wgmmas a step (K 64 in steps of 16). b (K-major) has LBO 1 (unused)
// and steps 32 bytes of K: 0x4000_0040_0001_0000. a's descriptor: 128-byte
// swizzle (bit 62), SBO 1024 bytes (a whole row of tiles: 8 K rows x 128
// bytes x 1 tile of M; 0x40 in bits 32-45), LBO 1024 bytes (from one tile of
// 64 M columns to the next: 0x40 in bits 16-29), i.e. 0x4000_0040_0040_0000
// = 4611686293309489152 with the start in bits 0-13; instruction k starts 2
// tiles of 8 K rows (2048 bytes) further.
// CHECK-LABEL: gpu.func @wgmma_m_major_a
// CHECK: nvvm.wgmma.fence.aligned
// CHECK: %[[B0:.*]] = arith.addi %[[BBASE:[0-9]+]], %c0{{[_0-9]*}} : index
// CHECK-NEXT: arith.index_cast %[[B0]]
// CHECK-NEXT: arith.constant 4 : i64
// CHECK-NEXT: arith.constant 262143 : i64
// CHECK-NEXT: arith.andi
// CHECK-NEXT: arith.shrui
// CHECK-NEXT: arith.constant 4611686293305360384 : i64
// CHECK: %[[A0:.*]] = arith.addi %[[ABASE:[0-9]+]], %c0{{[_0-9]*}} : index
// CHECK-NEXT: arith.index_cast %[[A0]]
// CHECK-NEXT: arith.constant 4 : i64
// CHECK-NEXT: arith.constant 262143 : i64
// CHECK-NEXT: arith.andi
// CHECK-NEXT: arith.shrui
// CHECK-NEXT: arith.constant 4611686293309489152 : i64
// CHECK: nvvm.wgmma.mma_async {{.*}}, A[<bf16>, <one>, <col>], B[<bf16>, <one>, <col>]
// CHECK: arith.addi %[[BBASE]], %c32 : index
// CHECK: arith.addi %[[ABASE]], %c2048 : index
// CHECK: nvvm.wgmma.mma_async {{.*}}, A[<bf16>, <one>, <col>]
// CHECK: arith.addi %[[BBASE]], %c64{{.*}} : index
// CHECK: arith.addi %[[ABASE]], %c4096 : index
// CHECK: nvvm.wgmma.mma_async
// CHECK: arith.addi %[[BBASE]], %c96 : index
// CHECK: arith.addi %[[ABASE]], %c6144 : index
// CHECK: nvvm.wgmma.mma_async
// CHECK-NOT: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned

module {
  func.func @wgmma_m_major_a(%arg0: memref<?x?xbf16, strided<[?, 1]>>, %arg1: memref<?x?xbf16, strided<[?, 1]>>, %arg2: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.approx_math, pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)", "cdiv(k, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.operand_names = ["a", "b", "d", "acc"], pallas.threads = 128 : i64} {
    %0 = pallas.scratch accumulator {name = "acc"} : memref<64x64xf32>
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %dim = memref.dim %arg0, %c0 : memref<?x?xbf16, strided<[?, 1]>>
    %c64 = arith.constant 64 : index
    %1 = arith.ceildivsi %dim, %c64 : index
    scf.for %arg3 = %c0 to %1 step %c1 {
      %2 = pallas.program_id 0
      %3 = pallas.program_id 1
      %4 = pallas.block %arg0[%arg3, %2] {block_shape = array<i64: 64, 64>, buffers = 2 : i64, name = "a", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, tiling = array<i64: 8, 64>} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %5 = pallas.block %arg1[%3, %arg3] {block_shape = array<i64: 64, 64>, buffers = 2 : i64, name = "b", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %6 = pallas.block %arg2[%2, %3] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
      %7 = pallas.block %0[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
      %8 = arith.cmpi eq, %arg3, %c0 : index
      scf.if %8 {
        %cst = arith.constant 0.000000e+00 : f32
        %11 = vector.broadcast %cst : f32 to vector<64x64xf32>
        pallas.store %11, %7[[0, 0]] : vector<64x64xf32>, <64x64xf32>
      }
      pallas.wgmma %7, %4, %5 {transpose_a, transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
      pallas.wgmma_wait 0
      %9 = arith.subi %1, %c1 : index
      %10 = arith.cmpi eq, %arg3, %9 : index
      scf.if %10 {
        %11 = pallas.load %7[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
        pallas.store %11, %6[[0, 0]] : vector<64x64xf32>, <64x64xf32>
      }
    } {pallas.pipeline}
    return
  }
}

// wgmma with operand a in registers (Pallas' wgmma with an array `a`):
// attention's P @ V in miniature. s = x @ w1^T is multiplied from shared
// memory; p = bf16(s), a value in the WGMMA accumulator layout, is the
// second multiply's a: each thread passes its registers, 4 words per 16 of
// K, with no layout conversion and no shared-memory round trip.
//
// RUN: pallas-opt %s --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s

// CHECK-LABEL: gpu.func @register_a
// CHECK-NOT: pallas.convert_layout
// s starts zero (flagged): its first product is one branch, scale-d 1 or 0.
// CHECK-COUNT-4: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: } else {
// CHECK-COUNT-4: nvvm.wgmma.mma_async
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// p's 32 bf16 registers as 16 words, fenced like the accumulator.
// CHECK: %[[WORDS:.*]] = vector.bitcast %{{.*}} : vector<32xbf16> to vector<16xi32>
// CHECK: llvm.inline_asm has_side_effects {{.*}}"// pallas: fence wgmma operands", "=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,=r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15"
// CHECK: nvvm.wgmma.fence.aligned
// K 0..15: words 0-3; the accumulator's 32 registers are $0-$31 (tied),
// A $64-$67, b's descriptor $68, read N-major (imm-trans-b 1); scale-d is
// $69, 0 while acc is flagged zero (its program's first product).
// CHECK: %[[SCALE:.*]] = arith.extui %{{.*}} : i1 to i32
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att {pallas.wgmma_register_a = array<i64: 64, 1, 1>}
// CHECK-SAME: "{\0A.reg .pred p;\0Asetp.ne.b32 p, $69, 0;\0Awgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {$0, $1, {{.*}}, $31}, {$64, $65, $66, $67}, $68, p, 1, 1, 1;\0A}"
// CHECK-SAME: %[[SCALE]] :
// CHECK-COUNT-3: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK-NOT: wgmma.mma_async.sync.aligned
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0

module {
  func.func @register_a(%x: memref<?x?xbf16, strided<[?, 1]>>, %w1: memref<?x?xbf16, strided<[?, 1]>>, %w2: memref<?x?xbf16, strided<[?, 1]>>, %d: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.operand_names = ["x", "w1", "w2", "d", "s", "acc"], pallas.threads = 128 : i64} {
    %s = pallas.scratch accumulator {name = "s"} : memref<64x64xf32>
    %acc = pallas.scratch accumulator {name = "acc"} : memref<64x64xf32>
    %i = pallas.program_id 0
    %j = pallas.program_id 1
    %c0 = arith.constant 0 : index
    %xb = pallas.block %x[%i, %c0] {block_shape = array<i64: 64, 64>, name = "x", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %w1b = pallas.block %w1[%c0, %c0] {block_shape = array<i64: 64, 64>, name = "w1", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %w2b = pallas.block %w2[%c0, %j] {block_shape = array<i64: 64, 64>, name = "w2", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, tiling = array<i64: 64, 64>} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %db = pallas.block %d[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
    %sb = pallas.block %s[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %accb = pallas.block %acc[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %zeros = vector.broadcast %cst : f32 to vector<64x64xf32>
    pallas.store %zeros, %sb[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    pallas.store %zeros, %accb[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    pallas.wgmma %sb, %xb, %w1b {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
    %sv = pallas.load %sb[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
    %p = arith.truncf %sv : vector<64x64xf32> to vector<64x64xbf16>
    pallas.wgmma %accb, %p, %w2b : <64x64xf32>, vector<64x64xbf16>, <64x64xbf16>
    pallas.wgmma_wait 0
    %o = pallas.load %accb[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
    pallas.store %o, %db[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    return
  }
}

// Pallas' pipelined wgmma (tests/kernels/features.cc, pipelined_wgmma):
// d = a @ b^T over a K axis pipelined in 3 stage buffers with
// delay_release(1); each step starts a wgmma on the staged tiles and leaves
// it in flight (wgmma_wait(1)).
//
// RUN: pallas-opt %s --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s --check-prefix=WGMMA
// RUN: pallas-opt %s --pallas-expand-wgmma | FileCheck %s --check-prefix=EXPAND
// RUN: pallas-opt %s --pallas-peel-last-step | FileCheck %s --check-prefix=PEEL

// sm_90a. Each step: zeroing the accumulator (step 0) only flags it zero
// (an i1 beside its registers: no wait, no register written); the step waits
// for its two tiles, fences the accumulator registers and, in one branch
// each way, issues 4 wgmmas (K 64 in steps of 16) on descriptors of the
// stage buffers and commits them as one group: where the accumulator is
// flagged zero the first takes scale-d 0 (acc = a @ b) and nothing reads
// its registers. Then the step waits until at most that group is in flight.
// WGMMA-LABEL: gpu.func @pipelined_wgmma
// WGMMA: scf.for %[[K:.*]] = %[[LO:.*]] to
// WGMMA: scf.if
// WGMMA-NEXT: %[[ZERO:.*]] = llvm.mlir.constant(true) : i1
// WGMMA-NEXT: llvm.store %[[ZERO]], %[[ISZERO:.*]] : i1, !llvm.ptr
// WGMMA-NOT: nvvm.wgmma.wait
// WGMMA: nvvm.mbarrier.try_wait.parity
// WGMMA: nvvm.mbarrier.try_wait.parity
// The accumulator's registers pass through an empty asm (fenceOperands)
// before wgmma.fence and after a wait, so LLVM moves no access across them.
// WGMMA: llvm.load
// WGMMA: llvm.inline_asm has_side_effects {{.*}}"// pallas: fence wgmma operands"
// WGMMA: scf.if %{{.*}} -> (vector<32xf32>) {
// WGMMA-NEXT: nvvm.wgmma.fence.aligned
// WGMMA-COUNT-4: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>]
// WGMMA: nvvm.wgmma.commit.group.sync.aligned
// WGMMA: } else {
// WGMMA-NEXT: nvvm.wgmma.fence.aligned
// WGMMA: nvvm.wgmma.mma_async {{.*}} D[<f32>, <zero>]
// WGMMA-COUNT-3: nvvm.wgmma.mma_async {{.*}} D[<f32>, <one>]
// WGMMA: nvvm.wgmma.commit.group.sync.aligned
// WGMMA: llvm.store
// WGMMA-NEXT: llvm.mlir.constant(false) : i1
// WGMMA-NEXT: llvm.store %{{.*}}, %[[ISZERO]] : i1, !llvm.ptr
// WGMMA-NEXT: nvvm.wgmma.wait.group.sync.aligned 1
// The last step waits for every multiply and reads the accumulator (zeros
// while it is flagged) into new registers: a copy, so that nothing in the
// loop writes registers a wgmma in flight writes.
// WGMMA: scf.if
// WGMMA-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// WGMMA-NEXT: llvm.load
// WGMMA: arith.select
// WGMMA: llvm.inline_asm has_side_effects {{.*}}"// pallas: copy wgmma operands{{.*}}mov.f32 $0, $32;
// delay_release(1): after the release barrier, step k refills the buffer of
// step k - 1, slot (k - lo + 2) % 3, with step k + 2, once k - lo >= 1.
// WGMMA: gpu.barrier
// WGMMA: %[[NEXT:.*]] = arith.addi %[[K]], %c2
// WGMMA: %[[I:.*]] = arith.subi %[[K]], %[[LO]]
// WGMMA: %[[I32:.*]] = arith.index_castui %[[I]] : index to i32
// WGMMA: %[[I2:.*]] = arith.addi %[[I32]], %c2_i32 : i32
// WGMMA: %[[SLOT:.*]] = arith.remui %[[I2]], %c3_i32{{.*}} : i32
// WGMMA: arith.cmpi uge, %[[I]], %c1
// WGMMA: nvvm.mbarrier.arrive.expect_tx
// WGMMA: nvvm.cp.async.bulk.tensor.shared.cluster.global

// Targets whose multiplies complete when issued (host, sm_80): a load of
// each ref, a dot into the accumulator and its store; nothing to wait for.
// EXPAND-LABEL: func.func @pipelined_wgmma
// EXPAND: %[[A:.*]] = pallas.load {{.*}} : <64x64xbf16> -> vector<64x64xbf16>
// EXPAND-NEXT: %[[B:.*]] = pallas.load {{.*}} : <64x64xbf16> -> vector<64x64xbf16>
// EXPAND-NEXT: %[[C:.*]] = pallas.load %[[ACC:[0-9]+]]{{.*}} : <64x64xf32> -> vector<64x64xf32>
// EXPAND-NEXT: %[[D:.*]] = pallas.dot %[[A]], %[[B]], %[[C]] {transpose_b}
// EXPAND-NEXT: pallas.store %[[D]], %[[ACC]]
// EXPAND-NOT: pallas.wgmma

// The codegen's GPU pipeline first moves the last step's epilogue after the
// loop (pallas-peel-last-step): in the loop, ptxas would complete every
// wgmma before the next step (info C7517) to let the epilogue's branch read
// the registers. The epilogue's blocks (loop-invariant) are rebuilt there.
// PEEL-LABEL: func.func @pipelined_wgmma
// PEEL: scf.for %[[K:.*]] = %[[LO:.*]] to %[[HI:[^ ]*]] step
// PEEL: pallas.wgmma_wait 1
// PEEL-NOT: pallas.store
// PEEL: } {pallas.delay_release = 1 : i64, pallas.pipeline}
// PEEL-NEXT: %[[RAN:.*]] = arith.cmpi slt, %[[LO]], %[[HI]]
// PEEL-NEXT: scf.if %[[RAN]] {
// PEEL: pallas.block %arg2
// PEEL: %[[ACC:.*]] = pallas.load
// PEEL-NEXT: pallas.store %[[ACC]]

module {
  func.func @pipelined_wgmma(%arg0: memref<?x?xbf16, strided<[?, 1]>>, %arg1: memref<?x?xbf16, strided<[?, 1]>>, %arg2: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.approx_math, pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)", "cdiv(k, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.operand_names = ["a", "b", "d", "acc"], pallas.threads = 128 : i64} {
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
    } {pallas.delay_release = 1 : i64, pallas.pipeline}
    return
  }
}

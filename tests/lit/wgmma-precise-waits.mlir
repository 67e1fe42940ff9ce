// An accumulator access waits only for the multiplies that write it
// (pendingAllowed in MatmulRules.cpp): wgmma groups complete in commit
// order, so reading s while o's later multiply runs waits for all but the
// newest group. FlashAttention-3's overlap in miniature: s = x @ w1^T and
// o += p @ w2 are both started, the softmax-like work reads s (wait_group 1)
// while o's multiply runs, then o is read (wait_group 0) and written back
// (no wait: its multiply is known complete). The wait for o follows work
// meant to overlap its multiply, so it is pinned there (emitPinnedWait: a
// basic block of its own, which ptxas does not hoist it out of).
//
// RUN: pallas-opt %s --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s

// CHECK-LABEL: gpu.func @overlap
// s's multiply (from shared memory), then o's (a in registers): two groups.
// Their results go into the accumulators' registers unmarked; o.store's value
// is marked pallas.accumulator_store (the emulator checks it).
// CHECK-NOT: pallas.accumulator_store
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: nvvm.wgmma.wait.group
// s.load, right after the multiplies: o's may stay in flight (not pinned:
// no work to keep above it).
// CHECK: nvvm.wgmma.wait.group.sync.aligned 1
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: math.exp2
// o.load: every multiply done, pinned below the exp2.
// CHECK: llvm.inline_asm has_side_effects asm_dialect = att {pallas.wgmma_wait_pinned = 0 : i32}
// CHECK-SAME: "{\0A.reg .pred p;\0A.reg .b32 n;\0Amov.u32 n, %nctaid.x;\0Asetp.eq.u32 p, n, 0;\0A@p bra.uni PIN_SKIP;\0Awgmma.wait_group.sync.aligned 0;\0Abra.uni PIN_DONE;\0APIN_SKIP:\0Awgmma.wait_group.sync.aligned 0;\0APIN_DONE:\0A}"
// o.store after it, and d's store: no further wait.
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: llvm.store %{{.*}}, %{{.*}} {pallas.accumulator_store} : vector<32xf32>, !llvm.ptr
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: gpu.return

// CHECK-LABEL: gpu.func @unknown_before_block
// o's multiply in the previous step of the loop is not in the access's block:
// o.load, the step's first op, waits for every multiply; o.store after it
// needs no wait of its own. After the loop (a region holding a multiply),
// o.load waits for all again.
// CHECK: scf.for
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: }
// CHECK-NEXT: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: gpu.return

// CHECK-LABEL: gpu.func @explicit_wait
// wgmma_wait 0 after both: the loads need no wait of their own.
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: gpu.return

// CHECK-LABEL: gpu.func @region_and_zero_store
// s's multiply, o's, then a `when` holding another of o's: the groups after
// s's are not known (one or two), so s.load waits for all (0, not 1),
// unpinned. The zero store to o before them only sets o's flag: it neither
// waits nor counts as one.
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: scf.if
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK-NOT: pallas.wgmma_wait_pinned
// CHECK: gpu.return

// CHECK-LABEL: gpu.func @zero_store_is_no_wait
// A zero store to o (its flag only), s's multiply, then o.load: o's multiply,
// if any, was before the block, so the load waits for all (0). Were the zero
// store taken for an access that waited for all, the load would not wait.
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: nvvm.wgmma.wait.group
// CHECK: nvvm.wgmma.commit.group.sync.aligned
// CHECK-NOT: pallas.wgmma_wait_pinned
// CHECK: nvvm.wgmma.wait.group.sync.aligned 0
// CHECK: gpu.return

module {
  func.func @overlap(%x: memref<?x?xbf16, strided<[?, 1]>>, %w1: memref<?x?xbf16, strided<[?, 1]>>, %w2: memref<?x?xbf16, strided<[?, 1]>>, %d: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.operand_names = ["x", "w1", "w2", "d", "s", "o"], pallas.threads = 128 : i64} {
    %s = pallas.scratch accumulator {name = "s"} : memref<64x64xf32>
    %o = pallas.scratch accumulator {name = "o"} : memref<64x64xf32>
    %i = pallas.program_id 0
    %j = pallas.program_id 1
    %c0 = arith.constant 0 : index
    %xb = pallas.block %x[%i, %c0] {block_shape = array<i64: 64, 64>, name = "x", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %w1b = pallas.block %w1[%c0, %c0] {block_shape = array<i64: 64, 64>, name = "w1", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %w2b = pallas.block %w2[%c0, %j] {block_shape = array<i64: 64, 64>, name = "w2", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, tiling = array<i64: 64, 64>} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %db = pallas.block %d[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
    %sb = pallas.block %s[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %ob = pallas.block %o[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %one = arith.constant 1.000000e+00 : bf16
    %p = vector.broadcast %one : bf16 to vector<64x64xbf16>
    pallas.wgmma %sb, %xb, %w1b {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
    pallas.wgmma %ob, %p, %w2b : <64x64xf32>, vector<64x64xbf16>, <64x64xbf16>
    %sv = pallas.load %sb[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
    %e = math.exp2 %sv : vector<64x64xf32>
    %ov = pallas.load %ob[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
    %scaled = arith.mulf %ov, %e : vector<64x64xf32>
    pallas.store %scaled, %ob[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    pallas.store %scaled, %db[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    return
  }

  func.func @unknown_before_block(%x: memref<?x?xbf16, strided<[?, 1]>>, %w2: memref<?x?xbf16, strided<[?, 1]>>, %d: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.operand_names = ["x", "w2", "d", "o"], pallas.threads = 128 : i64} {
    %o = pallas.scratch accumulator {name = "o"} : memref<64x64xf32>
    %i = pallas.program_id 0
    %j = pallas.program_id 1
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %w2b = pallas.block %w2[%c0, %j] {block_shape = array<i64: 64, 64>, name = "w2", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, tiling = array<i64: 64, 64>} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %db = pallas.block %d[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
    %ob = pallas.block %o[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %one = arith.constant 1.000000e+00 : bf16
    %p = vector.broadcast %one : bf16 to vector<64x64xbf16>
    scf.for %k = %c0 to %c4 step %c1 {
      %ov = pallas.load %ob[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
      %twice = arith.addf %ov, %ov : vector<64x64xf32>
      pallas.store %twice, %ob[[0, 0]] : vector<64x64xf32>, <64x64xf32>
      pallas.wgmma %ob, %p, %w2b : <64x64xf32>, vector<64x64xbf16>, <64x64xbf16>
    }
    %ov = pallas.load %ob[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
    pallas.store %ov, %db[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    return
  }

  func.func @explicit_wait(%x: memref<?x?xbf16, strided<[?, 1]>>, %w1: memref<?x?xbf16, strided<[?, 1]>>, %d: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.operand_names = ["x", "w1", "d", "s", "o"], pallas.threads = 128 : i64} {
    %s = pallas.scratch accumulator {name = "s"} : memref<64x64xf32>
    %o = pallas.scratch accumulator {name = "o"} : memref<64x64xf32>
    %i = pallas.program_id 0
    %j = pallas.program_id 1
    %c0 = arith.constant 0 : index
    %xb = pallas.block %x[%i, %c0] {block_shape = array<i64: 64, 64>, name = "x", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %w1b = pallas.block %w1[%c0, %c0] {block_shape = array<i64: 64, 64>, name = "w1", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %db = pallas.block %d[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
    %sb = pallas.block %s[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %ob = pallas.block %o[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    pallas.wgmma %sb, %xb, %w1b {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
    pallas.wgmma %ob, %xb, %w1b {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
    pallas.wgmma_wait 0
    %sv = pallas.load %sb[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
    %ov = pallas.load %ob[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
    %sum = arith.addf %sv, %ov : vector<64x64xf32>
    pallas.store %sum, %db[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    return
  }
  func.func @region_and_zero_store(%x: memref<?x?xbf16, strided<[?, 1]>>, %w1: memref<?x?xbf16, strided<[?, 1]>>, %d: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.operand_names = ["x", "w1", "d", "s", "o"], pallas.threads = 128 : i64} {
    %s = pallas.scratch accumulator {name = "s"} : memref<64x64xf32>
    %o = pallas.scratch accumulator {name = "o"} : memref<64x64xf32>
    %i = pallas.program_id 0
    %j = pallas.program_id 1
    %c0 = arith.constant 0 : index
    %xb = pallas.block %x[%i, %c0] {block_shape = array<i64: 64, 64>, name = "x", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %w1b = pallas.block %w1[%c0, %c0] {block_shape = array<i64: 64, 64>, name = "w1", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %db = pallas.block %d[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
    %sb = pallas.block %s[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %ob = pallas.block %o[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %zeros = vector.broadcast %cst : f32 to vector<64x64xf32>
    pallas.store %zeros, %ob[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    pallas.wgmma %sb, %xb, %w1b {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
    pallas.wgmma %ob, %xb, %w1b {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
    %first = arith.cmpi eq, %j, %c0 : index
    scf.if %first {
      pallas.wgmma %ob, %xb, %w1b {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
    }
    %sv = pallas.load %sb[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
    pallas.store %sv, %db[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    return
  }
  func.func @zero_store_is_no_wait(%x: memref<?x?xbf16, strided<[?, 1]>>, %w1: memref<?x?xbf16, strided<[?, 1]>>, %d: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.operand_names = ["x", "w1", "d", "s", "o"], pallas.threads = 128 : i64} {
    %s = pallas.scratch accumulator {name = "s"} : memref<64x64xf32>
    %o = pallas.scratch accumulator {name = "o"} : memref<64x64xf32>
    %i = pallas.program_id 0
    %j = pallas.program_id 1
    %c0 = arith.constant 0 : index
    %xb = pallas.block %x[%i, %c0] {block_shape = array<i64: 64, 64>, name = "x", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %w1b = pallas.block %w1[%c0, %c0] {block_shape = array<i64: 64, 64>, name = "w1", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %db = pallas.block %d[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
    %sb = pallas.block %s[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %ob = pallas.block %o[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
    %cst = arith.constant 0.000000e+00 : f32
    %zeros = vector.broadcast %cst : f32 to vector<64x64xf32>
    pallas.store %zeros, %ob[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    pallas.wgmma %sb, %xb, %w1b {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
    %ov = pallas.load %ob[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
    pallas.store %ov, %db[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    return
  }
}

// RUN: pallas-opt %s --split-input-file --verify-diagnostics --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s

// 2048 f32 per program over 128 threads: vec = 4, four runs per thread, each
// a 16-byte load when inside the array and aligned, else masked scalars.
// CHECK: module attributes {gpu.container_module, pallas.shared_align.copy_f32 = 16 : i64, pallas.shared_bytes.copy_f32 = 0 : i64}
// CHECK: gpu.module @pallas_kernels
// CHECK-LABEL: gpu.func @copy_f32
// CHECK-SAME: kernel attributes {known_block_size = array<i32: 128, 1, 1>, nvvm.minctasm = 3 : i32}
// CHECK: %[[TID:.*]] = gpu.thread_id x
// CHECK: %[[BID:.*]] = gpu.block_id x
// CHECK: arith.muli %[[TID]], %c4
// The alignment test: the line start (pointer and offset) and the offset
// along the line, each masked with 15.
// CHECK: memref.extract_aligned_pointer_as_index
// CHECK: arith.andi %{{.*}}, %c15
// CHECK: arith.andi %{{.*}}, %c15
// CHECK: arith.ori
// CHECK: scf.if
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// CHECK: } else {
// CHECK: scf.if
// CHECK: memref.load
// CHECK-COUNT-4: vector.insert_strided_slice %{{.*}}, %{{.*}} {offsets = [{{[0-9]+}}], strides = [1]} : vector<4xf32> into vector<16xf32>
// CHECK: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// CHECK: gpu.return
func.func @copy_f32(%x: memref<?xf32>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<2048xf32>
  %ro = pallas.block %out[%i] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<2048xf32>
  %v = pallas.load %rx[[0]] [[2048]] : !pallas.ref<2048xf32> -> vector<2048xf32>
  %w = math.exp %v : vector<2048xf32>
  pallas.store %w, %ro[[0]] : vector<2048xf32>, !pallas.ref<2048xf32>
  return
}

// -----

// A kernel that moves bf16 uses 8-element runs (16 bytes of bf16) for all its
// blocks, so the f32 values computed from them share the layout: each f32 run
// is two 16-byte accesses. bf16 -> f32 unpacks 32-bit words: the low half
// shifted up, the high half masked, one instruction per element.
// CHECK-LABEL: gpu.func @widen
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// CHECK: %[[W:.*]] = vector.bitcast %{{.*}} : vector<16xbf16> to vector<8xi32>
// CHECK-DAG: arith.shli %[[W]], %{{.*}} : vector<8xi32>
// CHECK-DAG: arith.andi %[[W]], %{{.*}} : vector<8xi32>
// CHECK: vector.shuffle %{{.*}}, %{{.*}} [0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15] : vector<8xf32>, vector<8xf32>
// CHECK-COUNT-2: vector.store %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
func.func @widen(%x: memref<?xbf16>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xbf16> -> !pallas.ref<2048xbf16>
  %ro = pallas.block %out[%i] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<2048xf32>
  %v = pallas.load %rx[[0]] [[2048]] : !pallas.ref<2048xbf16> -> vector<2048xbf16>
  %w = arith.extf %v : vector<2048xbf16> to vector<2048xf32>
  pallas.store %w, %ro[[0]] : vector<2048xf32>, !pallas.ref<2048xf32>
  return
}

// -----

// A slice the spec knows is inside the row (inside_last_dim: a full chunk)
// tests only alignment before its 16-byte loads, not the row end; its
// element-by-element path for misaligned rows still tests each element
// against the room left in the row.
// CHECK-LABEL: gpu.func @inside_row
// CHECK-NOT: arith.cmpi ule
// CHECK: arith.ori
// CHECK-NEXT: %[[ALIGNED:.*]] = arith.cmpi eq
// CHECK-NEXT: %[[FAST:.*]] = arith.andi %true, %[[ALIGNED]]
// CHECK-NEXT: scf.if %[[FAST]]
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// CHECK: } else {
// CHECK: arith.subi
// CHECK: arith.cmpi slt
func.func @inside_row(%x: memref<?xf32>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<2048xf32>
  %ro = pallas.block %out[%i] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<2048xf32>
  %v = pallas.load %rx[[0]] [[2048]] {inside_last_dim} : !pallas.ref<2048xf32> -> vector<2048xf32>
  pallas.store %v, %ro[[0]] : vector<2048xf32>, !pallas.ref<2048xf32>
  return
}

// -----

// With half-precision inputs only (pallas.approx_math), exp(a - b) is one
// FMA with log2(e) folded in and one ex2.approx.ftz per element; a plain
// exp(x) is a multiply and the ex2; log(x) is lg2.approx.ftz times ln(2);
// a / b is a times rcp.approx.ftz(b).
// CHECK-LABEL: gpu.func @approx_exp
// CHECK: %[[NEG:.*]] = arith.negf %{{.*}} fastmath<contract>
// CHECK: %[[S:.*]] = math.fma %{{.*}}, %{{.*}}, %[[NEG]] fastmath<contract> : vector<16xf32>
// CHECK-COUNT-16: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK: arith.mulf %{{.*}}, %{{.*}} fastmath<contract> : vector<16xf32>
// CHECK-COUNT-16: llvm.call_intrinsic "llvm.nvvm.ex2.approx.ftz.f32"
// CHECK-COUNT-16: llvm.call_intrinsic "llvm.nvvm.lg2.approx.ftz.f"
// CHECK: arith.mulf %{{.*}}, %{{.*}} fastmath<contract> : vector<16xf32>
// CHECK-COUNT-16: llvm.call_intrinsic "llvm.nvvm.rcp.approx.ftz.f"
// CHECK: arith.mulf %{{.*}}, %{{.*}} fastmath<contract> : vector<16xf32>
// CHECK-NOT: math.exp
// CHECK-NOT: math.log
// CHECK-NOT: arith.divf
func.func @approx_exp(%x: memref<?xbf16>, %out: memref<?xbf16>) attributes {pallas.kernel, pallas.approx_math, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xbf16> -> !pallas.ref<2048xbf16>
  %ro = pallas.block %out[%i] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xbf16> -> !pallas.ref<2048xbf16>
  %v = pallas.load %rx[[0]] [[2048]] : !pallas.ref<2048xbf16> -> vector<2048xbf16>
  %w = arith.extf %v : vector<2048xbf16> to vector<2048xf32>
  %c = arith.constant dense<1.5> : vector<2048xf32>
  %d = arith.subf %w, %c : vector<2048xf32>
  %e = math.exp %d : vector<2048xf32>
  %f = math.exp %e : vector<2048xf32>
  %g = math.log %f : vector<2048xf32>
  %q = arith.divf %g, %w : vector<2048xf32>
  %y = arith.truncf %q : vector<2048xf32> to vector<2048xbf16>
  pallas.store %y, %ro[[0]] : vector<2048xbf16>, !pallas.ref<2048xbf16>
  return
}

// -----

// expected-error @+1 {{block value of type 'vector<200xf32>' has 200 elements, not a multiple of the 128 threads of a program; the GPU layout needs it}}
func.func @odd_block(%x: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i] {block_shape = array<i64: 200>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<200xf32>
  %v = pallas.load %rx[[0]] [[200]] : !pallas.ref<200xf32> -> vector<200xf32>
  return
}

// -----

// A reduction along the last axis keeps one value per row in every thread
// (replicated): 8 rows of 256 f32 are 64 runs of 4 per row, so a row is two
// warps' worth of lanes: butterflies over 32 lanes, two slots per row. Outside
// any loop the reduction runs once, so its slots are its own and no barrier
// follows their last read.
// CHECK-LABEL: gpu.func @row_sums
// CHECK:         %[[SMEM:.*]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// CHECK:         %[[SLOTS:.*]] = memref.view %[[SMEM]][%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<16xf32, #gpu.address_space<workgroup>>
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK:         memref.store {{.*}}, %[[SLOTS]]
// CHECK:         gpu.barrier
// CHECK:         memref.load %[[SLOTS]]
// CHECK:         vector.insert {{.*}} [7] : f32 into vector<8xf32>
// CHECK-NOT:     gpu.barrier
// CHECK:         gpu.return
func.func @row_sums(%x: memref<?x?xf32, strided<[?, 1]>>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i, %c0] {block_shape = array<i64: 8, 256>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<8x256xf32>
  %ro = pallas.block %out[%i] {block_shape = array<i64: 8>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<8xf32>
  %v = pallas.load %rx[[0, 0]] [[8, 256]] : !pallas.ref<8x256xf32> -> vector<8x256xf32>
  %acc = arith.constant dense<0.0> : vector<8xf32>
  %s = vector.multi_reduction <add>, %v, %acc [1] : vector<8x256xf32> to vector<8xf32>
  pallas.store %s, %ro[[0]] : vector<8xf32>, !pallas.ref<8xf32>
  return
}

// -----

// Reducing a leading axis that keeps the last goes through shared memory:
// every thread stores its runs, thread t folds column t in row order, and
// every thread reads the 256 sums back (replicated).
// CHECK-LABEL: gpu.func @column_sums
// CHECK:         %[[SRC:.*]] = memref.view {{.*}} to memref<2048xf32, #gpu.address_space<workgroup>>
// CHECK:         vector.store %{{.*}}, %[[SRC]]
// CHECK:         gpu.barrier
// CHECK:         %[[SUMS:.*]] = memref.view {{.*}} to memref<256xf32, #gpu.address_space<workgroup>>
// CHECK-COUNT-8: memref.load %[[SRC]]
// CHECK:         memref.store %{{.*}}, %[[SUMS]]
// CHECK:         gpu.barrier
// CHECK:         vector.load %[[SUMS]]{{.*}} vector<256xf32>
func.func @column_sums(%x: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i, %c0] {block_shape = array<i64: 8, 256>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<8x256xf32>
  %v = pallas.load %rx[[0, 0]] [[8, 256]] : !pallas.ref<8x256xf32> -> vector<8x256xf32>
  %acc = arith.constant dense<0.0> : vector<256xf32>
  %s = vector.multi_reduction <add>, %v, %acc [0] : vector<8x256xf32> to vector<256xf32>
  return
}

// -----

// Reducing a leading axis together with the last has no GPU rule: a loud
// error, not wrong code.
func.func @leading_and_last(%x: memref<?x?x?xf32, strided<[?, ?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i, %c0, %c0] {block_shape = array<i64: 2, 4, 256>, squeezed = array<i1: false, false, false>} : memref<?x?x?xf32, strided<[?, ?, 1]>> -> !pallas.ref<2x4x256xf32>
  %v = pallas.load %rx[[0, 0, 0]] [[2, 4, 256]] : !pallas.ref<2x4x256xf32> -> vector<2x4x256xf32>
  %acc = arith.constant dense<0.0> : vector<4xf32>
  // expected-error @+1 {{the GPU reduces either the last axis or leading axes, not dim 0 together with the last; reduce them one after the other}}
  %s = vector.multi_reduction <add>, %v, %acc [0, 2] : vector<2x4x256xf32> to vector<4xf32>
  return
}

// -----

// A loop carry keeps the layout of its init: one that starts replicated (the
// column sums) and is replaced in the body by a strided block gets an explicit
// conversion at the yield (strided to replicated, through shared memory).
// CHECK-LABEL: gpu.func @carry_changes_form
// CHECK:         scf.for
// CHECK:           vector.load {{.*}} : memref<?xf32>, vector<2xf32>
// CHECK:           vector.store {{.*}} : memref<256xf32, #gpu.address_space<workgroup>>, vector<2xf32>
// CHECK:           gpu.barrier
// CHECK:           vector.load {{.*}} : memref<256xf32, #gpu.address_space<workgroup>>, vector<256xf32>
// CHECK:           gpu.barrier
// CHECK:           scf.yield {{.*}} : vector<256xf32>
func.func @carry_changes_form(%x: memref<?x?xf32, strided<[?, 1]>>, %y: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %rx = pallas.block %x[%i, %c0] {block_shape = array<i64: 8, 256>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<8x256xf32>
  %ry = pallas.block %y[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  %v = pallas.load %rx[[0, 0]] [[8, 256]] : !pallas.ref<8x256xf32> -> vector<8x256xf32>
  %acc = arith.constant dense<0.0> : vector<256xf32>
  %cols = vector.multi_reduction <add>, %v, %acc [0] : vector<8x256xf32> to vector<256xf32>
  %r = scf.for %k = %c0 to %c4 step %c1 iter_args(%a = %cols) -> vector<256xf32> {
    %w = pallas.load %ry[[0]] [[256]] : !pallas.ref<256xf32> -> vector<256xf32>
    scf.yield %w : vector<256xf32>
  }
  return
}

// -----

// An op on blocks without a rule is an error naming it and every rule of the
// registry (GpuLowering.h), not a silent clone.
func.func @no_rule(%x: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i, %c0] {block_shape = array<i64: 8, 256>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<8x256xf32>
  %v = pallas.load %rx[[0, 0]] [[8, 256]] : !pallas.ref<8x256xf32> -> vector<8x256xf32>
  // expected-error @+1 {{no GPU lowering rule for vector.extract_strided_slice; known rules: arith.constant, arith.divf, arith.extf, math.exp, math.exp2, math.log, pallas.barrier_arrive, pallas.barrier_wait, pallas.block, pallas.check,}}
  %t = vector.extract_strided_slice %v {offsets = [0, 0], sizes = [4, 256], strides = [1, 1]} : vector<8x256xf32> to vector<4x256xf32>
  return
}

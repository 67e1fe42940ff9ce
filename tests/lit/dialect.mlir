// RUN: pallas-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @roundtrip
// CHECK: pallas.program_id 0
// CHECK: pallas.block %{{.*}}[%{{.*}}, %{{.*}}] {block_shape = array<i64: 1, 256>, squeezed = array<i1: true, false>}
// CHECK-SAME: -> <256xf32>
// CHECK: pallas.load %{{.*}}{{\[}}[64]] {{\[}}[128]] : <256xf32> -> vector<8x128xf32>
// CHECK: pallas.iota 1 : vector<8x128xi32>
// CHECK: pallas.store %{{.*}}, %{{.*}}{{\[}}[0]]
func.func @roundtrip(%x: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %r = pallas.block %x[%i, %c0] {block_shape = array<i64: 1, 256>, squeezed = array<i1: true, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<256xf32>
  %v = pallas.load %r[[64]] [[128]] : !pallas.ref<256xf32> -> vector<8x128xf32>
  %io = pallas.iota 1 : vector<8x128xi32>
  %w = pallas.load %r[[0]] [[256]] : !pallas.ref<256xf32> -> vector<256xf32>
  pallas.store %w, %r[[0]] : vector<256xf32>, !pallas.ref<256xf32>
  return
}

// -----

// Pallas' TilingTransform on a staged block: one TMA copy per tile.
// CHECK-LABEL: func.func @tiled_stage
// CHECK: pallas.block {{.*}}tiling = array<i64: 64, 64>
func.func @tiled_stage(%b: memref<?x?xbf16, strided<[?, 1]>>, %i: index) {
  %r = pallas.block %b[%i, %i] {block_shape = array<i64: 64, 128>, squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, tiling = array<i64: 64, 64>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x128xbf16>
  return
}

// -----

func.func @tile_not_dividing(%b: memref<?x?xbf16, strided<[?, 1]>>, %i: index) {
  // expected-error @+1 {{tile of 48 elements in dim 0 does not divide the block's 64 or is not one TMA box (1 to 256)}}
  %r = pallas.block %b[%i, %i] {block_shape = array<i64: 64, 128>, squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, tiling = array<i64: 48, 64>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x128xbf16>
  return
}

// -----

func.func @tile_wider_than_swizzle(%b: memref<?x?xbf16, strided<[?, 1]>>, %i: index) {
  // expected-error @+1 {{tile rows of 256 bytes are wider than the 128-byte swizzle}}
  %r = pallas.block %b[%i, %i] {block_shape = array<i64: 64, 128>, squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, tiling = array<i64: 64, 128>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x128xbf16>
  return
}

// -----

func.func @tiling_unstaged(%b: memref<?x?xbf16, strided<[?, 1]>>, %i: index) {
  // expected-error @+1 {{tiling is for staged blocks}}
  %r = pallas.block %b[%i, %i] {block_shape = array<i64: 64, 128>, squeezed = array<i1: false, false>, tiling = array<i64: 64, 64>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x128xbf16>
  return
}

// -----

func.func @squeezed_not_one(%x: memref<?x?xf32, strided<[?, 1]>>, %i: index) {
  // expected-error @+1 {{squeezed dim 0 must be 1}}
  %r = pallas.block %x[%i, %i] {block_shape = array<i64: 2, 256>, squeezed = array<i1: true, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<256xf32>
  return
}

// -----

func.func @slice_outside_block(%x: memref<?xf32>, %i: index) {
  %r = pallas.block %x[%i] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  // expected-error @+1 {{slice [200, 328) of dim 0 is outside the block extent 256}}
  %v = pallas.load %r[[200]] [[128]] : !pallas.ref<256xf32> -> vector<128xf32>
  return
}

// -----

func.func @bad_broadcast(%x: memref<?xf32>, %i: index) {
  %r = pallas.block %x[%i] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  // expected-error @+1 {{slice dim 0 of extent 256 cannot broadcast to 128}}
  %v = pallas.load %r[[0]] [[256]] : !pallas.ref<256xf32> -> vector<4x128xf32>
  return
}

// -----

func.func @store_dtype(%x: memref<?xf32>, %i: index, %v: vector<256xf16>) {
  %r = pallas.block %x[%i] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  // expected-error @+1 {{stored element type 'f16' differs from the ref's 'f32'}}
  pallas.store %v, %r[[0]] : vector<256xf16>, !pallas.ref<256xf32>
  return
}

// -----

// CHECK-LABEL: func.func @check_roundtrip
// CHECK: pallas.check %{{.*}}[1] if %{{.*}}, %{{.*}}, %{{.*}} : memref<?xi32>
func.func @check_roundtrip(%errors: memref<?xi32>, %bad: i1, %v: i32) {
  pallas.check %errors[1] if %bad, %v, %v : memref<?xi32>
  return
}

// -----

func.func @check_too_many_values(%errors: memref<?xi32>, %bad: i1, %v: i32) {
  // expected-error @+1 {{has 8 value halves; a check records at most 3 values (6 halves)}}
  pallas.check %errors[0] if %bad, %v, %v, %v, %v, %v, %v, %v, %v : memref<?xi32>
  return
}

// -----

func.func @check_short_record(%errors: memref<4xi32>, %bad: i1) {
  // expected-error @+1 {{error record has 4 int32; it needs 8}}
  pallas.check %errors[0] if %bad : memref<4xi32>
  return
}

// -----

// CHECK-LABEL: func.func @explicit_roundtrip
// CHECK: pallas.run_scoped attributes {swizzles = array<i64: 64>}
// CHECK: ^bb0(%{{.*}}: memref<8x32xf16>, %[[BARS:.*]]: !pallas.barriers<4, arrivals = 2>):
// CHECK: pallas.copy_to_shared
// CHECK: pallas.barrier_arrive %[[BARS]][%{{.*}}] : <4, arrivals = 2>
// CHECK: pallas.barrier_wait
// CHECK: pallas.prefetch %{{.*}}[%{{.*}}, %{{.*}}] {box = array<i64: 8, 32>}
// CHECK: pallas.commit_shared
// CHECK: pallas.copy_to_global %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] {uncommitted}
// CHECK: pallas.commit_copies_to_global
// CHECK: pallas.wait_copies_to_global 1
func.func @explicit_roundtrip(%x: memref<?x?xf16>, %i: index) {
  pallas.run_scoped attributes {swizzles = array<i64: 64>} {
  ^bb0(%buf: memref<8x32xf16>, %bars: !pallas.barriers<4, arrivals = 2>):
    pallas.copy_to_shared %x[%i, %i], %buf, %bars[%i] : memref<?x?xf16>, memref<8x32xf16>, !pallas.barriers<4, arrivals = 2>
    pallas.barrier_arrive %bars[%i] : !pallas.barriers<4, arrivals = 2>
    pallas.barrier_wait %bars[%i] : !pallas.barriers<4, arrivals = 2>
    pallas.prefetch %x[%i, %i] {box = array<i64: 8, 32>} : memref<?x?xf16>
    pallas.commit_shared
    pallas.copy_to_global %buf, %x[%i, %i] {uncommitted} : memref<8x32xf16>, memref<?x?xf16>
    pallas.commit_copies_to_global
    pallas.wait_copies_to_global 1
  }
  return
}

// -----

func.func @explicit_bad_swizzle() {
  // expected-error @+1 {{swizzle 48 is not 0, 32, 64 or 128 bytes}}
  pallas.run_scoped attributes {swizzles = array<i64: 48>} {
  ^bb0(%buf: memref<8x32xf16>):
  }
  return
}

// -----

func.func @explicit_copy_of_other_memory(%x: memref<?x?xf16>, %buf: memref<8x32xf16>, %i: index) {
  pallas.run_scoped attributes {swizzles = array<i64>} {
  ^bb0(%bars: !pallas.barriers<1, arrivals = 1>):
    // expected-error @+1 {{copies a buffer that is not allocated by pallas.run_scoped}}
    pallas.copy_to_shared %x[%i, %i], %buf, %bars[%i] : memref<?x?xf16>, memref<8x32xf16>, !pallas.barriers<1, arrivals = 1>
  }
  return
}

// -----

func.func @explicit_add_of_f16(%x: memref<?x?xf16>, %i: index) {
  pallas.run_scoped attributes {swizzles = array<i64: 64>} {
  ^bb0(%buf: memref<8x32xf16>):
    // expected-error @+1 {{adds 'f16' elements; the add reduction is for f32 and i32}}
    pallas.copy_to_global %buf, %x[%i, %i] {add} : memref<8x32xf16>, memref<?x?xf16>
  }
  return
}

// -----

func.func @explicit_too_many_barriers() {
  // expected-error @+1 {{has an array of 33 barriers; 1 to 32}}
  pallas.run_scoped attributes {swizzles = array<i64>} {
  ^bb0(%bars: !pallas.barriers<33, arrivals = 1>):
  }
  return
}

// -----

// CHECK-LABEL: func.func @wgmma_roundtrip
// CHECK: pallas.wgmma %{{.*}}, %{{.*}}, %{{.*}} {transpose_b} : <128x64xf32>, !pallas.ref<128x64xbf16>, <64x64xbf16>
// CHECK: pallas.wgmma_wait 1
func.func @wgmma_roundtrip(%acc: !pallas.ref<128x64xf32>, %a: !pallas.ref<128x64xbf16>, %b: !pallas.ref<64x64xbf16>) {
  pallas.wgmma %acc, %a, %b {transpose_b} : !pallas.ref<128x64xf32>, !pallas.ref<128x64xbf16>, !pallas.ref<64x64xbf16>
  pallas.wgmma_wait 1
  return
}

// -----

func.func @wgmma_accumulator_shape(%acc: !pallas.ref<64x64xf32>, %a: !pallas.ref<128x64xbf16>, %b: !pallas.ref<64x64xbf16>) {
  // expected-error @+1 {{accumulator '!pallas.ref<64x64xf32>' is not [128, 64]}}
  pallas.wgmma %acc, %a, %b {transpose_b} : !pallas.ref<64x64xf32>, !pallas.ref<128x64xbf16>, !pallas.ref<64x64xbf16>
  return
}

// -----

func.func @wgmma_mixed_dtypes(%acc: !pallas.ref<128x64xf32>, %a: !pallas.ref<128x64xbf16>, %b: !pallas.ref<64x64xf16>) {
  // expected-error @+1 {{operands must both be f16 or both bf16}}
  pallas.wgmma %acc, %a, %b {transpose_b} : !pallas.ref<128x64xf32>, !pallas.ref<128x64xbf16>, !pallas.ref<64x64xf16>
  return
}

// -----

// A cluster peer's view is of a scratch block (shared memory), and read-only.
func.func @peer_of_an_input(%x: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %c0 = arith.constant 0 : index
  %xr = pallas.block %x[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  // expected-error @+1 {{views the block of a scratch operand (shared memory), not this ref}}
  %peer = pallas.cluster_peer %xr, %c0 : !pallas.ref<256xf32>
  return
}

// -----

func.func @store_to_a_peer(%x: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %c0 = arith.constant 0 : index
  %part = pallas.scratch : memref<256xf32>
  %p = pallas.block %part[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<256xf32> -> !pallas.ref<256xf32>
  %peer = pallas.cluster_peer %p, %c0 : !pallas.ref<256xf32>
  %zero = arith.constant dense<0.0> : vector<256xf32>
  // expected-error @+1 {{stores through a cluster peer's view; a peer's scratch is read-only}}
  pallas.store %zero, %peer[[0]] : vector<256xf32>, !pallas.ref<256xf32>
  return
}

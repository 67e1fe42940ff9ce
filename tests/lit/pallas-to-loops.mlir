// RUN: pallas-opt %s --split-input-file --verify-diagnostics --convert-pallas-to-loops | FileCheck %s

// The host form: grid loops around the body, one stack buffer per block
// value, one loop nest per block op, masked loads and stores at the edge.
// CHECK-LABEL: func.func @pallas_host_scale(
// CHECK-SAME: %[[X:.*]]: memref<?xf32>, %[[OUT:.*]]: memref<?xf32>, %[[S:.*]]: f32, %[[G0:.*]]: index, %{{.*}}: index, %{{.*}}: index)
// CHECK: memref.alloca() : memref<1024xf32>
// CHECK: memref.alloca() : memref<1024xf32>
// CHECK: scf.for %[[P:.*]] = %{{.*}} to %[[G0]]
// CHECK: arith.muli %[[P]], %c1024
// CHECK: scf.for
// CHECK: arith.cmpi ult
// CHECK: scf.if %{{.*}} -> (f32)
// CHECK: memref.load %[[X]]
// CHECK: } else {
// CHECK: arith.constant 0.000000e+00 : f32
// CHECK: scf.for
// CHECK: memref.store %[[S]], %{{.*}} : memref<1024xf32>
// CHECK: scf.for
// CHECK: arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK: scf.for
// CHECK: scf.if
// CHECK: memref.store %{{.*}}, %[[OUT]]
// CHECK-NOT: pallas.
func.func @scale(%x: memref<?xf32>, %out: memref<?xf32>, %s: f32) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i] {block_shape = array<i64: 1024>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<1024xf32>
  %ro = pallas.block %out[%i] {block_shape = array<i64: 1024>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<1024xf32>
  %v = pallas.load %rx[[0]] [[1024]] : !pallas.ref<1024xf32> -> vector<1024xf32>
  %sv = vector.broadcast %s : f32 to vector<1024xf32>
  %w = arith.mulf %v, %sv : vector<1024xf32>
  pallas.store %w, %ro[[0]] : vector<1024xf32>, !pallas.ref<1024xf32>
  return
}

// -----

// An op on blocks without a host rule is an error naming it and the rules the
// host lowering has (ProgramSkeleton.h, shared with the GPU lowering).
func.func @no_host_rule(%x: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i, %c0] {block_shape = array<i64: 8, 256>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<8x256xf32>
  %v = pallas.load %rx[[0, 0]] [[8, 256]] : !pallas.ref<8x256xf32> -> vector<8x256xf32>
  // expected-error @+1 {{no host lowering rule for vector.extract_strided_slice; known rules: pallas.block, pallas.load,}}
  %t = vector.extract_strided_slice %v {offsets = [0, 0], sizes = [4, 256], strides = [1, 1]} : vector<8x256xf32> to vector<4x256xf32>
  return
}

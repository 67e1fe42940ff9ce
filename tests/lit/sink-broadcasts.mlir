// RUN: pallas-opt %s --pallas-sink-broadcasts | FileCheck %s

// A bias row broadcast over 8 rows, through exp: the load itself takes the
// broadcast shape and exp is computed on it.
// CHECK-LABEL: func.func @bias
// CHECK: %[[L:.*]] = pallas.load %{{.*}}{{\[}}[0]] {{\[}}[256]] : <256xf32> -> vector<8x256xf32>
// CHECK: %[[E:.*]] = math.exp %[[L]] : vector<8x256xf32>
// CHECK-NOT: vector.broadcast
// CHECK: arith.addf %{{.*}}, %[[E]] : vector<8x256xf32>
func.func @bias(%x: memref<?x?xf32, strided<[?, 1]>>, %b: memref<?xf32>, %i: index, %j: index) -> vector<8x256xf32> {
  %rx = pallas.block %x[%i, %j] {block_shape = array<i64: 8, 256>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<8x256xf32>
  %rb = pallas.block %b[%j] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  %v = pallas.load %rx[[0, 0]] [[8, 256]] : !pallas.ref<8x256xf32> -> vector<8x256xf32>
  %w = pallas.load %rb[[0]] [[256]] : !pallas.ref<256xf32> -> vector<256xf32>
  %e = math.exp %w : vector<256xf32>
  %bw = vector.broadcast %e : vector<256xf32> to vector<8x256xf32>
  %s = arith.addf %v, %bw : vector<8x256xf32>
  return %s : vector<8x256xf32>
}

// An iota broadcast along new leading dims keeps its dimension, shifted.
// CHECK-LABEL: func.func @iota
// CHECK: pallas.iota 1 : vector<4x128xi32>
func.func @iota() -> vector<4x128xi32> {
  %i = pallas.iota 0 : vector<128xi32>
  %b = vector.broadcast %i : vector<128xi32> to vector<4x128xi32>
  return %b : vector<4x128xi32>
}

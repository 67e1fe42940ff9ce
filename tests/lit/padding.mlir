// RUN: pallas-opt %s --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s --check-prefix=GPU
// RUN: pallas-opt %s --convert-pallas-to-loops | FileCheck %s --check-prefix=HOST

// A load whose elements past the array edge read as -inf (Pallas' `other`):
// a row max needs no mask. The GPU's 16-byte path is untouched; the masked
// element-by-element path and the host's loop yield the padding.
// GPU-LABEL: gpu.func @row_max
// GPU:         %[[NEG:.*]] = arith.constant 0xFF800000 : f32
// GPU:         vector.load {{.*}} {alignment = 16 : i64} : memref<?xf32>, vector<4xf32>
// GPU:         } else {
// GPU:           memref.load
// GPU:           } else {
// GPU-NEXT:        scf.yield %[[NEG]] : f32
// HOST-LABEL: func.func @pallas_host_row_max
// HOST:         arith.constant 0xFF800000 : f32
func.func @row_max(%x: memref<?xf32>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i] {block_shape = array<i64: 2048>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<2048xf32>
  %ro = pallas.block %out[%c0] {block_shape = array<i64: -9223372036854775808>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<?xf32>
  %v = pallas.load %rx[[0]] [[2048]] {padding = 0xFF800000 : f32} : !pallas.ref<2048xf32> -> vector<2048xf32>
  %ninf = arith.constant 0xFF800000 : f32
  %m = vector.multi_reduction <maximumf>, %v, %ninf [0] : vector<2048xf32> to f32
  pallas.store %m, %ro[[0]] plus(%i) : f32, !pallas.ref<?xf32>
  return
}

// RUN: pallas-opt %s --split-input-file --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s --check-prefix=GPU
// RUN: pallas-opt %s --split-input-file --convert-pallas-to-loops | FileCheck %s --check-prefix=HOST

// A row loop: full block dim, dynamic-offset chunk loads, a reduction of each
// chunk to a scalar carried by scf.for, and a scalar store of the row's sum.

// GPU-LABEL: gpu.func @row_sum
// GPU: scf.for
// GPU: vector.load %{{.*}} {alignment = 16 : i64} : memref<?x?xf32, strided<[?, 1]>>, vector<4xf32>
// GPU: vector.reduction <add>, %{{.*}} : vector<16xf32> into f32
// GPU-COUNT-5: gpu.shuffle  xor
// GPU: %[[SCRATCH:.*]] = memref.view {{.*}} to memref<4xf32, #gpu.address_space<workgroup>>
// GPU: memref.store %{{.*}}, %[[SCRATCH]]
// GPU: gpu.barrier
// GPU-COUNT-4: memref.load %[[SCRATCH]]
// GPU: gpu.barrier
// GPU: arith.cmpi eq, %{{.*}}, %c0
// GPU: memref.store %{{.*}}, %{{.*}} : memref<?xf32>

// HOST-LABEL: func.func @pallas_host_row_sum
// HOST: memref.alloca() : memref<f32>
// HOST: scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args
// HOST: memref.load %{{.*}}[] : memref<f32>
// HOST: memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<?xf32>
func.func @row_sum(%x: memref<?x?xf32, strided<[?, 1]>>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %row = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2048 = arith.constant 2048 : index
  %rx = pallas.block %x[%row, %c0] {block_shape = array<i64: 1, -9223372036854775808>, squeezed = array<i1: true, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<?xf32>
  %ro = pallas.block %out[%c0] {block_shape = array<i64: -9223372036854775808>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<?xf32>
  %cols = memref.dim %x, %c1 : memref<?x?xf32, strided<[?, 1]>>
  %n = arith.ceildivui %cols, %c2048 : index
  %zero = arith.constant 0.0 : f32
  %total = scf.for %c = %c0 to %n step %c1 iter_args(%acc = %zero) -> (f32) {
    %off = arith.muli %c, %c2048 : index
    %v = pallas.load %rx[[0]] [[2048]] plus(%off) : !pallas.ref<?xf32> -> vector<2048xf32>
    %s = vector.multi_reduction <add>, %v, %zero [0] : vector<2048xf32> to f32
    %a = arith.addf %acc, %s : f32
    scf.yield %a : f32
  }
  pallas.store %total, %ro[[0]] plus(%row) : f32, !pallas.ref<?xf32>
  return
}

// RUN: pallas-opt %s --split-input-file --verify-diagnostics --convert-pallas-to-gpu --convert-gpu-to-thread-loops | FileCheck %s

// The emulator form: programs, then the 128 threads, in sequence; the thread
// code is the GPU lowering's, with the ids replaced by the loop variables.
// CHECK-NOT: gpu.module
// CHECK-LABEL: func.func @pallas_emu_copy(
// CHECK-SAME: %{{.*}}: memref<?xf32>, %{{.*}}: memref<?xf32>, %[[G0:.*]]: index, %[[G1:.*]]: index, %[[G2:.*]]: index)
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[G2]]
// CHECK: scf.for %{{.*}} = %{{.*}} to %[[G1]]
// CHECK: scf.for %[[BX:.*]] = %{{.*}} to %[[G0]]
// CHECK: scf.for %[[TID:.*]] = %{{.*}} to %c128
// CHECK: arith.muli %[[BX]], %c512
// CHECK: arith.muli %[[TID]], %c4
// CHECK: vector.load
func.func @copy(%x: memref<?xf32>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i] {block_shape = array<i64: 512>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<512xf32>
  %ro = pallas.block %out[%i] {block_shape = array<i64: 512>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<512xf32>
  %v = pallas.load %rx[[0]] [[512]] : !pallas.ref<512xf32> -> vector<512xf32>
  pallas.store %v, %ro[[0]] : vector<512xf32>, !pallas.ref<512xf32>
  return
}

// -----

module attributes {gpu.container_module} {
  gpu.module @kernels {
    // expected-error @+1 {{has cross-thread operations; the sequential emulator cannot run it}}
    gpu.func @sync(%x: memref<?xf32>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      gpu.barrier
      gpu.return
    }
  }
}

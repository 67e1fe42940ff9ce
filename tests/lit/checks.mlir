// RUN: pallas-opt %s --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s --check-prefix=GPU
// RUN: pallas-opt %s --convert-pallas-to-loops | FileCheck %s --check-prefix=HOST

// A failed check: thread 0 of a failing program counts it with an atomic add
// on errors[0]; the first failure stores check + 1 and the value halves.

// GPU-LABEL: gpu.func @label_check
// GPU:         %[[T0:.*]] = arith.cmpi eq, %{{.*}}, %c0
// GPU:         %[[REC:.*]] = arith.andi %[[T0]], %arg1
// GPU:         scf.if %[[REC]] {
// GPU:           %[[OLD:.*]] = memref.atomic_rmw addi %{{.*}}, %arg0[%{{.*}}]
// GPU:           %[[FIRST:.*]] = arith.cmpi eq, %[[OLD]], %{{.*}}
// GPU:           scf.if %[[FIRST]] {
// GPU:             %[[CODE:.*]] = arith.constant 3 : i32
// GPU:             memref.store %[[CODE]], %arg0[%c1{{.*}}]
// GPU:             memref.store %arg2, %arg0[%c2{{.*}}]
// GPU:             memref.store %arg3, %arg0[%c3{{.*}}]
// GPU-NOT:     gpu.barrier

// The host runs programs one after another: a plain increment.
// HOST-LABEL: func.func @pallas_host_label_check
// HOST:         scf.if %arg1 {
// HOST:           %[[OLD:.*]] = memref.load %arg0[%c0{{.*}}]
// HOST:           arith.addi %[[OLD]]
// HOST:           memref.store
// HOST:           arith.cmpi eq, %[[OLD]]
// HOST:           arith.constant 3 : i32
func.func @label_check(%errors: memref<?xi32>, %bad: i1, %lo: i32, %hi: i32) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  pallas.check %errors[2] if %bad, %lo, %hi : memref<?xi32>
  return
}


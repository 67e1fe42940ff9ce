// RUN: pallas-opt %s --pallas-wait-for-prerequisite-grids | FileCheck %s

// Every kernel opens with griddepcontrol, the wait first, before any other instruction (so
// before any access to global memory); functions that are not kernels are left alone.
module attributes {gpu.container_module} {
  gpu.module @kernels {
    // CHECK-LABEL: llvm.func @store_one(
    // CHECK-NEXT: nvvm.griddepcontrol wait
    // CHECK-NEXT: nvvm.griddepcontrol launch_dependents
    // CHECK-NEXT: llvm.mlir.constant
    // CHECK: llvm.store
    llvm.func @store_one(%out: !llvm.ptr<1>) attributes {gpu.kernel, nvvm.kernel} {
      %one = llvm.mlir.constant(1 : i32) : i32
      llvm.store %one, %out : i32, !llvm.ptr<1>
      llvm.return
    }
    // CHECK-LABEL: llvm.func @helper(
    // CHECK-NOT: griddepcontrol
    // CHECK: llvm.return
    llvm.func @helper(%out: !llvm.ptr<1>) {
      llvm.return
    }
  }
}

// RUN: pallas-opt %s --pass-pipeline='builtin.module(gpu.module(convert-gpu-to-nvvm{index-bitwidth=64},reconcile-unrealized-casts),convert-nvvm-to-emulator)' | FileCheck %s

// The NVVM-level kernel becomes host code calling the SIMT runtime.
// CHECK-NOT: gpu.module
// CHECK-NOT: nvvm.
// CHECK-LABEL: llvm.func @pallas_emu_thread_rotate(
// CHECK: llvm.call @pallas_emu_shared_base() : () -> !llvm.ptr
// CHECK: llvm.call @pallas_emu_sreg(%{{.*}}) : (i32) -> i32
// CHECK: llvm.call @pallas_emu_access(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) : (!llvm.ptr, i64, i64, i32) -> ()
// CHECK-NEXT: llvm.store
// CHECK: llvm.call @pallas_emu_barrier(%{{.*}}, %{{.*}}) : (i32, i32) -> ()
// CHECK: llvm.call @pallas_emu_shfl(
// CHECK: llvm.call @pallas_emu_access(
// CHECK-NEXT: llvm.load
// CHECK: llvm.call @pallas_emu_access(
// CHECK-NEXT: llvm.store
// CHECK: llvm.mlir.global external constant @pallas_emu_kernel_rotate_shared_bytes(516 : i64)
module attributes {gpu.container_module} {
  gpu.module @m {
    gpu.func @rotate(%out: memref<?xf32>) workgroup(%smem: memref<128xf32, #gpu.address_space<workgroup>>) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %tid = gpu.thread_id x
      %t = arith.index_cast %tid : index to i32
      %v = arith.sitofp %t : i32 to f32
      memref.store %v, %smem[%tid] : memref<128xf32, #gpu.address_space<workgroup>>
      gpu.barrier
      %one = arith.constant 1 : i32
      %w = arith.constant 32 : i32
      %s, %p = gpu.shuffle xor %v, %one, %w : f32
      %x = memref.load %smem[%tid] : memref<128xf32, #gpu.address_space<workgroup>>
      %y = arith.addf %x, %s : f32
      memref.store %y, %out[%tid] : memref<?xf32>
      gpu.return
    }
  }
}

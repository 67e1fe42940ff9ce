// RUN: pallas-opt %s --pass-pipeline='builtin.module(gpu.module(convert-gpu-to-nvvm{index-bitwidth=64},reconcile-unrealized-casts),convert-nvvm-to-emulator)' | FileCheck %s

// The emulator's rules for a wgmma's accumulator registers (emulator/src/wgmma.cc,
// "Accumulator tokens"): the multiply goes through a stack array the runtime
// updates (its registers then hold tokens); the in-place fence resolves them
// leniently (checked 0), the copy fence, an accumulator's load, checked (1);
// a pinned wait (pallas.wgmma_wait_pinned) is the runtime's wait; a store into
// an accumulator's registers (pallas.accumulator_store) is checked against
// the wgmmas in flight first.
// CHECK-LABEL: llvm.func @pallas_emu_thread_tokens(
// CHECK: %[[LENIENT:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT: llvm.call @pallas_emu_wgmma_read(%{{.*}}, %{{.*}}, %[[LENIENT]]) : (!llvm.ptr, i32, i32) -> ()
// CHECK: llvm.call @pallas_emu_wgmma(
// CHECK: llvm.call @pallas_emu_wgmma_commit()
// CHECK: %[[PENDING:.*]] = llvm.mlir.constant(0 : i32) : i32
// CHECK-NEXT: llvm.call @pallas_emu_wgmma_wait(%[[PENDING]]) : (i32) -> ()
// CHECK: %[[CHECKED:.*]] = llvm.mlir.constant(1 : i32) : i32
// CHECK-NEXT: llvm.call @pallas_emu_wgmma_read(%{{.*}}, %{{.*}}, %[[CHECKED]]) : (!llvm.ptr, i32, i32) -> ()
// The accumulator's alloca starts zero (not stale stack bytes), then the store
// of its 4 registers is checked.
// CHECK: %[[SLOT:.*]] = llvm.alloca %{{.*}} x vector<4xf32>
// CHECK-NEXT: %[[ZERO:.*]] = llvm.mlir.constant(dense<0.000000e+00> : vector<4xf32>)
// CHECK-NEXT: llvm.store %[[ZERO]], %[[SLOT]] : vector<4xf32>, !llvm.ptr
// CHECK: %[[FOUR:.*]] = llvm.mlir.constant(4 : i32) : i32
// CHECK-NEXT: llvm.call @pallas_emu_wgmma_overwrite(%[[SLOT]], %[[FOUR]]) : (!llvm.ptr, i32) -> ()
// CHECK-NEXT: llvm.store %{{.*}}, %[[SLOT]] {pallas.accumulator_store}
// CHECK-NOT: wgmma.wait_group
// CHECK-NOT: pallas: fence wgmma operands
// CHECK-NOT: pallas: copy wgmma operands
module attributes {gpu.container_module} {
  gpu.module @m {
    gpu.func @tokens(%out: memref<?xf32>, %da: i64, %db: i64) kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      %zero = arith.constant 0.0 : f32
      %u = llvm.mlir.undef : !llvm.struct<(f32, f32, f32, f32)>
      %a0 = llvm.insertvalue %zero, %u[0] : !llvm.struct<(f32, f32, f32, f32)>
      %a1 = llvm.insertvalue %zero, %a0[1] : !llvm.struct<(f32, f32, f32, f32)>
      %a2 = llvm.insertvalue %zero, %a1[2] : !llvm.struct<(f32, f32, f32, f32)>
      %acc = llvm.insertvalue %zero, %a2[3] : !llvm.struct<(f32, f32, f32, f32)>
      %f = llvm.inline_asm has_side_effects asm_dialect = att "// pallas: fence wgmma operands", "=f,=f,=f,=f,0,1,2,3" %zero, %zero, %zero, %zero : (f32, f32, f32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
      nvvm.wgmma.fence.aligned
      %r = nvvm.wgmma.mma_async %da, %db, %acc, <m = 64, n = 8, k = 16>, D[<f32>, <one>], A[<bf16>, <one>, <row>], B[<bf16>, <one>, <col>] : !llvm.struct<(f32, f32, f32, f32)> -> !llvm.struct<(f32, f32, f32, f32)>
      nvvm.wgmma.commit.group.sync.aligned
      llvm.inline_asm has_side_effects asm_dialect = att {pallas.wgmma_wait_pinned = 0 : i32} "{\0Awgmma.wait_group.sync.aligned 0;\0A}", "" : () -> ()
      %e0 = llvm.extractvalue %r[0] : !llvm.struct<(f32, f32, f32, f32)>
      %e1 = llvm.extractvalue %r[1] : !llvm.struct<(f32, f32, f32, f32)>
      %e2 = llvm.extractvalue %r[2] : !llvm.struct<(f32, f32, f32, f32)>
      %e3 = llvm.extractvalue %r[3] : !llvm.struct<(f32, f32, f32, f32)>
      %v = llvm.inline_asm has_side_effects asm_dialect = att "// pallas: copy wgmma operands\0Amov.f32 $0, $4;", "=f,=f,=f,=f,f,f,f,f" %e0, %e1, %e2, %e3 : (f32, f32, f32, f32) -> !llvm.struct<(f32, f32, f32, f32)>
      %v0 = llvm.extractvalue %v[0] : !llvm.struct<(f32, f32, f32, f32)>
      %n1 = llvm.mlir.constant(1 : i32) : i32
      %slot = llvm.alloca %n1 x vector<4xf32> : (i32) -> !llvm.ptr
      %zeros4 = llvm.mlir.constant(dense<0.0> : vector<4xf32>) : vector<4xf32>
      llvm.store %zeros4, %slot {pallas.accumulator_store} : vector<4xf32>, !llvm.ptr
      %tid = gpu.thread_id x
      memref.store %v0, %out[%tid] : memref<?xf32>
      gpu.return
    }
  }
}

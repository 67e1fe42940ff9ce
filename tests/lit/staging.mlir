// RUN: pallas-opt %s --split-input-file --verify-diagnostics --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s

// Blocks staged in shared memory by TMA (StagingRules.cpp): a bf16 64x64 tile
// in, transposed, and out. The gpu.func gets one TMA descriptor parameter per
// staged array, after its own; the buffers are aligned to the 128-byte
// swizzle's period (1024 bytes).
// CHECK: pallas.shared_align.transpose_bf16 = 1024 : i64
// CHECK-LABEL: gpu.func @transpose_bf16
// CHECK-SAME: %[[DX:[a-z0-9]+]]: !llvm.ptr, %[[DY:[a-z0-9]+]]: !llvm.ptr) kernel attributes
// CHECK-SAME: pallas.tma_params = 2 : i64
// Thread 0 first brings both descriptors (parameters) into the tensormap cache.
// CHECK: scf.if
// CHECK-NEXT: nvvm.prefetch tensormap in_param_space, %[[DX]]
// CHECK-NEXT: nvvm.prefetch tensormap in_param_space, %[[DY]]
// Thread 0 initialises the input's mbarrier; every thread sees it after a barrier.
// CHECK: scf.if
// CHECK: nvvm.mbarrier.init %{{.*}}, %c1_i32
// CHECK: nvvm.fence.mbarrier.init
// CHECK: gpu.barrier
// Thread 0 announces the box's 8192 bytes and starts the copy at the block
// origin, innermost coordinate first.
// CHECK: scf.if
// CHECK: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c8192_i32
// CHECK: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %[[DX]], %{{.*}}, box[%{{.*}}, %{{.*}}]
// The load waits for phase 0, then reads 16-byte pieces at swizzled offsets
// (byte offset XOR ((offset >> 7) & 7) << 4).
// CHECK: nvvm.mbarrier.try_wait.parity %{{.*}}, %c0_i32
// CHECK: arith.shrui %{{.*}}, %c7
// CHECK: arith.andi %{{.*}}, %c7
// CHECK: arith.shli %{{.*}}, %c4
// CHECK: arith.xori
// CHECK: vector.load %{{.*}} {alignment = 16 : i64} : memref<4096xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// The transpose goes through its own buffer between barriers.
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// The output's pieces are stored swizzled; when the program ends the async
// proxy is fenced, and thread 0 copies the box out and waits until it has
// been read.
// CHECK: vector.store %{{.*}} {alignment = 16 : i64} : memref<4096xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// Before it ends the program waits for x's copy again (at once here, where
// it was read; a program that skips its reads, as attention's causal ones
// that see no key skip Q's, must not exit with a copy into its shared
// memory in flight).
// CHECK: nvvm.mbarrier.try_wait.parity %{{.*}}, %c0_i32
// CHECK: nvvm.fence.proxy {kind = #nvvm.proxy_kind<async.shared>, space = #nvvm.shared_space<cta>}
// CHECK: gpu.barrier
// CHECK: scf.if
// CHECK: nvvm.cp.async.bulk.tensor.global.shared.cta %[[DY]], %{{.*}}, box[%{{.*}}, %{{.*}}]
// CHECK: nvvm.cp.async.bulk.commit.group
// CHECK: nvvm.cp.async.bulk.wait_group 0 {read}
// CHECK: gpu.return
func.func @transpose_bf16(%x: memref<?x?xbf16, strided<[?, 1]>>, %y: memref<?x?xbf16, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 2 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %j = pallas.program_id 1
  %rx = pallas.block %x[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, name = "x"} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x64xbf16>
  %ry = pallas.block %y[%j, %i] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, name = "y"} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x64xbf16>
  %v = pallas.load %rx[[0, 0]] [[64, 64]] : !pallas.ref<64x64xbf16> -> vector<64x64xbf16>
  %t = vector.transpose %v, [1, 0] : vector<64x64xbf16> to vector<64x64xbf16>
  pallas.store %t, %ry[[0, 0]] : vector<64x64xbf16>, !pallas.ref<64x64xbf16>
  return
}

// -----

// A staged output is stored whole, at the body's top level: the TMA store
// writes the whole box.
func.func @partial_staged_store(%x: memref<?x?xf32, strided<[?, 1]>>, %y: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i, %i] {block_shape = array<i64: 32, 32>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<32x32xf32>
  %ry = pallas.block %y[%i, %i] {block_shape = array<i64: 32, 32>, squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, name = "y"} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<32x32xf32>
  %v = pallas.load %rx[[0, 0]] [[16, 32]] : !pallas.ref<32x32xf32> -> vector<16x32xf32>
  // expected-error @+1 {{a block staged in shared memory is stored whole}}
  pallas.store %v, %ry[[0, 0]] : vector<16x32xf32>, !pallas.ref<32x32xf32>
  return
}

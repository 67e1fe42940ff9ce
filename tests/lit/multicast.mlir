// A multicast stage (a persistent grid in clusters, KernelSpec::persistent:
// BlockOp's `multicast`), in the warp-specialized pipeline of
// warp-specialized.mlir: b's block is the same in every CTA of a cluster and
// its two copies (tiling [32, 64]) are shared out, copy c by rank c % S,
// each multicast to the S CTAs (PipelineRules.cpp, "Clusters"). S =
// %cluster_nctarank is a launch's choice: every cluster step also has the
// plain path for S = 1.
//
// RUN: pallas-opt %s --pallas-peel-last-step --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | FileCheck %s --check-prefix=TMA
// RUN: pallas-opt %s --pallas-peel-last-step --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' | pallas-opt \
// RUN:   --pass-pipeline='builtin.module(gpu.module(convert-gpu-to-nvvm{index-bitwidth=64},reconcile-unrealized-casts),convert-nvvm-to-emulator)' \
// RUN:   | FileCheck %s --check-prefix=EMU
// RUN: pallas-opt %s --pallas-expand-wgmma --pallas-sink-broadcasts --pallas-assign-layouts \
// RUN:   '--convert-pallas-to-gpu=async-copies=cp-async mma=mma_sync' \
// RUN:   | FileCheck %s --check-prefix=CPASYNC

// The cluster's size and this CTA's rank; the release barriers (one set for
// a and b, both 3 stages) expect 4 arrivals from each CTA's consumer warps.
// TMA-LABEL: gpu.func @multicast_b
// TMA: %[[S:.*]] = nvvm.read.ptx.sreg.cluster.nctarank : i32
// TMA: %[[S32:.*]] = arith.index_castui %{{.*}} : index to i32
// TMA: %[[R:.*]] = nvvm.read.ptx.sreg.cluster.ctarank : i32
// TMA: %[[R32:.*]] = arith.index_castui %{{.*}} : index to i32
// TMA: %[[ARRIVALS:.*]] = arith.muli %c4_i32, %[[S32]] : i32
// TMA-COUNT-3: nvvm.mbarrier.init %{{.*}}, %[[ARRIVALS]]
// TMA-NEXT: nvvm.fence.mbarrier.init
// Every CTA's barriers are initialised before a peer's copy or arrival.
// TMA: %[[SEVERAL:.*]] = arith.cmpi ugt, %[[S32]], %c1_i32
// TMA-NEXT: scf.if %[[SEVERAL]] {
// TMA-NEXT: nvvm.cluster.arrive
// TMA-NEXT: nvvm.cluster.wait
// TMA-NEXT: } else {
// TMA-NEXT: gpu.barrier
// TMA-NEXT: }
// The consumers release a slot in every CTA of the cluster: after the
// warp meets, its lane r arrives on CTA r's barrier (mapa, then a
// CTA-scope arrival on the shared::cluster address); alone, lane 0
// locally.
// TMA: nvvm.setmaxregister increase 232
// TMA: nvvm.wgmma.wait.group.sync.aligned 1
// TMA: nvvm.bar.warp.sync %c-1_i32
// TMA: %[[LANE:.*]] = arith.index_castui %{{.*}} : index to i32
// TMA: %[[MINE:.*]] = arith.cmpi ult, %[[LANE]], %[[S32]] : i32
// TMA-NEXT: scf.if %[[MINE]] {
// TMA-NEXT: %[[REMOTE:.*]] = nvvm.mapa %{{.*}}, %[[LANE]] : !llvm.ptr<3> -> !llvm.ptr<7>
// TMA-NEXT: nvvm.mbarrier.arrive %[[REMOTE]] : !llvm.ptr<7>
// TMA-NEXT: }
// TMA-NEXT: } else {
// TMA: %[[FIRST:.*]] = arith.cmpi eq, %[[LANE]], %c0_i32
// TMA-NEXT: scf.if %[[FIRST]] {
// TMA-NEXT: nvvm.mbarrier.arrive %{{.*}} : !llvm.ptr<3> -> i64
// The producer: a's copy is its own; b's whole block is expected on this
// CTA's barrier, copy 0 issued by rank 0 and copy 1 (rows 32-63) by rank 1,
// each to every CTA (mask 2^S - 1).
// TMA: nvvm.setmaxregister decrease 40
// TMA: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg3, %{{.*}}, box[%{{.*}}, %{{.*}}] : !llvm.ptr<7>, !llvm.ptr
// TMA: nvvm.mbarrier.arrive.expect_tx %{{.*}}, %c8192_i32
// TMA: %[[ONE:.*]] = arith.shli %{{.*}}, %[[S32]] : i32
// TMA-NEXT: %[[ALL:.*]] = arith.subi %[[ONE]], %{{.*}} : i32
// TMA-NEXT: %[[MASK:.*]] = arith.trunci %[[ALL]] : i32 to i16
// TMA: %[[OWNER0:.*]] = arith.remui %c0_i32{{.*}}, %[[S32]] : i32
// TMA-NEXT: %[[MINE0:.*]] = arith.cmpi eq, %[[OWNER0]], %[[R32]] : i32
// TMA-NEXT: scf.if %[[MINE0]] {
// TMA: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg4, %{{.*}} multicast_mask = %[[MASK]]
// TMA: %[[OWNER1:.*]] = arith.remui %c1_i32{{.*}}, %[[S32]] : i32
// TMA-NEXT: %[[MINE1:.*]] = arith.cmpi eq, %[[OWNER1]], %[[R32]] : i32
// TMA-NEXT: scf.if %[[MINE1]] {
// TMA: %[[ROW32:.*]] = arith.addi %{{.*}}, %c32_i32 : i32
// TMA-NEXT: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg4, %{{.*}}, box[%{{.*}}, %[[ROW32]]] multicast_mask = %[[MASK]]
// TMA: } else {
// TMA-COUNT-2: nvvm.cp.async.bulk.tensor.shared.cluster.global %{{.*}}, %arg4, %{{.*}} : !llvm.ptr<7>, !llvm.ptr
// Every thread, producer too, meets the cluster before the kernel exits.
// TMA: } {pallas.consumer}
// TMA: %[[S2:.*]] = nvvm.read.ptx.sreg.cluster.nctarank : i32
// TMA: scf.if
// TMA-NEXT: nvvm.cluster.arrive
// TMA-NEXT: nvvm.cluster.wait
// TMA-NEXT: }
// TMA-NEXT: gpu.return

// The emulator's forms of the cluster operations.
// EMU-DAG: llvm.call @pallas_emu_tma_load_multicast(
// EMU-DAG: llvm.call @pallas_emu_mapa(
// EMU-DAG: llvm.call @pallas_emu_cluster_arrive()
// EMU-DAG: llvm.call @pallas_emu_cluster_wait()

// sm_80 has no clusters: no producer, and b is copied like a.
// CPASYNC-LABEL: gpu.func @multicast_b
// CPASYNC-NOT: cluster
// CPASYNC-NOT: mapa
// CPASYNC-NOT: multicast_mask
// CPASYNC: gpu.return

module {
  func.func @multicast_b(%arg0: memref<?x?xbf16, strided<[?, 1]>>, %arg1: memref<?x?xbf16, strided<[?, 1]>>, %arg2: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.approx_math, pallas.grid = ["cdiv(m, 64)", "cdiv(n, 64)", "cdiv(k, 64)"], pallas.grid_rank = 2 : i32, pallas.kernel, pallas.max_registers = 136 : i64, pallas.operand_names = ["a", "b", "d", "acc"], pallas.threads = 128 : i64} {
    %0 = pallas.scratch accumulator {name = "acc"} : memref<64x64xf32>
    %c1 = arith.constant 1 : index
    %dim = memref.dim %arg0, %c1 : memref<?x?xbf16, strided<[?, 1]>>
    %c64 = arith.constant 64 : index
    %1 = arith.ceildivsi %dim, %c64 : index
    %c0 = arith.constant 0 : index
    %c1_0 = arith.constant 1 : index
    scf.for %arg3 = %c0 to %1 step %c1_0 {
      %2 = pallas.program_id 0
      %3 = pallas.program_id 1
      %4 = pallas.block %arg0[%2, %arg3] {block_shape = array<i64: 64, 64>, buffers = 3 : i64, name = "a", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %5 = pallas.block %arg1[%3, %arg3] {block_shape = array<i64: 64, 64>, buffers = 3 : i64, multicast, name = "b", squeezed = array<i1: false, false>, staged, swizzle = 128 : i64, tiling = array<i64: 32, 64>} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %6 = pallas.block %arg2[%2, %3] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
      %c0_1 = arith.constant 0 : index
      %c0_2 = arith.constant 0 : index
      %7 = pallas.block %0[%c0_1, %c0_2] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<64x64xf32> -> <64x64xf32>
      %c0_3 = arith.constant 0 : index
      %8 = arith.cmpi eq, %arg3, %c0_3 : index
      scf.if %8 {
        %cst = arith.constant 0.000000e+00 : f32
        %11 = vector.broadcast %cst : f32 to vector<64x64xf32>
        pallas.store %11, %7[[0, 0]] : vector<64x64xf32>, <64x64xf32>
      }
      pallas.wgmma %7, %4, %5 {transpose_b} : <64x64xf32>, !pallas.ref<64x64xbf16>, <64x64xbf16>
      pallas.wgmma_wait 1
      %c1_4 = arith.constant 1 : index
      %9 = arith.subi %1, %c1_4 : index
      %10 = arith.cmpi eq, %arg3, %9 : index
      scf.if %10 {
        %11 = pallas.load %7[[0, 0]] [[64, 64]] : <64x64xf32> -> vector<64x64xf32>
        pallas.store %11, %6[[0, 0]] : vector<64x64xf32>, <64x64xf32>
      }
    } {pallas.delay_release = 1 : i64, pallas.pipeline, pallas.warp_specialized = array<i64: 40, 136, 232>}
    return
  }
}


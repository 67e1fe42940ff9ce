// RUN: pallas-opt %s --split-input-file --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s --check-prefix=GPU
// RUN: pallas-opt %s --split-input-file --convert-pallas-to-loops | FileCheck %s --check-prefix=HOST

// A cluster's sum through distributed shared memory (split-K's in the deep matmul instances):
// every program stores its part to scratch, the cluster meets, program r reads the part of
// the program of rank (r + 1) mod size through a cluster peer's view, then the cluster meets
// again. On the GPU the barrier is barrier.cluster arrive + wait in a cluster of several (else
// the program's own barrier), and the peer's view is a memref in the shared::cluster space
// (7) over mapa of the scratch's address, which the ordinary load rules read (16-byte vector
// loads where aligned). The host runs clusters of one: no barrier, the view is the buffer.

// GPU-LABEL: gpu.func @ring_sum
// GPU:         %[[PART:.*]] = memref.view %{{.*}}[%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<256xf32, #gpu.address_space<workgroup>>
// GPU:         gpu.barrier
// GPU:         vector.store {{.*}}, %[[PART]]
// GPU:         gpu.barrier
// GPU:         nvvm.read.ptx.sreg.cluster.nctarank
// GPU:         scf.if
// GPU-NEXT:      nvvm.cluster.arrive
// GPU-NEXT:      nvvm.cluster.wait
// GPU-NEXT:    } else {
// GPU-NEXT:      gpu.barrier
// GPU:         %[[ADDR:.*]] = memref.extract_aligned_pointer_as_index %[[PART]]
// GPU:         %[[MINE:.*]] = llvm.inttoptr %{{.*}} : i64 to !llvm.ptr<3>
// GPU:         %[[THEIRS:.*]] = nvvm.mapa %[[MINE]], %{{.*}} : !llvm.ptr<3> -> !llvm.ptr<7>
// GPU:         llvm.insertvalue %[[THEIRS]], %{{.*}}[1]
// GPU:         %[[PEER:.*]] = builtin.unrealized_conversion_cast %{{.*}} : !llvm.struct<(ptr<7>, ptr<7>, i64, array<1 x i64>, array<1 x i64>)> to memref<256xf32, 7>
// GPU:         vector.load %[[PEER]]
// GPU:         nvvm.cluster.arrive
// GPU-NEXT:    nvvm.cluster.wait

// HOST-LABEL: func.func @pallas_host_ring_sum
// HOST:         %[[PART:.*]] = memref.alloca() : memref<256xf32>
// HOST-NOT:     cluster
// HOST:         memref.load %[[PART]]
func.func @ring_sum(%x: memref<?xf32>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %part = pallas.scratch : memref<256xf32>
  %p = pallas.block %part[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<256xf32> -> !pallas.ref<256xf32>
  %xr = pallas.block %x[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  %or = pallas.block %out[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  %v = pallas.load %xr[[0]] [[256]] : !pallas.ref<256xf32> -> vector<256xf32>
  pallas.store %v, %p[[0]] : vector<256xf32>, !pallas.ref<256xf32>
  pallas.cluster_barrier
  %rank = pallas.cluster_rank
  %size = pallas.cluster_size
  %next = arith.addi %rank, %c1 : index
  %peer_rank = arith.remui %next, %size : index
  %peer = pallas.cluster_peer %p, %peer_rank : !pallas.ref<256xf32>
  %theirs = pallas.load %peer[[0]] [[256]] : !pallas.ref<256xf32> -> vector<256xf32>
  %sum = arith.addf %v, %theirs : vector<256xf32>
  pallas.store %sum, %or[[0]] : vector<256xf32>, !pallas.ref<256xf32>
  pallas.cluster_barrier
  return
}

// RUN: pallas-opt %s --split-input-file --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s --check-prefix=GPU
// RUN: pallas-opt %s --split-input-file --convert-pallas-to-loops | FileCheck %s --check-prefix=HOST

// A wait is one thread spinning on an atomic load and a compare-and-swap (GPU
// scope, as every semaphore access: PTX's default scope is the system's),
// then a barrier; a signal whose old value is unused is a barrier, a release
// fence (NVPTX emits atomicrmw relaxed, whatever its ordering) and one atomic
// add (no broadcast of the old value).

// GPU-LABEL: gpu.func @wait_then_signal
// GPU:         scf.if
// GPU:           scf.while
// GPU:             llvm.load {{.*}} atomic syncscope("device") monotonic
// GPU:             arith.cmpi sge
// GPU:             llvm.cmpxchg {{.*}} syncscope("device") acq_rel monotonic
// GPU:             scf.condition
// GPU:         gpu.barrier
// GPU:         gpu.barrier
// GPU-NEXT:    arith.cmpi eq
// GPU-NEXT:    scf.if
// GPU-NEXT:      llvm.fence syncscope("device") release
// GPU-NEXT:      memref.atomic_rmw addi
// GPU-NEXT:    }
// GPU-NEXT:    gpu.return

// The host runs programs in order: a wait takes the value or reports itself.
// HOST-LABEL: func.func @pallas_host_wait_then_signal
// HOST:         %[[HAVE:.*]] = memref.load
// HOST:         %[[OK:.*]] = arith.cmpi sge, %[[HAVE]]
// HOST:         scf.if %[[OK]] {
// HOST:           memref.store
// HOST:         } else {
// HOST:           func.call @pallas_host_semaphore_stuck
func.func @wait_then_signal(%sems: memref<?xi32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1 : i32
  pallas.semaphore_wait %sems[%c0], %one : memref<?xi32>
  %old = pallas.semaphore_add %sems[%c1], %one : memref<?xi32>
  return
}

// -----

// Scratch lives in shared memory; stores to it are fenced by barriers.
// GPU-LABEL: gpu.func @scratch_roundtrip
// GPU:         %[[TMP:.*]] = memref.view %{{.*}}[%{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<256xf32, #gpu.address_space<workgroup>>
// GPU:         gpu.barrier
// GPU:         vector.store {{.*}}, %[[TMP]]
// GPU:         gpu.barrier
// GPU:         vector.load %[[TMP]]
// HOST-LABEL: func.func @pallas_host_scratch_roundtrip
// HOST:         memref.alloca() : memref<256xf32>
func.func @scratch_roundtrip(%x: memref<?xf32>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %c0 = arith.constant 0 : index
  %tmp = pallas.scratch : memref<256xf32>
  %t = pallas.block %tmp[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<256xf32> -> !pallas.ref<256xf32>
  %xr = pallas.block %x[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  %or = pallas.block %out[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  %v = pallas.load %xr[[0]] [[256]] : !pallas.ref<256xf32> -> vector<256xf32>
  pallas.store %v, %t[[0]] : vector<256xf32>, !pallas.ref<256xf32>
  %lo = pallas.load %t[[128]] [[128]] : !pallas.ref<256xf32> -> vector<128xf32>
  pallas.store %lo, %or[[0]] : vector<128xf32>, !pallas.ref<256xf32>
  return
}

// -----

// A while loop carrying a block: on the GPU the carry is the thread's
// fragment; on the host a carry buffer.
// GPU-LABEL: gpu.func @doubling
// GPU:         scf.while ({{.*}}) : (vector<2xf32>, i32) -> (vector<2xf32>, i32)
// HOST-LABEL: func.func @pallas_host_doubling
// HOST:         memref.copy
// HOST:         scf.while ({{.*}}) : (i32) -> i32
func.func @doubling(%x: memref<?xf32>, %out: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0 : i32
  %limit = arith.constant 8 : i32
  %xr = pallas.block %x[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  %or = pallas.block %out[%c0] {block_shape = array<i64: 256>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<256xf32>
  %v = pallas.load %xr[[0]] [[256]] : !pallas.ref<256xf32> -> vector<256xf32>
  %r:2 = scf.while (%b = %v, %k = %zero) : (vector<256xf32>, i32) -> (vector<256xf32>, i32) {
    %go = arith.cmpi slt, %k, %limit : i32
    scf.condition(%go) %b, %k : vector<256xf32>, i32
  } do {
  ^bb0(%b: vector<256xf32>, %k: i32):
    %d = arith.addf %b, %b : vector<256xf32>
    %one = arith.constant 1 : i32
    %k1 = arith.addi %k, %one : i32
    scf.yield %d, %k1 : vector<256xf32>, i32
  }
  pallas.store %r#0, %or[[0]] : vector<256xf32>, !pallas.ref<256xf32>
  return
}

// -----

// A read is thread 0's acquire load (not an add of 0: spinning programs only
// read the counter's line), published to every thread through shared memory.
// GPU-LABEL: gpu.func @read_counter
// GPU:         gpu.barrier
// GPU:         scf.if
// GPU:           llvm.load {{.*}} atomic syncscope("device") acquire {alignment = 4 : i64} : !llvm.ptr -> i32
// GPU:           memref.store
// GPU:         gpu.barrier
// GPU:         memref.load
// HOST-LABEL: func.func @pallas_host_read_counter
// HOST:         memref.load
func.func @read_counter(%sems: memref<?xi32>, %out: memref<?xi32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %c0 = arith.constant 0 : index
  %v = pallas.semaphore_read %sems[%c0] : memref<?xi32>
  memref.store %v, %out[%c0] : memref<?xi32>
  return
}

// -----

// An add whose old value is used (a ticket, a last-arriver test) is a release
// and an acquire: GPU-scope fences on both sides of the atomic.
// GPU-LABEL: gpu.func @take_ticket
// GPU:         scf.if
// GPU-NEXT:      llvm.fence syncscope("device") release
// GPU-NEXT:      memref.atomic_rmw addi
// GPU-NEXT:      llvm.fence syncscope("device") acquire
// GPU-NEXT:      memref.store
func.func @take_ticket(%sems: memref<?xi32>, %out: memref<?xi32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32} {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1 : i32
  %t = pallas.semaphore_add %sems[%c0], %one : memref<?xi32>
  memref.store %t, %out[%c0] : memref<?xi32>
  return
}

// RUN: pallas-opt %s --split-input-file --verify-diagnostics --pallas-assign-layouts | FileCheck %s
// RUN: pallas-opt %s --split-input-file --verify-diagnostics --pallas-assign-layouts --convert-pallas-to-gpu | FileCheck %s --check-prefix=GPU

// A short-row softmax tile, 16 rows of 128 bf16: the kernel moves bf16, so runs
// are 8 elements (16 bytes) and every block is strided<128, 8>. A row is 16
// runs, inside one warp, so the row maxima and sums (keepdims reductions) are
// strided_rows: each thread keeps the values of its runs' rows, and spreading
// them back over the tile is an explicit conversion, in registers.
// CHECK-LABEL: func.func @tile_softmax
// CHECK-SAME:    pallas.strided_layout = #pallas.strided<threads = 128, vec = 8>
// CHECK:         pallas.load {{.*}} {pallas.layouts = [#pallas.strided<threads = 128, vec = 8>]}
// CHECK:         arith.extf {{.*}} {pallas.layouts = [#pallas.strided<threads = 128, vec = 8>]}
// CHECK:         %[[M:.*]] = vector.multi_reduction <maximumf>, {{.*}} {pallas.layouts = [#pallas.strided_rows<threads = 128, vec = 8, cols = 128>]} [1] : vector<16x128xf32> to vector<16xf32>
// CHECK:         %[[MC:.*]] = vector.shape_cast %[[M]] {pallas.layouts = [#pallas.strided_rows<threads = 128, vec = 8, cols = 128>]} : vector<16xf32> to vector<16x1xf32>
// CHECK:         %[[MB:.*]] = pallas.convert_layout %[[MC]] {from = #pallas.strided_rows<threads = 128, vec = 8, cols = 128>, pallas.layouts = [#pallas.strided<threads = 128, vec = 8>], to = #pallas.strided<threads = 128, vec = 8>} : vector<16x1xf32> to vector<16x128xf32>
// CHECK:         arith.subf %{{.*}}, %[[MB]] {pallas.layouts = [#pallas.strided<threads = 128, vec = 8>]}
// CHECK:         vector.multi_reduction <add>, {{.*}} {pallas.layouts = [#pallas.strided_rows<threads = 128, vec = 8, cols = 128>]} [1]
// CHECK:         pallas.convert_layout
// CHECK:         arith.divf {{.*}} {pallas.layouts = [#pallas.strided<threads = 128, vec = 8>]}
// CHECK:         arith.truncf {{.*}} {pallas.layouts = [#pallas.strided<threads = 128, vec = 8>]}
// Lowered, two runs per thread are each reduced in registers and by a
// butterfly over its row's 16 lanes (xor 8, 4, 2, 1); no shared memory, no barrier.
// GPU-LABEL:     gpu.func @tile_softmax
// GPU-NOT:       gpu.dynamic_shared_memory
// GPU-NOT:       gpu.barrier
// GPU-COUNT-8:   gpu.shuffle  xor
// GPU-NOT:       gpu.barrier
// GPU:           gpu.return
func.func @tile_softmax(%x: memref<?x?xbf16, strided<[?, 1]>>, %y: memref<?x?xbf16, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i, %c0] {block_shape = array<i64: 16, 128>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<16x128xbf16>
  %ry = pallas.block %y[%i, %c0] {block_shape = array<i64: 16, 128>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<16x128xbf16>
  %h = pallas.load %rx[[0, 0]] [[16, 128]] : !pallas.ref<16x128xbf16> -> vector<16x128xbf16>
  %v = arith.extf %h : vector<16x128xbf16> to vector<16x128xf32>
  %ninf = arith.constant dense<0xFF800000> : vector<16xf32>
  %m = vector.multi_reduction <maximumf>, %v, %ninf [1] : vector<16x128xf32> to vector<16xf32>
  %mc = vector.shape_cast %m : vector<16xf32> to vector<16x1xf32>
  %mb = vector.broadcast %mc : vector<16x1xf32> to vector<16x128xf32>
  %d = arith.subf %v, %mb : vector<16x128xf32>
  %e = math.exp %d : vector<16x128xf32>
  %zero = arith.constant dense<0.0> : vector<16xf32>
  %s = vector.multi_reduction <add>, %e, %zero [1] : vector<16x128xf32> to vector<16xf32>
  %sc = vector.shape_cast %s : vector<16xf32> to vector<16x1xf32>
  %sb = vector.broadcast %sc : vector<16x1xf32> to vector<16x128xf32>
  %p = arith.divf %e, %sb : vector<16x128xf32>
  %o = arith.truncf %p : vector<16x128xf32> to vector<16x128xbf16>
  pallas.store %o, %ry[[0, 0]] : vector<16x128xbf16>, !pallas.ref<16x128xbf16>
  return
}

// -----

// A tile of 4 rows of 512 f32: a row is 128 runs of 4, the whole program, so
// its sums cannot stay in warps: they are replicated (combined through shared
// memory), and spreading them back is a conversion through shared memory.
// CHECK-LABEL: func.func @tile_rms
// CHECK:         vector.multi_reduction <add>, {{.*}} {pallas.layouts = [#pallas.replicated]} [1] : vector<4x512xf32> to vector<4xf32>
// CHECK:         pallas.convert_layout %{{.*}} {from = #pallas.replicated, pallas.layouts = [#pallas.strided<threads = 128, vec = 4>], to = #pallas.strided<threads = 128, vec = 4>} : vector<4x1xf32> to vector<4x512xf32>
// GPU-LABEL:     gpu.func @tile_rms
// GPU:           gpu.dynamic_shared_memory
// GPU:           gpu.barrier
func.func @tile_rms(%x: memref<?x?xf32, strided<[?, 1]>>, %y: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i, %c0] {block_shape = array<i64: 4, 512>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<4x512xf32>
  %ry = pallas.block %y[%i, %c0] {block_shape = array<i64: 4, 512>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<4x512xf32>
  %v = pallas.load %rx[[0, 0]] [[4, 512]] : !pallas.ref<4x512xf32> -> vector<4x512xf32>
  %sq = arith.mulf %v, %v : vector<4x512xf32>
  %zero = arith.constant dense<0.0> : vector<4xf32>
  %s = vector.multi_reduction <add>, %sq, %zero [1] : vector<4x512xf32> to vector<4xf32>
  %r = math.rsqrt %s : vector<4xf32>
  %rc = vector.shape_cast %r : vector<4xf32> to vector<4x1xf32>
  %rb = vector.broadcast %rc : vector<4x1xf32> to vector<4x512xf32>
  %o = arith.mulf %v, %rb : vector<4x512xf32>
  pallas.store %o, %ry[[0, 0]] : vector<4x512xf32>, !pallas.ref<4x512xf32>
  return
}

// -----

// A whole row of 2048 f32 per program (rms_norm's shape): the statistic is a
// scalar (no layout); the 2048-element blocks are strided<128, 4>. A splat
// (here the scalar broadcast of the statistic) needs no conversion: each use
// makes it again in its own layout.
// CHECK-LABEL: func.func @row_scale
// CHECK-SAME:    pallas.strided_layout = #pallas.strided<threads = 128, vec = 4>
// CHECK:         vector.multi_reduction <add>, {{.*}} [0] : vector<2048xf32> to f32
// CHECK-NOT:     pallas.layouts
// CHECK:         vector.broadcast {{.*}} {pallas.layouts = [#pallas.strided<threads = 128, vec = 4>]} : f32 to vector<2048xf32>
// CHECK-NOT:     pallas.convert_layout
// CHECK:         arith.mulf {{.*}} {pallas.layouts = [#pallas.strided<threads = 128, vec = 4>]}
func.func @row_scale(%x: memref<?x?xf32, strided<[?, 1]>>, %y: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %row = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%row, %c0] {block_shape = array<i64: 1, 2048>, squeezed = array<i1: true, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<2048xf32>
  %ry = pallas.block %y[%row, %c0] {block_shape = array<i64: 1, 2048>, squeezed = array<i1: true, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<2048xf32>
  %v = pallas.load %rx[[0]] [[2048]] : !pallas.ref<2048xf32> -> vector<2048xf32>
  %sq = arith.mulf %v, %v : vector<2048xf32>
  %zero = arith.constant 0.0 : f32
  %s = vector.multi_reduction <add>, %sq, %zero [0] : vector<2048xf32> to f32
  %r = math.rsqrt %s : f32
  %rb = vector.broadcast %r : f32 to vector<2048xf32>
  %o = arith.mulf %v, %rb : vector<2048xf32>
  pallas.store %o, %ry[[0]] : vector<2048xf32>, !pallas.ref<2048xf32>
  return
}

// -----

// A block of fewer elements than threads (a bias row of 100 for 128
// threads) is loaded whole by every thread: replicated.
// CHECK-LABEL: func.func @small_block
// CHECK:         pallas.load {{.*}} {pallas.layouts = [#pallas.replicated]}
// GPU-LABEL:   gpu.func @small_block
// GPU-COUNT-100: memref.load
func.func @small_block(%x: memref<?xf32>, %y: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i] {block_shape = array<i64: 100>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<100xf32>
  %ry = pallas.block %y[%i] {block_shape = array<i64: 100>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<100xf32>
  %v = pallas.load %rx[[0]] [[100]] : !pallas.ref<100xf32> -> vector<100xf32>
  %w = arith.addf %v, %v : vector<100xf32>
  pallas.store %w, %ry[[0]] : vector<100xf32>, !pallas.ref<100xf32>
  return
}

// -----

// A matmul epilogue (linear_bias): the bias row, loaded broadcast to the
// accumulator's shape, and its cast take the accumulator's tiled layout, so
// each thread loads the elements its registers hold and the add needs no
// conversion; the store to y's block writes the registers as they are
// (LoadStoreRules' storeTiled), so nothing goes through shared memory.
// CHECK-LABEL: func.func @bias_epilogue
// CHECK:         pallas.dot {{.*}} {pallas.layouts = [#pallas.tiled
// CHECK-NEXT:    pallas.load {{.*}} {pallas.layouts = [#pallas.tiled
// CHECK-NEXT:    arith.extf {{.*}} {pallas.layouts = [#pallas.tiled
// CHECK-NEXT:    %[[S:.*]] = arith.addf {{.*}} {pallas.layouts = [#pallas.tiled
// CHECK-NEXT:    pallas.store %[[S]], %{{[0-9]+}}{{\[\[}}0, 0]]
func.func @bias_epilogue(%a: memref<?x?xbf16, strided<[?, 1]>>, %b: memref<?x?xbf16, strided<[?, 1]>>, %bias: memref<?xbf16>, %y: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 2 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %j = pallas.program_id 1
  %c0 = arith.constant 0 : index
  %ra = pallas.block %a[%i, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x64xbf16>
  %rb = pallas.block %b[%j, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x64xbf16>
  %rbias = pallas.block %bias[%j] {block_shape = array<i64: 64>, squeezed = array<i1: false>} : memref<?xbf16> -> !pallas.ref<64xbf16>
  %ry = pallas.block %y[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<64x64xf32>
  %va = pallas.load %ra[[0, 0]] [[64, 64]] : !pallas.ref<64x64xbf16> -> vector<64x64xbf16>
  %vb = pallas.load %rb[[0, 0]] [[64, 64]] : !pallas.ref<64x64xbf16> -> vector<64x64xbf16>
  %zero = arith.constant dense<0.0> : vector<64x64xf32>
  %acc = pallas.dot %va, %vb, %zero {transpose_b} : vector<64x64xbf16>, vector<64x64xbf16>, vector<64x64xf32> -> vector<64x64xf32>
  %vbias = pallas.load %rbias[[0]] [[64]] : !pallas.ref<64xbf16> -> vector<64x64xbf16>
  %e = arith.extf %vbias : vector<64x64xbf16> to vector<64x64xf32>
  %s = arith.addf %acc, %e : vector<64x64xf32>
  pallas.store %s, %ry[[0, 0]] : vector<64x64xf32>, !pallas.ref<64x64xf32>
  return
}

// -----

// expected-error @+1 {{block value of type 'vector<200xf32>' has 200 elements, not a multiple of the 128 threads of a program; the GPU layout needs it}}
func.func @odd_block(%x: memref<?xf32>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %rx = pallas.block %x[%i] {block_shape = array<i64: 200>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<200xf32>
  %v = pallas.load %rx[[0]] [[200]] : !pallas.ref<200xf32> -> vector<200xf32>
  return
}

// -----

// A chunk loop keeping a running maximum per 8-element run (segment_logsumexp
// in kernel_specs/rows.h): each [2048] bf16 chunk is reshaped to [256, 8], so
// a run is a row of one lane. The row maxima, the carry started from a splat
// and the loop's result all take strided_rows: the loop moves nothing across
// threads. Only the final reduction of the carry to a scalar does (a warp
// butterfly and one barrier, outside the loop).
// CHECK-LABEL: func.func @running_max_per_run
// CHECK: scf.for {{.*}} -> (vector<256x1xf32>)
// CHECK: vector.multi_reduction <maximumf>, {{.*}} {pallas.layouts = [#pallas.strided_rows<threads = 128, vec = 8, cols = 8>]} [1]
// CHECK: arith.maximumf {{.*}} {pallas.layouts = [#pallas.strided_rows<threads = 128, vec = 8, cols = 8>]}
// CHECK-NOT: pallas.convert_layout
// CHECK: } {pallas.layouts = [#pallas.strided_rows<threads = 128, vec = 8, cols = 8>]}
// CHECK: vector.multi_reduction <maximumf>, {{.*}} [0, 1] : vector<256x1xf32> to f32
// GPU-LABEL: gpu.func @running_max_per_run
// GPU: scf.for {{.*}} -> (vector<2xf32>)
// GPU-NOT: gpu.barrier
// GPU: scf.yield
// GPU: gpu.shuffle xor
// GPU: gpu.barrier
// GPU-NOT: gpu.barrier
// GPU: gpu.return
func.func @running_max_per_run(%x: memref<?xbf16>, %out: memref<?xf32>, %n: index) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2048 = arith.constant 2048 : index
  %rx = pallas.block %x[%c0] {block_shape = array<i64: -9223372036854775808>, squeezed = array<i1: false>} : memref<?xbf16> -> !pallas.ref<?xbf16>
  %ro = pallas.block %out[%i] {block_shape = array<i64: 1>, squeezed = array<i1: false>} : memref<?xf32> -> !pallas.ref<1xf32>
  %lowest = arith.constant dense<-1.0e+38> : vector<256x1xf32>
  %ninf = arith.constant dense<0xFF800000> : vector<256xf32>
  %m = scf.for %c = %c0 to %n step %c1 iter_args(%acc = %lowest) -> (vector<256x1xf32>) {
    %off = arith.muli %c, %c2048 : index
    %v = pallas.load %rx[[0]] [[2048]] plus(%off) {inside_last_dim} : !pallas.ref<?xbf16> -> vector<2048xbf16>
    %w = arith.extf %v : vector<2048xbf16> to vector<2048xf32>
    %r = vector.shape_cast %w : vector<2048xf32> to vector<256x8xf32>
    %mx = vector.multi_reduction <maximumf>, %r, %ninf [1] : vector<256x8xf32> to vector<256xf32>
    %mx1 = vector.shape_cast %mx : vector<256xf32> to vector<256x1xf32>
    %next = arith.maximumf %acc, %mx1 : vector<256x1xf32>
    scf.yield %next : vector<256x1xf32>
  }
  %init = arith.constant 0xFF800000 : f32
  %total = vector.multi_reduction <maximumf>, %m, %init [0, 1] : vector<256x1xf32> to f32
  pallas.store %total, %ro[[0]] : f32, !pallas.ref<1xf32>
  return
}

// -----

// The same 4 x 512 tile of bf16 with runs of 16 elements (pallas.run_elements,
// KernelSpec::run_elements): a row is 32 runs, one warp, so its maxima stay in
// the row's lanes (strided_rows) and no barrier or shared memory is needed.
// Each run moves with two 16-byte loads.
// CHECK-LABEL: func.func @tile4_long_runs
// CHECK-SAME:    pallas.strided_layout = #pallas.strided<threads = 128, vec = 16>
// CHECK:         vector.multi_reduction <maximumf>, {{.*}} {pallas.layouts = [#pallas.strided_rows<threads = 128, vec = 16, cols = 512>]} [1]
// GPU-LABEL:     gpu.func @tile4_long_runs
// GPU-COUNT-2:   vector.load %{{.*}} {alignment = 16 : i64} : memref<?x?xbf16, strided<[?, 1]>>, vector<8xbf16>
// GPU-NOT:       gpu.barrier
// GPU-NOT:       gpu.dynamic_shared_memory
// GPU:           gpu.return
func.func @tile4_long_runs(%x: memref<?x?xbf16, strided<[?, 1]>>, %y: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 1 : i32, pallas.threads = 128 : i64, pallas.run_elements = 16 : i64} {
  %i = pallas.program_id 0
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i, %c0] {block_shape = array<i64: 4, 512>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<4x512xbf16>
  %ry = pallas.block %y[%i, %c0] {block_shape = array<i64: 4, 1>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<4x1xf32>
  %h = pallas.load %rx[[0, 0]] [[4, 512]] : !pallas.ref<4x512xbf16> -> vector<4x512xbf16>
  %v = arith.extf %h : vector<4x512xbf16> to vector<4x512xf32>
  %ninf = arith.constant dense<0xFF800000> : vector<4xf32>
  %m = vector.multi_reduction <maximumf>, %v, %ninf [1] : vector<4x512xf32> to vector<4xf32>
  %mc = vector.shape_cast %m : vector<4xf32> to vector<4x1xf32>
  pallas.store %mc, %ry[[0, 0]] : vector<4x1xf32>, !pallas.ref<4x1xf32>
  return
}

// -----

// Two warpgroups (256 threads) split an accumulator's rows, 64 each: a
// 64-row product cannot be spread over them.
func.func @dot_rows_for_two_warpgroups(%a: memref<?x?xbf16, strided<[?, 1]>>, %b: memref<?x?xbf16, strided<[?, 1]>>, %y: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 2 : i32, pallas.threads = 256 : i64} {
  %i = pallas.program_id 0
  %j = pallas.program_id 1
  %c0 = arith.constant 0 : index
  %ra = pallas.block %a[%i, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x64xbf16>
  %rb = pallas.block %b[%j, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x64xbf16>
  %ry = pallas.block %y[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<64x64xf32>
  %va = pallas.load %ra[[0, 0]] [[64, 64]] : !pallas.ref<64x64xbf16> -> vector<64x64xbf16>
  %vb = pallas.load %rb[[0, 0]] [[64, 64]] : !pallas.ref<64x64xbf16> -> vector<64x64xbf16>
  %zero = arith.constant dense<0.0> : vector<64x64xf32>
  // expected-error @+1 {{a 'vector<64x64xf32>' in the WGMMA accumulator layout of 2 warpgroups; each warpgroup holds 64 rows, so it needs 128 rows}}
  %acc = pallas.dot %va, %vb, %zero {transpose_b} : vector<64x64xbf16>, vector<64x64xbf16>, vector<64x64xf32> -> vector<64x64xf32>
  pallas.store %acc, %ry[[0, 0]] : vector<64x64xf32>, !pallas.ref<64x64xf32>
  return
}

// -----

// Two products chained through registers (a fused MLP, attention's P @ V):
// p is computed from the first product's accumulator layout, and the second
// dot takes it in that layout as its a (the MMA's A register fragment, no
// conversion through shared memory); only b is strided.
// CHECK-LABEL: func.func @chained_dots
// CHECK:         pallas.dot {{.*}} {pallas.layouts = [#pallas.tiled
// CHECK-NEXT:    %[[P:.*]] = arith.truncf {{.*}} {pallas.layouts = [#pallas.tiled
// CHECK-NOT:     pallas.convert_layout
// CHECK:         pallas.dot %[[P]], {{.*}} {pallas.layouts = [#pallas.tiled
func.func @chained_dots(%x: memref<?x?xbf16, strided<[?, 1]>>, %w1: memref<?x?xbf16, strided<[?, 1]>>, %w2: memref<?x?xbf16, strided<[?, 1]>>, %y: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.kernel, pallas.grid_rank = 2 : i32, pallas.threads = 128 : i64} {
  %i = pallas.program_id 0
  %j = pallas.program_id 1
  %c0 = arith.constant 0 : index
  %rx = pallas.block %x[%i, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x64xbf16>
  %r1 = pallas.block %w1[%c0, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x64xbf16>
  %r2 = pallas.block %w2[%c0, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> !pallas.ref<64x64xbf16>
  %ry = pallas.block %y[%i, %j] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> !pallas.ref<64x64xf32>
  %vx = pallas.load %rx[[0, 0]] [[64, 64]] : !pallas.ref<64x64xbf16> -> vector<64x64xbf16>
  %v1 = pallas.load %r1[[0, 0]] [[64, 64]] : !pallas.ref<64x64xbf16> -> vector<64x64xbf16>
  %v2 = pallas.load %r2[[0, 0]] [[64, 64]] : !pallas.ref<64x64xbf16> -> vector<64x64xbf16>
  %zero = arith.constant dense<0.0> : vector<64x64xf32>
  %s = pallas.dot %vx, %v1, %zero {transpose_b} : vector<64x64xbf16>, vector<64x64xbf16>, vector<64x64xf32> -> vector<64x64xf32>
  %p = arith.truncf %s : vector<64x64xf32> to vector<64x64xbf16>
  %d = pallas.dot %p, %v2, %zero : vector<64x64xbf16>, vector<64x64xbf16>, vector<64x64xf32> -> vector<64x64xf32>
  pallas.store %d, %ry[[0, 0]] : vector<64x64xf32>, !pallas.ref<64x64xf32>
  return
}

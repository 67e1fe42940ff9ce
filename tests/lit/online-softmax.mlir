// Attention's online softmax (kernel_specs/attention.cc) in miniature: every
// value of the loop stays in the registers the MMA wrote. s = q @ k^T is in
// the WGMMA accumulator layout; the iota mask is computed in it; the row
// maximum and sum are per-row values held where the accumulator holds their
// rows (wgmmaRow as [64], wgmmaRowKeepdims as [64, 1]: PallasLayouts.td),
// reduced with two shuffles per row register; broadcasting one over the
// columns is a register copy; the loop carries m, l (rows) and acc (the
// accumulator) in those layouts; p = bf16(exp2(s - m)) is the second
// product's A from registers. No pallas.convert_layout anywhere.
//
// RUN: pallas-opt %s --pallas-assign-layouts \
// RUN:   | FileCheck %s --implicit-check-not=pallas.convert_layout
// RUN: pallas-opt %s --pallas-assign-layouts '--convert-pallas-to-gpu=async-copies=tma mma=wgmma' \
// RUN:   | FileCheck %s --check-prefix=GPU

// CHECK-LABEL: func.func @online_softmax
// CHECK: scf.for
// CHECK: pallas.dot {{.*}}pallas.layouts = [#pallas.tiled<tiling = [array<i64: 64, 8>
// CHECK: pallas.iota 1 {pallas.layouts = [#pallas.tiled<tiling = [array<i64: 64, 8>
// CHECK: vector.multi_reduction <maximumf>, {{.*}}pallas.layouts = [#pallas.tiled<tiling = [array<i64: 64>, array<i64: 16>, array<i64: 8>, array<i64: 1>], warp_dims = [-4], lane_dims = [-2, 4], vector_dim = -1>]
// CHECK: vector.shape_cast {{.*}}pallas.layouts = [#pallas.tiled<tiling = [array<i64: 64, 1>, array<i64: 16, 1>, array<i64: 8, 1>, array<i64: 1, 1>], warp_dims = [-8], lane_dims = [-4, 4], vector_dim = -1>]
// CHECK: vector.broadcast {{.*}}pallas.layouts = [#pallas.tiled<tiling = [array<i64: 64, 8>{{.*}}: vector<64x1xf32> to vector<64x64xf32>
// CHECK: pallas.dot
// CHECK: } {pallas.layouts = [#pallas.tiled<tiling = [array<i64: 64, 1>{{.*}}, #pallas.tiled<tiling = [array<i64: 64, 1>{{.*}}, #pallas.tiled<tiling = [array<i64: 64, 8>

// GPU-LABEL: gpu.func @online_softmax
// s = q @ k^T: four m64n64k16 from shared memory.
// GPU-COUNT-4: nvvm.wgmma.mma_async
// The row maximum: each of the thread's two row registers over its row's 4 lanes.
// GPU: gpu.shuffle  xor %{{.*}}, %c2_i32
// GPU: gpu.shuffle  xor %{{.*}}, %c1_i32
// GPU: gpu.shuffle  xor %{{.*}}, %c2_i32
// GPU: gpu.shuffle  xor %{{.*}}, %c1_i32
// GPU: math.exp2 {{.*}} : vector<32xf32>
// GPU: math.exp2 {{.*}} : vector<2xf32>
// The row sum, likewise.
// GPU-COUNT-4: gpu.shuffle  xor
// acc += p @ v with p's registers as wgmma's A.
// GPU-COUNT-4: pallas.wgmma_register_a
// GPU-NOT: gpu.shuffle

module {
  func.func @online_softmax(%q: memref<?x?xbf16, strided<[?, 1]>>, %k: memref<?x?xbf16, strided<[?, 1]>>, %v: memref<?x?xbf16, strided<[?, 1]>>, %o: memref<?x?xf32, strided<[?, 1]>>) attributes {pallas.grid = ["cdiv(m, 64)"], pallas.grid_rank = 1 : i32, pallas.kernel, pallas.operand_names = ["q", "k", "v", "o"], pallas.threads = 128 : i64} {
    %i = pallas.program_id 0
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %qb = pallas.block %q[%i, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
    %ob = pallas.block %o[%i, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xf32, strided<[?, 1]>> -> <64x64xf32>
    %ninf = arith.constant dense<0xFF800000> : vector<64x1xf32>
    %zrow = arith.constant dense<0.0> : vector<64x1xf32>
    %zacc = arith.constant dense<0.0> : vector<64x64xf32>
    %r:3 = scf.for %j = %c0 to %c4 step %c1 iter_args(%m = %ninf, %l = %zrow, %acc = %zacc) -> (vector<64x1xf32>, vector<64x1xf32>, vector<64x64xf32>) {
      %kb = pallas.block %k[%j, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %vb = pallas.block %v[%j, %c0] {block_shape = array<i64: 64, 64>, squeezed = array<i1: false, false>} : memref<?x?xbf16, strided<[?, 1]>> -> <64x64xbf16>
      %qv = pallas.load %qb[[0, 0]] [[64, 64]] : <64x64xbf16> -> vector<64x64xbf16>
      %kv = pallas.load %kb[[0, 0]] [[64, 64]] : <64x64xbf16> -> vector<64x64xbf16>
      %s = pallas.dot %qv, %kv {transpose_b} : vector<64x64xbf16>, vector<64x64xbf16> -> vector<64x64xf32>
      %col = pallas.iota 1 : vector<64x64xi32>
      %lim = arith.constant dense<40> : vector<64x64xi32>
      %vis = arith.cmpi slt, %col, %lim : vector<64x64xi32>
      %ninf2 = arith.constant dense<0xFF800000> : vector<64x64xf32>
      %sm = arith.select %vis, %s, %ninf2 : vector<64x64xi1>, vector<64x64xf32>
      %seedm = arith.constant dense<0xFF800000> : vector<64xf32>
      %rmax = vector.multi_reduction <maximumf>, %sm, %seedm [1] : vector<64x64xf32> to vector<64xf32>
      %rmax2 = vector.shape_cast %rmax : vector<64xf32> to vector<64x1xf32>
      %mn = arith.maximumf %m, %rmax2 : vector<64x1xf32>
      %mb = vector.broadcast %mn : vector<64x1xf32> to vector<64x64xf32>
      %d = arith.subf %sm, %mb : vector<64x64xf32>
      %p = math.exp2 %d : vector<64x64xf32>
      %dm = arith.subf %m, %mn : vector<64x1xf32>
      %corr = math.exp2 %dm : vector<64x1xf32>
      %seeds = arith.constant dense<0.0> : vector<64xf32>
      %rsum = vector.multi_reduction <add>, %p, %seeds [1] : vector<64x64xf32> to vector<64xf32>
      %rsum2 = vector.shape_cast %rsum : vector<64xf32> to vector<64x1xf32>
      %lc = arith.mulf %l, %corr : vector<64x1xf32>
      %ln = arith.addf %lc, %rsum2 : vector<64x1xf32>
      %cb = vector.broadcast %corr : vector<64x1xf32> to vector<64x64xf32>
      %accs = arith.mulf %acc, %cb : vector<64x64xf32>
      %pb = arith.truncf %p : vector<64x64xf32> to vector<64x64xbf16>
      %vv = pallas.load %vb[[0, 0]] [[64, 64]] : <64x64xbf16> -> vector<64x64xbf16>
      %accn = pallas.dot %pb, %vv, %accs : vector<64x64xbf16>, vector<64x64xbf16>, vector<64x64xf32> -> vector<64x64xf32>
      scf.yield %mn, %ln, %accn : vector<64x1xf32>, vector<64x1xf32>, vector<64x64xf32>
    }
    %lb = vector.broadcast %r#1 : vector<64x1xf32> to vector<64x64xf32>
    %out = arith.divf %r#2, %lb : vector<64x64xf32>
    pallas.store %out, %ob[[0, 0]] : vector<64x64xf32>, <64x64xf32>
    return
  }
}

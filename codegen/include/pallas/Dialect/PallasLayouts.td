//===- PallasLayouts.td - how a block value is spread over threads -*- tablegen -*-===//
//
// A layout says which thread of a program (CTA) holds which element of a
// block value, and in which register of that thread. `pallas-assign-layouts`
// gives every block value one (the `pallas.layouts` attribute on its
// defining op, one entry per result; for loops, on the loop for its
// carries) and the GPU lowering rules read them; where two uses disagree
// `pallas.convert_layout` moves the data explicitly.
//
//===----------------------------------------------------------------------===//

#ifndef PALLAS_LAYOUTS_TD
#define PALLAS_LAYOUTS_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

class Pallas_Attr<string name, string attrMnemonic> : AttrDef<Pallas_Dialect, name> {
  let mnemonic = attrMnemonic;
}

def Pallas_StridedLayoutAttr : Pallas_Attr<"WarpgroupStridedLayout", "strided"> {
  let summary = "warpgroup-strided: runs of `vec` contiguous elements dealt round-robin";
  let description = [{
    The block is flattened row-major and cut into runs of `vec` contiguous
    elements; run k belongs to thread `k % threads`, and a thread's fragment
    (a `vector<N / threads>`) is its runs in order. Every block of a kernel
    that moves memory uses it, since a run is one 16-byte access.

    Worked example: `vector<8x256xf32>` in `#pallas.strided<threads = 128, vec = 4>`.
    Thread t owns runs t, t + 128, t + 256, t + 384: flat elements
    [4t, 4t + 4) + 512 r for r = 0..3, i.e. row 2r + t / 64, columns
    [4 (t % 64), 4 (t % 64) + 4). Thread 70 holds (1, 24..27), (3, 24..27),
    (5, 24..27), (7, 24..27) in registers 0..15. Each warp touches 512
    contiguous bytes per run.

    When a row is at most 32 runs (`cols / vec` divides 32), every row lies in
    one warp (`rowsInAWarp`): the 16x128 f32 block of a short-row tile has
    32 runs per row, so warp w holds rows w, w + 4, w + 8, w + 12.
  }];
  let parameters = (ins "int64_t":$threads, "int64_t":$vec);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Elements of `block` held by one thread.
    int64_t fragmentSize(::mlir::VectorType block) const;
    /// Whether every row (last dim) of `block` lies inside one warp.
    bool rowsInAWarp(::mlir::VectorType block) const;
  }];
}

def Pallas_StridedRowsLayoutAttr : Pallas_Attr<"StridedRowsLayout", "strided_rows"> {
  let summary = "one value per row of a strided block whose rows each lie in one warp";
  let description = [{
    The per-row values (a `vector<R>` or `vector<Rx1>`) of a `[R, cols]` block
    in `#pallas.strided<threads, vec>` whose rows are at most 32 runs, so that
    each row lies in g = cols / vec neighbouring lanes of one warp. A thread
    holds, for each of its runs of the block, the value of the row that run
    lies in: a `vector<R * cols / (threads * vec)>`. A row reduction is then a
    butterfly over the row's g lanes (no shared memory, no barrier), and
    spreading the values back over the block stays in registers.

    Worked example: the row maxima of a 16x128 bf16 softmax tile in
    `#pallas.strided_rows<threads = 128, vec = 8, cols = 128>`: a row is 16
    runs, so g = 16 lanes; thread t's run r lies in row 8 r + t / 16, so thread
    37 holds the maxima of rows 2 and 10 in registers 0 and 1 (as do threads
    32..47 of warp 1).
  }];
  let parameters = (ins "int64_t":$threads, "int64_t":$vec, "int64_t":$cols);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Lanes that hold one row: cols / vec.
    int64_t lanesPerRow() const { return getCols() / getVec(); }
    /// Values each thread holds for `rows` rows: one per run of the block.
    int64_t valuesPerThread(int64_t rows) const {
      return rows * getCols() / (getThreads() * getVec());
    }
  }];
}

def Pallas_ReplicatedLayoutAttr : Pallas_Attr<"ReplicatedLayout", "replicated"> {
  let summary = "every thread holds every element";
  let description = [{
    Each thread holds the whole value, flattened row-major in a `vector<N>`.
    Results of reductions that keep dims (one value per row), what is
    computed from them alone, and splats too small to spread over the
    threads. Worked example: the per-row maxima of a 16x128 softmax tile,
    `vector<16x1xf32>`, are a `vector<16xf32>` in every one of the 128
    threads, all with the same bits (the reductions combine in a fixed order).
  }];
}

def Pallas_TiledLayoutAttr : Pallas_Attr<"TiledLayout", "tiled"> {
  let summary = "a tiling of the block, some tiled dims over warps, some over lanes, one vector dim";
  let description = [{
    After Mosaic GPU's `TiledLayout`. `tiling` is a list of tile shapes
    applied one after the other to the trailing dims: a [64, N] block tiled by
    (64, 8) is [1, N/8, 64, 8]; tiling that by (16, 8) splits the last two
    dims again: [1, N/8, 4, 1, 16, 8], and so on. Dims of the final *tiled
    shape* are named by negative indices. Then:
      - `warp_dims`: the tiled dims whose coordinates give the warp (mixed
        radix, first entry most significant);
      - `lane_dims`: the same for the lane (their extents multiply to 32); a
        positive entry r instead means r lanes hold the same elements
        (replication), e.g. [-2, 4] is lane = 4 * c[-2] + (any of 4);
      - `vector_dim`: the tiled dim held as consecutive registers (a vector);
      - every other tiled dim is enumerated in registers, row-major, outside
        the vector dim: register = flat(other coordinates) * |vector| + c[vector].

    Named instances (TiledLayoutAttr::get*), each checked element by element
    against NVIDIA's PTX fragment tables in tests/codegen/layout_test.cc:

    `wgmmaAccumulator` (m64nNk16, f32): tiling (64, 8), (16, 8), (8, 8), (1, 2);
    warp_dims [-8]; lane_dims [-4, -3]; vector_dim -1. Element (r, c) of
    [64, N] is held by warp r / 16, lane 4 (r % 8) + (c % 8) / 2, register
    4 (c / 8) + 2 ((r % 16) / 8) + c % 2. Thread 37 (warp 1, lane 5) holds
    (17, 2), (17, 3) in registers 0, 1, (25, 2), (25, 3) in 2, 3, (17, 10) in 4.

    `wgmmaRow`: one value per accumulator row, [64]: tiling (64), (16), (8),
    (1); warp_dims [-4]; lane_dims [-2, 4]; vector_dim -1. Row r is held by
    warp r / 16, lanes 4 (r % 8) .. 4 (r % 8) + 3, register (r % 16) / 8:
    the reduction of an accumulator row needs only 2 shuffles (xor 1, 2).

    `wgmmaRowKeepdims`: the same values as [64, 1] (a reduction with
    keepdims, attention's running row maximum and sum): tiling (64, 1),
    (16, 1), (8, 1), (1, 1); warp_dims [-8]; lane_dims [-4, 4]; vector_dim
    -1. Its dims are numbered as the accumulator's, so row r is held where
    wgmmaRow holds it (register (r % 16) / 8), and broadcasting it over an
    accumulator's columns is a register copy: accumulator register i of a
    thread takes row register (i / 2) % 2.

    Several consumer warpgroups (a program of 128 W threads, W > 1; CUTLASS's
    cooperative schedule): `getWgmmaAccumulator(ctx, W)` adds the 64-row
    tile index (tiled dim -10) as the most significant warp digit, warp_dims
    [-10, -8], so warpgroup w holds rows [64 w, 64 w + 64) of a [64 W, N]
    accumulator in the registers one m64 instruction writes: each warpgroup
    issues its own wgmma on its rows. Worked example, [128, 256] over 256
    threads: thread 165 (warp 5 = warpgroup 1's warp 1, lane 5) holds
    (81, 2), (81, 3) in registers 0, 1 and (81, 10) in 4: 128 registers
    a thread, where one warpgroup would need 256. `getWgmmaRow(ctx, W)`
    likewise: warp_dims [-5, -4].

    `mmaSyncA` (m16n8k16 A, [16, 16] f16/bf16, one warp): tiling (16, 16),
    (16, 8), (8, 8), (1, 2); warp_dims []; lane_dims [-4, -3]; vector_dim -1.
    Lane l holds (l / 4, 2 (l % 4) + {0, 1}) in registers 0, 1; row + 8 in 2, 3;
    column + 8 in 4, 5; both in 6, 7 (PTX's a0..a7).

    `mmaSyncB` (B, [16, 8] as K x N): tiling (8, 8), (2, 1); warp_dims [];
    lane_dims [-3, -4]; vector_dim -2. Lane l holds (2 (l % 4) + {0, 1}, l / 4)
    in registers 0, 1 and k + 8 in 2, 3 (b0..b3).

    `mmaSyncC` (C/D, [16, 8] f32): tiling (16, 8), (8, 8), (1, 2); warp_dims [];
    lane_dims [-4, -3]; vector_dim -1. Lane l holds (l / 4, 2 (l % 4) + {0, 1})
    in registers 0, 1 and row + 8 in 2, 3 (c0..c3).
  }];
  let parameters = (ins "::mlir::ArrayAttr":$tiling, "::mlir::DenseI64ArrayAttr":$warp_dims,
                        "::mlir::DenseI64ArrayAttr":$lane_dims, "int64_t":$vector_dim);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Who holds an element: warp, the first of its lanes, and the register.
    struct Owner { int64_t warp; int64_t lane; int64_t reg; };
    /// The shape after applying every tile; fails (with `error` set) when a
    /// tile does not divide the dims it applies to.
    ::mlir::FailureOr<::llvm::SmallVector<int64_t>> tiledShape(
        ::llvm::ArrayRef<int64_t> shape, std::string* error = nullptr) const;
    /// Owner of the element at `coords` of a block of `shape` (tiledShape must succeed).
    Owner owner(::llvm::ArrayRef<int64_t> shape, ::llvm::ArrayRef<int64_t> coords) const;
    /// Elements each thread holds for a block of `shape`.
    int64_t registersPerThread(::llvm::ArrayRef<int64_t> shape) const;
    /// Threads the layout spans: 32 times the product of the warp dims' extents.
    int64_t threads(::llvm::ArrayRef<int64_t> shape) const;
    /// The inverse of `owner`: the coordinates of the element in register
    /// `reg` of lane `lane` of warp `warp` (for lanes replicating a group,
    /// any lane of it).
    ::llvm::SmallVector<int64_t> elementAt(::llvm::ArrayRef<int64_t> shape, int64_t warp,
                                           int64_t lane, int64_t reg) const;
    /// The warp (or lane) index as mixed-radix digits, most significant
    /// first: each has an extent and the element coordinates one unit of it
    /// adds (empty for lanes that replicate). Coordinates are additive:
    /// elementAt(w, l, r) = sum of digit(w) * step + digit(l) * step + elementAt(0, 0, r),
    /// which is how the GPU lowering computes them from the thread index.
    struct Digit { int64_t extent; ::llvm::SmallVector<int64_t> step; };
    ::llvm::SmallVector<Digit> warpDigits(::llvm::ArrayRef<int64_t> shape) const;
    ::llvm::SmallVector<Digit> laneDigits(::llvm::ArrayRef<int64_t> shape) const;

    /// `warpgroups` > 1: the warpgroups split the rows, 64 each (see above).
    static TiledLayoutAttr getWgmmaAccumulator(::mlir::MLIRContext* ctx, int64_t warpgroups = 1);
    static TiledLayoutAttr getWgmmaRow(::mlir::MLIRContext* ctx, int64_t warpgroups = 1);
    static TiledLayoutAttr getWgmmaRowKeepdims(::mlir::MLIRContext* ctx,
                                               int64_t warpgroups = 1);
    static TiledLayoutAttr getMmaSyncA(::mlir::MLIRContext* ctx);
    static TiledLayoutAttr getMmaSyncB(::mlir::MLIRContext* ctx);
    static TiledLayoutAttr getMmaSyncC(::mlir::MLIRContext* ctx);
  }];
}

#endif // PALLAS_LAYOUTS_TD

//===- Spec.h - the kernel declaration EDSL -----------------------*- C++ -*-===//
//
// Kernels are declared in kernel_specs/*.cc with this header, Pallas style:
//
//   PALLAS_KERNEL(add) {
//     auto T = spec.dtype_param("T", {f32, f16, bf16});   // one kernel per dtype
//     auto n = spec.dim("n");                             // a run-time array dim
//     auto x = spec.input("x", T, {n});
//     auto y = spec.input("y", T, {n});
//     auto out = spec.output("out", T, {n});
//     spec.grid({cdiv(n, 1024)});                         // programs, from run-time dims
//     for (auto op : {x, y, out})                         // program i sees block i
//       spec.block(op, {Blocked(1024)}, [](ProgramIds p) { return at(p[0]); });
//     spec.body([](Ref x, Ref y, Ref out) {               // refs in declaration order
//       out.store((x.load().cast(f32) + y.load().cast(f32)).cast(out.dtype()));
//     });
//   }
//
// The spec function runs once per instance (dtype combination); the body is
// traced into the kernel IR (the `pallas` dialect plus upstream arith, math,
// vector and scf). Mistakes throw SpecError with a message that names the
// spec, the operand and the dim. This header includes no MLIR headers so that
// spec files compile quickly; traced values hold opaque MLIR handles.
//
//===----------------------------------------------------------------------===//
#ifndef PALLAS_EDSL_SPEC_H
#define PALLAS_EDSL_SPEC_H

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <source_location>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace pallas::edsl {

/// Element types. Operands use f32, f16, bf16 and i32; `i1` (predicates) and
/// `index` (program ids, loop counters) appear only inside bodies.
enum class DType { f32, f16, bf16, i32, i1, index };
inline constexpr DType f32 = DType::f32;
inline constexpr DType f16 = DType::f16;
inline constexpr DType bf16 = DType::bf16;
inline constexpr DType i32 = DType::i32;
const char* name(DType dtype);
bool is_float(DType dtype);
/// Bytes of one element of an operand dtype.
int64_t dtype_bytes(DType dtype);

/// Every mistake in a spec is reported as a SpecError; the message starts
/// with "spec '<instance>': ".
class SpecError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

//===----------------------------------------------------------------------===//
// Run-time dims and grid expressions
//===----------------------------------------------------------------------===//

/// An integer expression of run-time array dims: a dim, a constant, or
/// +, -, *, cdiv, max, min, le of expressions. Grids are written with these.
/// A variant's chooser may also read device_shared_bytes().
class DimExpr {
 public:
  enum class Kind {
    kDim,
    kConst,
    kDeviceSharedBytes,
    kPrograms,
    kAdd,
    kSub,
    kMul,
    kCdiv,
    kMax,
    kMin,
    kLe
  };
  DimExpr(int64_t value);  // NOLINT: constants convert implicitly
  static DimExpr dim(int index, std::string name);
  /// The bytes of shared memory one program may have on the device the
  /// launch runs on (CUDA: the opt-in maximum per block; the emulator: the
  /// GPU it stands for; the host: unbounded). Only a variant's chooser may
  /// read it (the entry point evaluates it; kernels cannot): e.g. a tile too
  /// big for sm_86 / sm_89's 99 KiB gives way to a smaller one.
  static DimExpr device_shared_bytes();
  /// The programs a persistent grid launches (KernelSpec::persistent: as many
  /// as the device keeps resident, at most its tiles, or twice its tiles for a
  /// stream-K walk of three parts a tile, whose runs may be half a tile). Only
  /// the count of a workspace or of semaphores may read it, e.g. a stream-K
  /// grid's slots for partial tiles.
  static DimExpr persistent_programs();
  /// Whether the expression reads device_shared_bytes() / persistent_programs().
  bool reads_device() const;
  bool reads_programs() const;

  Kind kind() const { return node_->kind; }
  int dim_index() const { return node_->dim_index; }
  const std::string& dim_name() const { return node_->name; }
  /// For kConst: the constant.
  int64_t value() const { return node_->value; }
  /// For the binary kinds: the operands.
  DimExpr lhs() const { return DimExpr(node_->lhs); }
  DimExpr rhs() const { return DimExpr(node_->rhs); }
  /// C++ source for the expression, e.g. "pallas_cdiv(n, 1024)".
  std::string to_cpp() const;
  /// Human form, e.g. "cdiv(n, 1024)".
  std::string to_string() const;

  friend DimExpr operator+(const DimExpr& a, const DimExpr& b);
  friend DimExpr operator-(const DimExpr& a, const DimExpr& b);
  friend DimExpr operator*(const DimExpr& a, const DimExpr& b);
  friend DimExpr cdiv(const DimExpr& a, const DimExpr& b);
  friend DimExpr max(const DimExpr& a, const DimExpr& b);
  friend DimExpr min(const DimExpr& a, const DimExpr& b);
  /// 1 when a <= b, else 0: `1 + 3 * le(cols, 512)` is 4 for rows of at most 512.
  friend DimExpr le(const DimExpr& a, const DimExpr& b);

 private:
  struct Node {
    Kind kind;
    int64_t value = 0;
    int dim_index = -1;
    std::string name;
    std::shared_ptr<const Node> lhs, rhs;
  };
  explicit DimExpr(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  static DimExpr binary(Kind kind, const DimExpr& a, const DimExpr& b);
  std::string print(bool cpp) const;
  std::shared_ptr<const Node> node_;
};

//===----------------------------------------------------------------------===//
// Block shapes
//===----------------------------------------------------------------------===//

/// A block dim of `size` elements; block i covers [i*size, (i+1)*size).
/// Edge blocks are masked, so `size` need not divide the array dim.
struct Blocked {
  int64_t size;
};
/// A block dim of extent 1 dropped from the block shape; the index map's
/// value for it is an element index.
struct Squeezed {};
inline constexpr Squeezed squeezed{};

/// The whole dim, whatever its run-time extent: the block starts at 0 and the
/// body moves static-size slices of it at run-time offsets (Ref::load_at), e.g.
/// to loop over a long row in chunks.
struct Full {};
inline constexpr Full full{};

/// Where a block lives while the body runs (Pallas' memory_space): by
/// default the body's loads and stores move it between global memory and
/// registers directly. A block declared `InShared` is staged in the
/// program's shared memory by the Tensor Memory Accelerator (TMA, sm_90a):
/// an input block is copied in before the body reads it, an output block is
/// written there by the body and copied out when the program ends. Edge
/// blocks need no masks on that path: TMA reads elements outside the array as
/// zero and does not write them.
///
/// `swizzle` (0, 32, 64 or 128 bytes) is Pallas' SwizzleTransform: the 16-byte
/// pieces of each row of the staged block are permuted (XOR with the row
/// index) so that threads reading a column hit different banks. The block's
/// last dim (the tiling's, with one) must then span exactly `swizzle` bytes
/// (Pallas' rule; TMA's allows at most), and at least 16 bytes, a multiple
/// of 16, in every case.
///
/// TMA needs a 16-byte-aligned array whose strides are multiples of 16 bytes;
/// for arrays that break these rules, and on GPUs before sm_90, the entry
/// point launches the same kernel built without staging (its `_direct`
/// instance), so every shape and stride works.
///
/// TMA copies boxes of at most 256 elements a dim (kTmaMaxBoxDim): a longer
/// block dim, which must then be a multiple of 256, is copied as several
/// boxes along it, all completing on the block's one barrier.
///
/// `tiling` is Pallas' TilingTransform: the staged buffer holds the block's
/// trailing dims in tiles of that shape, tile after tile (row-major over the
/// tiles, row-major inside one), and each tile is one TMA copy. The swizzle
/// rule then applies to the tile's last dim instead of the block's, which is
/// how a block wider than one swizzle span is staged. Worked example, a
/// [64, 128] bf16 block of B [K, N] with swizzle 128 and tiling {64, 64}:
/// two copies of [64, 64], tile 1 (columns 64..127) at byte 64 * 128 =
/// 8192; element (k, n) at tile n / 64, byte k * 128 + (n % 64) * 2 inside
/// it, before the swizzle. This is the N-major layout wgmma reads B [K, N]
/// from in place (MatmulRules.cpp). Empty: one tile, the whole block (cut
/// into boxes of kTmaMaxBoxDim along longer dims).
///
/// On a pipelined loop (an arbitrary grid axis, or emit_pipeline) the block
/// gets `buffers` stage buffers (Pallas' `Buffered(n)`): the copies of the
/// next buffers - 1 steps are in flight while the body works on this one.
/// 0 takes the pipeline's depth (max_concurrent_steps).
struct InShared {
  int swizzle = 128;
  int buffers = 0;
  std::vector<int64_t> tiling = {};
};
inline constexpr int64_t kTmaMaxBoxDim = 256;
/// Stage buffers of a pipelined loop unless a block or the pipeline says otherwise.
inline constexpr int kDefaultPipelineDepth = 2;
/// The most stage buffers a pipeline keeps (the matmul's 128 x 256 tiles take 4 on sm_90, its
/// decode instance 12 of 18 KiB: cuBLASLt's decode kernels keep 8 to 16).
inline constexpr int kMaxPipelineDepth = 16;

class BlockDim {
 public:
  BlockDim(Blocked b) : size_(b.size) {}             // NOLINT
  BlockDim(Squeezed) : size_(1), squeezed_(true) {}  // NOLINT
  BlockDim(Full) : size_(-1), full_(true) {}         // NOLINT
  /// The block extent; -1 for a full dim.
  int64_t size() const { return size_; }
  bool is_squeezed() const { return squeezed_; }
  bool is_full() const { return full_; }

 private:
  int64_t size_;
  bool squeezed_ = false;
  bool full_ = false;
};

//===----------------------------------------------------------------------===//
// Traced values
//===----------------------------------------------------------------------===//

/// A value in a kernel body: a scalar (index, i32, f32, ...) or a block
/// (an N-d array of a dtype, held in registers across the program's threads).
class Value {
 public:
  Value() = default;
  static Value from_opaque(void* impl) { return Value(impl); }
  void* opaque() const { return impl_; }
  bool valid() const { return impl_ != nullptr; }

  DType dtype() const;
  /// The block shape; empty for scalars.
  std::vector<int64_t> shape() const;
  bool is_block() const { return !shape().empty(); }

  /// Converts element type: float<->float rounds to nearest even, float<->int
  /// truncates toward zero, index<->i32 wraps. Casting to the same dtype is a no-op.
  Value cast(DType to, std::source_location where = std::source_location::current()) const;

 private:
  explicit Value(void* impl) : impl_(impl) {}
  void* impl_ = nullptr;
};

/// A scalar kernel parameter; converts to its Value inside a body.
class Scalar {
 public:
  Scalar() = default;
  explicit Scalar(int index) : index_(index) {}
  operator Value() const;  // NOLINT
  int index() const { return index_; }

 private:
  int index_ = -1;
};

// Every body operation records where the spec wrote it (its file and line,
// std::source_location as a defaulted last argument), so the traced IR and
// the lowering's errors point at the spec line. Operators cannot take extra
// arguments; their left operand records it instead, through `Term`'s
// implicit conversion at the expression.

/// An operator's operand (a term): a block or scalar Value (or a Scalar parameter),
/// with the place of the expression it appears in.
class Term {
 public:
  Term(const Value& v, std::source_location where = std::source_location::current())  // NOLINT
      : value(v), where(where) {}
  Term(const Scalar& s, std::source_location where = std::source_location::current())  // NOLINT
      : value(s), where(where) {}
  Value value;
  std::source_location where;
};

enum class BinaryOp { kAdd, kSub, kMul, kDiv, kLt, kLe, kGt, kGe, kEq, kNe };
/// `a op b`, traced at `where`. Arithmetic: both operands have the same dtype;
/// a scalar or a block of trailing-matching shape broadcasts numpy-style to the
/// other operand's shape. Comparisons produce i1 values.
Value binary(BinaryOp op, const Value& a, const Value& b, std::source_location where);

#define PALLAS_EDSL_BINARY_OPERATOR(op, kind)                                                 \
  inline Value operator op(const Term& a, const Term& b) {                                    \
    return binary(BinaryOp::kind, a.value, b.value, a.where);                                 \
  }                                                                                           \
  /* Literals take the dtype of the other operand: `x * 0.5` with x bf16 is bf16. */          \
  template <class N>                                                                          \
  requires std::is_arithmetic_v<N> Value operator op(const Term& a, N b) {                    \
    return binary(BinaryOp::kind, a.value, constant(static_cast<double>(b), a.value.dtype()), \
                  a.where);                                                                   \
  }                                                                                           \
  template <class N>                                                                          \
  requires std::is_arithmetic_v<N> Value operator op(N a, const Term& b) {                    \
    return binary(BinaryOp::kind, constant(static_cast<double>(a), b.value.dtype()), b.value, \
                  b.where);                                                                   \
  }

/// A constant of `dtype` (scalar); used for literals in arithmetic.
Value constant(double value, DType dtype,
               std::source_location where = std::source_location::current());

PALLAS_EDSL_BINARY_OPERATOR(+, kAdd)
PALLAS_EDSL_BINARY_OPERATOR(-, kSub)
PALLAS_EDSL_BINARY_OPERATOR(*, kMul)
PALLAS_EDSL_BINARY_OPERATOR(/, kDiv)
PALLAS_EDSL_BINARY_OPERATOR(<, kLt)
PALLAS_EDSL_BINARY_OPERATOR(<=, kLe)
PALLAS_EDSL_BINARY_OPERATOR(>, kGt)
PALLAS_EDSL_BINARY_OPERATOR(>=, kGe)
PALLAS_EDSL_BINARY_OPERATOR(==, kEq)
PALLAS_EDSL_BINARY_OPERATOR(!=, kNe)
#undef PALLAS_EDSL_BINARY_OPERATOR
Value operator-(const Term& a);

// Math. Transcendentals (exp, exp2, log, tanh, rsqrt, sqrt, erf, logistic)
// need f32 operands: cast half-precision blocks to f32 first.
Value exp(const Value& x, std::source_location where = std::source_location::current());
Value exp2(const Value& x, std::source_location where = std::source_location::current());
Value log(const Value& x, std::source_location where = std::source_location::current());
Value tanh(const Value& x, std::source_location where = std::source_location::current());
Value rsqrt(const Value& x, std::source_location where = std::source_location::current());
Value sqrt(const Value& x, std::source_location where = std::source_location::current());
Value erf(const Value& x, std::source_location where = std::source_location::current());
Value logistic(const Value& x,
               std::source_location where = std::source_location::current());  // 1 / (1 + exp(-x))
Value abs(const Value& x, std::source_location where = std::source_location::current());
Value maximum(
    const Value& a, const Value& b,
    std::source_location where = std::source_location::current());  // NaN-propagating for floats
Value minimum(const Value& a, const Value& b,
              std::source_location where = std::source_location::current());
template <class N>
requires std::is_arithmetic_v<N> Value
maximum(const Value& a, N b, std::source_location where = std::source_location::current()) {
  return maximum(a, constant(static_cast<double>(b), a.dtype(), where), where);
}
template <class N>
requires std::is_arithmetic_v<N> Value
minimum(const Value& a, N b, std::source_location where = std::source_location::current()) {
  return minimum(a, constant(static_cast<double>(b), a.dtype(), where), where);
}
/// Elementwise `cond ? a : b`; cond is i1. A literal takes the other side's dtype.
Value select(const Value& cond, const Value& a, const Value& b,
             std::source_location where = std::source_location::current());
template <class N>
requires std::is_arithmetic_v<N> Value
select(const Value& cond, const Value& a, N b,
       std::source_location where = std::source_location::current()) {
  return select(cond, a, constant(static_cast<double>(b), a.dtype(), where), where);
}
template <class N>
requires std::is_arithmetic_v<N> Value
select(const Value& cond, N a, const Value& b,
       std::source_location where = std::source_location::current()) {
  return select(cond, constant(static_cast<double>(a), b.dtype(), where), b, where);
}
/// Broadcasts numpy-style (trailing dims aligned, extent-1 dims stretched).
Value broadcast_to(const Value& x, std::vector<int64_t> shape,
                   std::source_location where = std::source_location::current());
/// The same elements, in row-major order, in `shape` of the same element
/// count: a [1, 2048] slice of a 2-D ref as a [2048] row, or a [2048] chunk
/// as [256, 8], whose reductions over axis 1 fold each 16-byte run of bf16
/// in the thread that holds it (the GPU's layouts are defined on the
/// flattened block, so a reshape moves no data).
Value reshape(const Value& x, std::vector<int64_t> shape,
              std::source_location where = std::source_location::current());
/// The 2-D block `x` transposed: result (i, j) is x (j, i). On the GPU it
/// goes through shared memory (each thread's runs are written in rows and
/// read back in columns).
Value transpose(const Value& x, std::source_location where = std::source_location::current());

/// Registers per thread of a warp-specialized pipeline's warpgroups after
/// setmaxnreg (multiples of 8 in [24, 256]); the kernel launches with their
/// mean, so what the producer gives up the consumer takes.
struct WarpSpecialization {
  int producer_registers = 40;
  int consumer_registers = 232;
};

/// A persistent grid (spec.persistent): programs, one per resident CTA, each
/// walk the tiles of the parallel axes. `group_rows` groups the tile plane
/// (the last two parallel axes, rows and columns) into bands of that many
/// rows, swept column by column, so that the programs running at once share
/// rows of A and columns of B in L2 (Triton's GROUP_M). 1: row-major.
///
/// `cluster` > 1 (2 or 4) runs the programs in thread-block clusters of that
/// many CTAs (Hopper; CUTLASS's cluster shape along M) wherever the tile
/// rows divide by it: a cluster walks the tile plane as one program would a
/// plane of rows / cluster rows, its CTA of rank r taking tile row
/// `cluster * row + r` of the same column. Staged input blocks whose index
/// map does not read the row axis (matmul's B, [K, N] or [N, K]) are then the
/// same for every CTA of a cluster, and a warp-specialized TMA pipeline loads
/// them once per cluster with multicast copies (BlockOp's `multicast`): a
/// 128 x 256 tile's K step reads 16 + 32 / 2 KiB from L2 instead of 48. The
/// entry point asks for clusters when the rows divide by `cluster` (else
/// clusters of 1, the plain walk); the launch falls back to 1 where the
/// device or backend has none (the host; sm_80). Worked example, a [4, 3]
/// tile plane, cluster 2, group_rows 1, W = 4 programs (2 clusters): the
/// cluster plane is [2, 3]; cluster 0 walks its tiles 0, 2, 4 = (0,0) (0,2)
/// (1,1), so program 0 (rank 0) does tiles (0,0) (0,2) (2,1) and program 1
/// (rank 1) does (1,0) (1,2) (3,1).
///
/// `stream_k` (CUTLASS's stream-K, its data-parallel + stream-K hybrid; no
/// clusters) splits the last tiles' K steps between the programs, so that a
/// last wave of tiles that would keep only some SMs busy is shared by all.
/// With T tiles, K steps a tile, W programs and P = `stream_k_parts`:
///  - the first D = max(T / W - 1, 0) rounds are whole tiles as above
///    (program w: tiles w, w + W, ...);
///  - the T' = T - D W tiles left (T' < 2 W) are one line of units, h =
///    min(P, K) a tile (unit i of a tile is its steps [i K / h, (i + 1) K /
///    h)), cut into runs of U = cdiv(T' h, W) units: program w runs units
///    [w U, w U + U) of the line (clamped to it; the programs past the
///    line's end run nothing there). Every run starts and ends on a unit
///    boundary, so the programs stay in at most h phases of K: at any moment
///    the programs that read a row of A or a column of B at all read it at
///    one of h K steps, and L2 serves the rest. (Runs cut anywhere put every
///    program at its own K step: on an H100, 1024 x 11008 x 4096 in 128 x 256
///    tiles read 448 MB from DRAM against 88 MB for 1024 x 8448 (whole
///    rounds), 1348 ns a K step on average against 939.) A tile is then run whole
///    or in up to P parts by consecutive programs (a middle part is a whole
///    run): with P = 2 a tile's one cut is at K / 2, and the launch has at
///    most one program per tile; with P = 3 at K / 3 and 2 K / 3, and the
///    launch has up to three programs per tile, so that fewer tiles than SMs
///    still use every SM;
///  - unless the cut saves less than an eighth of the steps the plain walk
///    takes for those tiles (cdiv(T', W) K, its last one or two rounds,
///    against the longest run's cdiv(U K, h)): then, as when W divides T,
///    every tile is run whole (the plain walk). A cut tile costs its parts a
///    meeting (below), worth it only for a real gain. With P = 2 that is
///    where T' <= 1.5 W: the cut then saves half a tile's steps.
/// tile_run() tells the body how it runs the tile of the current step; the
/// parts' sum is the body's to make (in features' persistent_wgmma_stream_k
/// every part but the last to finish stores its partial accumulator, and the
/// last adds them; the matmul family walked this way until the twenty-fourth
/// session, and now runs clusters, which measured faster on an H100).
///
/// Worked examples. T = 5 tiles of K = 4 steps, W = 4, P = 2: D = 0, 10 half
/// tiles in runs of 3 (6 steps): program 0 runs tile 0 and steps 0-1 of tile
/// 1; program 1 steps 2-3 of tile 1 and tile 2; program 2 tile 3 and steps
/// 0-1 of tile 4; program 3 steps 2-3 of tile 4: at most 6 steps a program,
/// against 8 (two rounds of whole tiles), and the programs are at step 0 or
/// 2 of their tiles at once. (W = 3: runs of 4 halves, 8 steps: no gain, the
/// plain walk.) T = 3 tiles of K = 10, W = 5, P = 3: 9 thirds ([0, 3), [3,
/// 6), [6, 10) of a tile) in runs of 2: runs start at steps 0, 6, 13, 20, 26
/// of 30; tile 0 is runs 0 and 1, tile 1 runs 1 and 2, tile 2 runs 3 and 4:
/// 7 steps a program against 10 (P = 2: 3 programs, a tile each). T = 128
/// tiles of K = 64, W = 132, P = 3: runs of a tile: every tile whole, 4
/// programs idle.
struct Persistent {
  int group_rows = 1;
  int cluster = 1;
  bool stream_k = false;
  /// A stream-K walk's most parts per tile: 2 or 3 (above).
  int stream_k_parts = 2;
};

/// How dot multiplies: `a` given as [K, M] (its columns are the rows of the
/// product, Pallas' `dot(a.T, b)`), `b` given as [N, K] (its rows are the
/// columns of the product, Pallas' `dot(a, b.T)`).
struct DotOptions {
  bool transpose_a = false;
  bool transpose_b = false;
};
/// The matrix product `a @ b` of 2-D blocks: a [M, K] (or [K, M] with
/// transpose_a), b [K, N] (or [N, K] with transpose_b), both f16 or both
/// bf16, summed in f32; the result is [M, N] f32. On sm_90a it is a
/// warpgroup MMA (wgmma) reading a and b from shared memory: blocks staged
/// there (InShared) are read in place, others are stored there first. The
/// result is held in the WGMMA accumulator layout (M a multiple of 64, N of
/// 8, K of 16 on the GPU).
Value dot(const Value& a, const Value& b, DotOptions options = {},
          std::source_location where = std::source_location::current());
/// `acc + a @ b` in one product: the accumulator (an f32 [M, N] block, e.g.
/// loaded from spec.accumulator) is the MMA's input, not a separate add.
Value dot(const Value& a, const Value& b, const Value& acc, DotOptions options = {},
          std::source_location where = std::source_location::current());
/// A block of `shape` whose elements are their coordinate along `dimension`.
Value iota(std::vector<int64_t> shape, int64_t dimension, DType dtype = i32,
           std::source_location where = std::source_location::current());
/// The current program's index along a grid axis, and the grid extent.
Value program_id(int axis, std::source_location where = std::source_location::current());
Value num_programs(int axis, std::source_location where = std::source_location::current());

/// Thread-block clusters (KernelSpec::cluster_first_axis): this program's rank in its cluster
/// and the cluster's size, index values; 0 and 1 where programs run without clusters (the
/// host, sm_80, a launch that could not place them).
Value cluster_rank(std::source_location where = std::source_location::current());
Value cluster_size(std::source_location where = std::source_location::current());
/// Every program of the cluster meets here (all of their threads that have not exited):
/// what a program stored to its scratch before it, its peers read after it
/// (Ref::in_cluster_program). A program must not exit while a peer may still read its
/// scratch, so a cluster that reads its peers' scratch meets again after the reads. In a
/// cluster of one it is the program's own barrier.
void cluster_barrier(std::source_location where = std::source_location::current());

/// In a stream-K persistent grid (Persistent::stream_k), how this program
/// runs the tile of the current step (program_id gives the tile and its K
/// step as in any grid):
struct TileRun {
  /// i1: the last step this program runs of the tile: its last K step, or
  /// the program's last step (its part ends its run).
  Value last_step;
  /// index: how many programs run the tile's K steps, each a part of them:
  /// 1 (the tile is whole), 2 or (Persistent::stream_k_parts 3) 3.
  Value parts;
  /// index: which part this program runs, in K order: 0 (the tile's first K
  /// step is in it) to parts - 1 (its last is).
  Value part;
  /// index: of a tile in parts, the first of its parts - 1 cuts (the cut
  /// after run r is number r, in [0, programs - 2]): cuts split .. split +
  /// parts - 2 are the tile's alone, so each gives the tile a slot for a
  /// partial result and a semaphore to meet at. Every part of the tile gets the
  /// same split. Worked examples (Persistent's): T = 5, K = 4, W = 4: tile 1 is
  /// split 0, tile 4 split 2; T = 3, K = 10, W = 5: tile 0 split 0 (cut 0),
  /// tile 1 split 1 (cut 1), tile 2 split 3 (cut 3); T = 1, K = 9, W = 3, P =
  /// 3: runs of a third, tile 0 in three parts, split 0 (cuts 0 and 1). 0 for
  /// a whole tile.
  Value split;
};
TileRun tile_run(std::source_location where = std::source_location::current());

// Reductions. Without an axis they reduce every element to a scalar; with one,
// they reduce that axis (kept as extent 1 with keepdims). Floats: sum adds in
// the block's dtype (cast to f32 first for half precision), max/min propagate
// NaN. The GPU lowers full reductions (warp shuffles, then shared memory).
Value sum(const Value& x, std::source_location where = std::source_location::current());
Value max(const Value& x, std::source_location where = std::source_location::current());
Value min(const Value& x, std::source_location where = std::source_location::current());
Value sum(const Value& x, int64_t axis, bool keepdims = false,
          std::source_location where = std::source_location::current());
Value max(const Value& x, int64_t axis, bool keepdims = false,
          std::source_location where = std::source_location::current());
Value min(const Value& x, int64_t axis, bool keepdims = false,
          std::source_location where = std::source_location::current());

/// `for (i = lo; i < hi; ++i) carry = body(i, carry)`, carrying any number of
/// values (scalars or blocks) through the loop; returns the final carry.
/// `lo` and `hi` are index values (program ids, constants, ...).
std::vector<Value> fori(const Value& lo, const Value& hi, std::vector<Value> carry,
                        const std::function<std::vector<Value>(Value i, std::vector<Value>)>& body,
                        std::source_location where = std::source_location::current());
/// `while (cond(carry)) carry = body(carry)`, carrying any number of values
/// (scalars or blocks); returns the final carry. `cond` returns a scalar i1
/// that must be the same in every thread of the program (computed from
/// scalars, program ids, semaphores or full reductions), like when().
std::vector<Value> while_loop(const std::function<Value(std::vector<Value>)>& cond,
                              const std::function<std::vector<Value>(std::vector<Value>)>& body,
                              std::vector<Value> carry,
                              std::source_location where = std::source_location::current());
/// `if (cond) body()`, for a scalar condition that is the same in every
/// thread of the program (computed from program ids, semaphores, scalars).
void when(const Value& cond, const std::function<void()>& body,
          std::source_location where = std::source_location::current());
Value index(int64_t value,
            std::source_location where = std::source_location::current());  // an index constant

//===----------------------------------------------------------------------===//
// Operands and refs
//===----------------------------------------------------------------------===//

/// Block indices returned by an index map: `at(p[0], 0)`.
class Idx {
 public:
  Idx(const Value& v) : value_(v) {}                    // NOLINT
  Idx(int64_t c) : constant_(c), is_constant_(true) {}  // NOLINT
  Idx(int c) : Idx(static_cast<int64_t>(c)) {}          // NOLINT
  Value value() const;

 private:
  Value value_;
  int64_t constant_ = 0;
  bool is_constant_ = false;
};
/// Who shares a semaphore array (Pallas' block-local and global scopes).
enum class SemaphoreScope {
  kGlobal,   // one array for the whole launch
  kProgram,  // one array per program (per CUDA block, or per tile of a persistent grid:
             // sequential grid axes share it)
};

/// Int32 counters in global memory, from the runtime's per-device pool: zero
/// when the kernel starts, and every kernel must leave them at zero (the
/// emulator backend checks). Each operation is done once per program, by one
/// thread after a barrier of the program's threads, so it orders the whole
/// program's memory accesses:
///   signal: atomic add, release (the program's earlier writes are visible to
///           whoever sees the new value);
///   wait:   blocks until the counter is at least `value`, then subtracts
///           `value`, acquire (the signallers' writes are visible after it);
///   add:    atomic add, acquire and release; every thread gets the old value;
///   read:   acquire load.
/// With kProgram scope `index` addresses the current program's counters;
/// signal_program reaches another program's.
class Semaphores {
 public:
  Semaphores() = default;
  Semaphores(int operand, SemaphoreScope scope) : operand_(operand), scope_(scope) {}
  void signal(const Idx& index, const Value& inc,
              std::source_location where = std::source_location::current()) const;
  void signal(const Idx& index, std::source_location where = std::source_location::current()) const;
  /// kProgram scope: signals counter `index` of program `program` (its linear
  /// index over the parallel grid axes, row-major: ((p0 * n1) + p1) * n2 + p2).
  void signal_program(const Value& program, const Idx& index, const Value& inc,
                      std::source_location where = std::source_location::current()) const;
  void wait(const Idx& index, const Value& value,
            std::source_location where = std::source_location::current()) const;
  void wait(const Idx& index, std::source_location where = std::source_location::current()) const;
  Value add(const Idx& index, const Value& value,
            std::source_location where = std::source_location::current()) const;
  Value read(const Idx& index, std::source_location where = std::source_location::current()) const;
  int operand() const { return operand_; }
  SemaphoreScope scope() const { return scope_; }

 private:
  int operand_ = -1;
  SemaphoreScope scope_ = SemaphoreScope::kGlobal;
};

/// A run-time check of values only the kernel can read (device memory), like
/// Pallas' checkify.check. Declared with spec.check(message); in the body,
/// fail_if(failed, values) records a failure of the program where the scalar
/// `failed` is true. The launch then reports kInvalidArgument with the
/// message, "{0}", "{1}" and "{2}" replaced by `values` (scalar integers):
/// as its status on the host and emulator backends; on the CUDA backend
/// through pallas::take_device_errors, or at once with
/// Launch::check_device_errors. The first failing program's values are
/// reported; the count of failing programs is kept.
class Check {
 public:
  Check() = default;
  Check(int errors_operand, int check) : operand_(errors_operand), check_(check) {}
  /// `failed` must be the same in every thread of the program (computed from
  /// scalars, program ids, load_scalar, semaphores), like when().
  void fail_if(const Value& failed, const std::vector<Value>& values = {},
               std::source_location where = std::source_location::current()) const;

 private:
  int operand_ = -1;
  int check_ = -1;
};

/// A handle to a declared operand.
struct Operand {
  int index = -1;
};

/// The block of an operand the current program sees (Pallas' Ref).
class Ref {
 public:
  Ref(void* impl, int operand) : impl_(impl), operand_(operand) {}
  /// Loads the whole block; elements past the array edge read as 0.
  Value load(std::source_location where = std::source_location::current()) const;
  /// Loads the static slice [offsets, offsets + sizes) of the block.
  Value load(std::vector<int64_t> offsets, std::vector<int64_t> sizes,
             std::source_location where = std::source_location::current()) const;
  /// Stores a whole block; elements past the array edge are skipped.
  void store(const Value& value,
             std::source_location where = std::source_location::current()) const;
  /// Stores `value` into the static slice starting at `offsets`.
  void store(const Value& value, std::vector<int64_t> offsets,
             std::source_location where = std::source_location::current()) const;
  /// Loads the slice of static `sizes` at run-time `offsets` (index values or
  /// constants), one per block dim; elements past the array edge read as 0.
  Value load_at(const std::vector<Idx>& offsets, std::vector<int64_t> sizes,
                std::source_location where = std::source_location::current()) const;
  /// The same, with elements past the array edge reading as `fill` (Pallas'
  /// `other`): a max over a row loaded with fill -inf needs no mask.
  Value load_at(const std::vector<Idx>& offsets, std::vector<int64_t> sizes, double fill,
                std::source_location where = std::source_location::current()) const;
  /// load_at of a slice the spec knows lies inside the array along the last
  /// dim (the full chunks of a row, before its last partial one): the GPU
  /// skips the row-end test of each 16-byte run. The emulator checks every
  /// access, so a slice that is not inside fails there.
  Value load_inside(const std::vector<Idx>& offsets, std::vector<int64_t> sizes,
                    std::source_location where = std::source_location::current()) const;
  /// Stores `value` (a block, or a scalar: one element) at run-time `offsets`;
  /// elements past the array edge are skipped.
  void store_at(const Value& value, const std::vector<Idx>& offsets,
                std::source_location where = std::source_location::current()) const;
  /// The block shape; -1 for a full dim.
  std::vector<int64_t> shape() const;
  /// The run-time extent of the array along block dim `dim` (an index value).
  Value extent(int dim, std::source_location where = std::source_location::current()) const;
  /// One element at run-time `indices` (one per block dim), the same value in
  /// every thread; 0 past the array edge.
  Value load_scalar(const std::vector<Idx>& indices,
                    std::source_location where = std::source_location::current()) const;
  DType dtype() const;
  const std::string& name() const;

  /// Pallas' TransposeTransform (`transpose_ref(ref, (1, 0))`): a view of a
  /// 2-D block with its dims swapped; no data moves. Element (i, j) of the
  /// view is element (j, i) of the block: loads through it return the
  /// transposed block, stores write the block transposed, shape() and
  /// extent() are swapped. wgmma takes a view as operand a or b: for a
  /// block w staged as [N, K], wgmma(acc, a, w.transposed()) multiplies by
  /// the [K, N] view, i.e. computes a @ w^T (the same as {.transpose_b}),
  /// still reading w in place; for a block x staged as [K, M] (tiled [tk, 64]
  /// with swizzle 128, as a [K, N] b), wgmma(acc, x.transposed(), b) computes
  /// x^T @ b (the same as {.transpose_a}), reading x in place M-major. Other
  /// APIs that take a Ref (copies, pipelines) reject a view.
  Ref transposed(std::source_location where = std::source_location::current()) const;
  /// Whether this is a transposed view.
  bool is_transposed() const { return transposed_; }
  /// The same block of a scratch operand (spec.scratch: shared memory) in the program of rank
  /// `rank` (an index value below cluster_size()) of this program's thread-block cluster
  /// (distributed shared memory), for loads only: the peer's contents as they were when both
  /// passed a cluster_barrier() (the peer must not store to it again before the reads, nor
  /// exit: meet at another cluster_barrier() after them). In a cluster of one, rank 0 is the
  /// program itself. Worked example, split-K's sum over a cluster of S programs (the splits
  /// of one tile): each stores its partial tile to scratch `part`, cluster_barrier(), then
  /// program r sums part.in_cluster_program(s) over s of the rows it finishes, then
  /// cluster_barrier() again.
  Ref in_cluster_program(const Value& rank,
                         std::source_location where = std::source_location::current()) const;

 private:
  friend struct RefAccess;  // the tracer's
  /// The block the view looks at (itself when not a view).
  Ref base() const { return Ref(impl_, operand_); }
  void* impl_;
  int operand_;
  bool transposed_ = false;
};

/// Pallas' wgmma: starts `acc += a @ b` (a^T with transpose_a, b^T with transpose_b) on
/// blocks staged in shared memory (InShared) into an accumulator
/// (spec.accumulator), asynchronously on sm_90a: the multiply may still read
/// a and b after the call. wgmma_wait(n) returns once at most the newest n
/// multiplies are in flight; until then their operands must not be
/// overwritten (with a pipeline, delay_release keeps stage buffers alive).
/// Loading or storing the accumulator first waits for the multiplies into
/// it, and so for those started before them (they complete in order): after
/// wgmma(s, ...) and then wgmma(o, ...), s.load() leaves o's multiply
/// running (FlashAttention-3's intra-warpgroup overlap). Where
/// that is not known from the ops before the access in its block (the
/// multiply was in an earlier loop step, or under a `when`), it waits for
/// all of them. Targets without asynchronous MMAs (the host, sm_80) multiply
/// on the spot.
void wgmma(const Ref& acc, const Ref& a, const Ref& b, DotOptions options = {},
           std::source_location where = std::source_location::current());
/// wgmma with `a` a block value ([M, K] f16/bf16) held in registers, e.g.
/// attention's probabilities computed from another accumulator: on sm_90a
/// each warpgroup's threads pass their WGMMA-layout registers to the
/// multiply (values in another layout are converted to it first).
void wgmma(const Ref& acc, const Value& a, const Ref& b, DotOptions options = {},
           std::source_location where = std::source_location::current());
void wgmma_wait(int pending, std::source_location where = std::source_location::current());

using Indices = std::vector<Idx>;
using ProgramIds = std::vector<Value>;
template <class... A>
Indices at(A&&... indices) {
  return Indices{Idx(std::forward<A>(indices))...};
}
using IndexMap = std::function<Indices(const ProgramIds&)>;

//===----------------------------------------------------------------------===//
// Pipelines inside a body (Pallas' emit_pipeline)
//===----------------------------------------------------------------------===//

/// One operand of emit_pipeline: at step s the body sees the block of
/// `array` (a Ref whose BlockSpec is the whole array: every dim full) with
/// block shape `block` and block indices `index_map(s)`, like a BlockSpec on
/// the pipeline's one sequential axis (Pallas' in_specs and out_specs: an
/// output operand's block is stored by the body). With `staging` the block is
/// staged in shared memory by TMA in `buffers` stage buffers: an input's
/// copies run ahead of the body, an output's block is stored whole by the
/// body (once per step, not under a condition) and copied out by TMA while
/// the next steps run (on sm_80, stored from registers).
struct PipelineOperand {
  Ref array;
  std::vector<BlockDim> block;
  std::function<Indices(const Value& step)> index_map;
  std::optional<InShared> staging;
};

/// `for (s = first; s < end; ++s) carry = body(s, blocks, carry)` where the
/// blocks of step s are fetched ahead: with staged operands the GPU keeps
/// the copies of up to `max_concurrent_steps` steps in flight (step s + n - 1
/// is requested while the body works on step s), each stage buffer with its
/// own mbarrier and phase. `first` and `end` are index values the whole
/// program agrees on. The kernel's `_direct` instance (no TMA) runs the same
/// loop with the blocks loaded straight from global memory.
///
/// Worked example (rows.h): a program summing chunks [first, end) of row r
/// of x: operand {x, {squeezed, Blocked{2048}}, [&](Value c) { return at(r, c); },
/// InShared{.swizzle = 0}}; the body loads its [2048] block and adds it to the carry.
std::vector<Value> emit_pipeline(
    const Value& first, const Value& end, std::vector<PipelineOperand> operands,
    std::vector<Value> carry,
    const std::function<std::vector<Value>(Value step, std::vector<Ref> blocks,
                                           std::vector<Value> carry)>& body,
    int max_concurrent_steps = kDefaultPipelineDepth,
    std::source_location where = std::source_location::current());

//===----------------------------------------------------------------------===//
// Explicit async copies (Pallas' run_scoped, copy_gmem_to_smem, barriers)
//===----------------------------------------------------------------------===//
//
// The hand-written form of what staged blocks and pipelines do for you: a
// body allocates shared-memory buffers and mbarriers for a region
// (run_scoped), copies slices of whole-array Refs (a BlockSpec with every dim
// full is Pallas' GMEM ref) into the buffers, waits on the barriers, works
// on the buffers through their Refs, and copies buffers back out. Worked
// example, a double-buffered loop over the [64, 32] row blocks of x
// (tests/kernels/features.cc, explicit_row_blocks):
//
//   run_scoped({{"even", f32, {64, 32}}, {"odd", f32, {64, 32}}}, {{"ready", 1, 2}},
//              [&](std::vector<Ref> bufs, std::vector<Barriers> bars) { ... })
//
// copies block 0 into `even` on ready[0]; step k copies block k + 1 into the
// other buffer on ready[(k + 1) % 2], waits on ready[k % 2] (the k / 2-th
// wait on it: phase parity (k / 2) & 1, tracked for the body), reads its
// buffer, and releases it (a barrier of the program's threads) before step
// k + 1 refills it.
//
// Every copy, wait and arrive is done once by the program: every thread
// reaches it (outside conditions that differ between threads, as with
// when()). The kernel's `_direct` instance (arrays TMA cannot copy) runs the
// same body with the threads copying through registers; sm_80 uses cp.async.

/// A buffer in the program's shared memory for async copies: `shape` is the
/// box of the copies to and from it (its rank is that of the arrays it is
/// copied with), `swizzle` TMA's swizzle in bytes (0, 32, 64, 128; the
/// last dim spans at most that many bytes unless 0, and a multiple of 16).
/// (Unlike a staged block, where Pallas' rule asks for exactly one span.)
/// Its elements are read and written through its Ref in whole 16-byte runs
/// (block loads and stores at static offsets).
struct SharedBuffer {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int swizzle = 128;
};

/// `count` mbarriers (Pallas' Barrier(num_arrivals, num_barriers)): each
/// completes a phase once it has had `arrivals` arrivals (a copy_gmem_to_smem
/// is one, a barrier_arrive is one) and the bytes of the copies on it landed.
struct Barrier {
  std::string name;
  int arrivals = 1;
  int count = 1;
};

class Barriers;
/// Barrier `index` of an array of barriers; a Barriers is its barrier 0.
struct BarrierRef {
  BarrierRef(const Barriers& array, Idx index = 0);  // NOLINT: barrier 0 implicitly
  const Barriers* array;
  Idx index;
};

/// An array of barriers of run_scoped; `bars[i]` is barrier i (an index value or constant).
class Barriers {
 public:
  Barriers(void* impl, int id) : impl_(impl), id_(id) {}
  BarrierRef operator[](const Idx& index) const { return BarrierRef(*this, index); }
  int count() const;
  int id() const { return id_; }
  void* impl() const { return impl_; }

 private:
  void* impl_;
  int id_;
};

/// Runs `body` with shared-memory buffers and barriers that live only while
/// it runs (the shared-memory plan reuses their bytes after it); the
/// barriers start at phase 0 each time. When it ends the program waits for
/// its copies to global memory to have read their buffers.
void run_scoped(
    std::vector<SharedBuffer> buffers, std::vector<Barrier> barriers,
    const std::function<void(std::vector<Ref> buffers, std::vector<Barriers> barriers)>& body,
    std::source_location where = std::source_location::current());
/// Copies the slice of `src` (a whole-array Ref) at element `offsets`, of
/// `dst`'s shape, into buffer `dst`, completing on `barrier` (one arrival and
/// the slice's bytes). Elements outside the array read as zero. Every copy of
/// one array uses buffers of one shape and swizzle (its TMA descriptor's box).
void copy_gmem_to_smem(const Ref& src, const std::vector<Idx>& offsets, const Ref& dst,
                       const BarrierRef& barrier,
                       std::source_location where = std::source_location::current());
struct CopyOutOptions {
  bool add = false;          // add the buffer to the array (f32, i32) instead of writing it
  bool commit_group = true;  // end a bulk group (false: commit_smem_to_gmem_group later)
};
/// Copies buffer `src` to the slice of `dst` (a whole-array output Ref) at
/// element `offsets`; elements outside the array are not written. `src`
/// must be fenced first (commit_smem) and not written again before
/// wait_smem_to_gmem says the copy has read it.
void copy_smem_to_gmem(const Ref& src, const Ref& dst, const std::vector<Idx>& offsets,
                       CopyOutOptions options = {},
                       std::source_location where = std::source_location::current());
/// Prefetches the slice of `array` at element `offsets` (of its copies' box)
/// into L2; a hint (nothing without TMA).
void async_prefetch(const Ref& array, const std::vector<Idx>& offsets,
                    std::source_location where = std::source_location::current());
/// Every thread waits for the barrier's current phase (tracked: the n-th wait
/// on a barrier waits for its phase n - 1) and then sees the bytes copied.
void barrier_wait(const BarrierRef& barrier,
                  std::source_location where = std::source_location::current());
/// The program arrives once on the barrier, after all its threads got here.
void barrier_arrive(const BarrierRef& barrier,
                    std::source_location where = std::source_location::current());
/// The program's shared-memory writes become visible to the copies issued after it.
void commit_smem(std::source_location where = std::source_location::current());
/// Ends a bulk group of copies to global memory (after CopyOutOptions{.commit_group = false}).
void commit_smem_to_gmem_group(std::source_location where = std::source_location::current());
/// Waits until at most the newest `n` bulk groups of copies to global memory
/// are in flight (with `wait_read_only`, until the others have read their buffers).
void wait_smem_to_gmem(int n, bool wait_read_only = false,
                       std::source_location where = std::source_location::current());

//===----------------------------------------------------------------------===//
// The spec
//===----------------------------------------------------------------------===//

enum class Role { kInput, kOutput, kScalar, kSemaphores, kWorkspace, kScratch, kErrors };

/// How the programs along a grid axis run (Pallas' dimension_semantics).
/// Parallel programs may run in any order, concurrently; the programs along
/// an arbitrary axis run one after another, in order, as a loop inside one
/// GPU program (CUDA block), so scratch and registers carry across them.
enum class Semantics { kParallel, kArbitrary };
inline constexpr Semantics parallel = Semantics::kParallel;
inline constexpr Semantics arbitrary = Semantics::kArbitrary;

/// Everything a spec declared, for the tracer and the emitter.
struct OperandDecl {
  std::string name;
  Role role;
  DType dtype;
  std::vector<DimExpr> shape;  // array dims (each a plain run-time dim)
  std::vector<BlockDim> block;
  IndexMap index_map;
  bool has_block = false;
  int aliased_to = -1;              // for an input: the output operand it aliases
  int aliased_from = -1;            // for an output: the input operand aliased to it
  std::optional<double> min_value;  // for a scalar: the entry point rejects smaller values
  SemaphoreScope semaphore_scope = SemaphoreScope::kGlobal;  // for semaphores
  std::vector<int64_t> scratch_shape;                        // for scratch
  bool accumulator = false;        // scratch held in registers (KernelSpec::accumulator)
  std::optional<InShared> staged;  // a block staged in shared memory by TMA
  /// The staged block's extent per array dim (1 for squeezed dims): from the
  /// BlockSpec, or from the emit_pipeline that stages blocks of the operand.
  std::vector<int64_t> staged_block;
};

/// Per dim, the box of one TMA copy of a staged block of `extents`: the
/// InShared tiling on the trailing dims it names, elsewhere the whole dim or
/// kTmaMaxBoxDim elements (the block is several copies along longer dims).
std::vector<int64_t> tma_copy_box(const std::vector<int64_t>& extents,
                                  const std::vector<int64_t>& tiling = {});

class KernelSpec {
 public:
  KernelSpec(std::string op, std::vector<int> instance_choice);

  /// One kernel instance per option; returns this instance's dtype.
  DType dtype_param(const std::string& name, std::vector<DType> options);
  /// One instance per combination; returns this instance's dtypes.
  std::vector<DType> dtype_params(const std::vector<std::string>& names,
                                  std::vector<std::vector<DType>> combinations);
  /// One kernel instance per option behind the same entry point, which picks
  /// one at run time: `choose`, an expression of the dims (and of
  /// device_shared_bytes()), is the index of the option to launch. Returns this instance's option,
  /// so that each instance declares only its own path's grid, workspaces and body (and its kernel
  /// holds only that path's code and registers). At most one per spec; the
  /// instance is named after the option: softmax_bf16_tile16.
  int variant(const std::string& name, std::vector<std::string> options, DimExpr choose);
  /// DimExpr::device_shared_bytes(), for a variant's chooser.
  static DimExpr device_shared_bytes() { return DimExpr::device_shared_bytes(); }
  /// DimExpr::persistent_programs(), for a workspace's or semaphores' count.
  static DimExpr persistent_programs() { return DimExpr::persistent_programs(); }
  /// A run-time array dim, bound by the first operand using it.
  DimExpr dim(const std::string& name);
  Operand input(const std::string& name, DType dtype, std::vector<DimExpr> shape);
  Operand output(const std::string& name, DType dtype, std::vector<DimExpr> shape);
  Scalar scalar(const std::string& name, DType dtype);
  /// A scalar the entry point checks to be at least `min` (and not NaN).
  Scalar scalar(const std::string& name, DType dtype, double min);
  /// A run-time check the body tests with Check::fail_if. `message` names
  /// what is wrong, with "{0}".."{2}" standing for the values fail_if
  /// records: "operand 'labels' element {0} is {1}, outside [0, {2})". The
  /// first check adds the kernel's error record (an operand with role
  /// kErrors, from the runtime; not a body Ref).
  Check check(const std::string& message);
  /// A condition on the run-time dims (`holds` non-zero) that the entry point
  /// checks before it launches, for shapes no instance serves; it fails with
  /// kInvalidArgument, `what` and the values of the dims `holds` reads:
  /// spec.require(le(d, 128), "the head dim 'd' (dim 3 of q, k, v and o) must be at most 128")
  /// gives "attention_bf16: the head dim 'd' (...) must be at most 128; d is 160".
  void require(DimExpr holds, std::string what);
  const std::vector<std::pair<DimExpr, std::string>>& requirements() const { return requirements_; }
  /// `count` int32 semaphores (an expression of dims, e.g. 1 or the grid
  /// size), shared by the whole launch or, with kProgram scope, `count` for
  /// each program.
  Semaphores semaphores(const std::string& name, DimExpr count,
                        SemaphoreScope scope = SemaphoreScope::kGlobal);
  /// Scratch of a static `shape` in the program's shared memory (a Pallas
  /// scratch_shape), uninitialised at the start of each program and kept
  /// across the iterations of its arbitrary grid axes. The body gets a Ref
  /// over it in declaration order. On the GPU every store to it is fenced by
  /// barriers of the program's threads, so any thread may load what another
  /// stored. It is planned into the kernel's one dynamic shared-memory buffer
  /// with the lowering's own buffers; a program may have up to 227 KiB in all
  /// (sm_90; sm_80 parts allow 163 KiB, which the launch checks).
  Operand scratch(const std::string& name, DType dtype, std::vector<int64_t> shape);
  /// An f32 matrix accumulator of a static [M, N] `shape` held in the
  /// program's registers (Pallas' ACC, a WGMMA accumulator): kept across the
  /// iterations of the arbitrary grid axes (a matmul's K axis), zero when the
  /// program starts (as Pallas allocates WGMMA accumulators) and, in a
  /// persistent grid, when each of its tiles starts. The body gets a Ref over it in declaration
  /// order and loads and stores it whole; `dot(a, b, acc.load())` multiplies
  /// into it. On the GPU it lives in the WGMMA accumulator layout, so M must
  /// be a multiple of 64 and N a multiple of 8.
  Operand accumulator(const std::string& name, std::vector<int64_t> shape);
  /// Global-memory scratch of `count` elements for this launch (not zeroed).
  /// The body gets a Ref over it (a full 1-D block) in declaration order.
  Operand workspace(const std::string& name, DType dtype, DimExpr count);
  /// The same, of `shape` (row-major, contiguous): the Ref is a full block of
  /// that rank, so stores past an extent are skipped and loads read 0 there
  /// (split-K's partial tiles keep only the rows D has).
  Operand workspace(const std::string& name, DType dtype, std::vector<DimExpr> shape);
  /// `output` is written in place over `input` (Pallas' input_output_aliases):
  /// the entry point takes one mutable tensor for both.
  void alias(Operand input, Operand output);
  /// Programs along `axes`, Pallas' grid. At most 3 of them may be parallel:
  /// those are launched as CUDA's x, y, z in order (a batched matmul's
  /// (b, i, j, arbitrary k) launches b, i, j); arbitrary axes loop inside a
  /// program.
  void grid(std::vector<DimExpr> axes);
  /// One entry per grid axis; without it every axis is parallel.
  void dimension_semantics(std::vector<Semantics> semantics);
  void block(Operand operand, std::vector<BlockDim> block_shape, IndexMap index_map);
  /// A block staged in shared memory by TMA (see InShared).
  void block(Operand operand, std::vector<BlockDim> block_shape, IndexMap index_map,
             InShared staging);
  /// Stage buffers per staged block on an arbitrary (pipelined) grid axis
  /// unless its InShared says otherwise (Pallas' max_concurrent_steps); 1 to kMaxPipelineDepth
  /// (16).
  void max_concurrent_steps(int steps);
  int max_concurrent_steps() const { return max_concurrent_steps_; }
  /// Steps a pipeline waits before refilling an input stage buffer (Pallas'
  /// delay_release): step k's buffers are refilled at the end of step
  /// k + delay, so a multiply still reading them after step k (a wgmma left
  /// in flight by wgmma_wait(1)) is done first. 0 (the default) to 3; every
  /// staged input needs more stage buffers than the delay.
  void delay_release(int steps);
  int delay_release() const { return delay_release_; }
  /// Pallas' warp-specialized pipeline: a second warpgroup (the producer)
  /// only issues the TMA copies of the grid's pipelined axis, waiting for
  /// the consumer to release each stage buffer, while the spec's warpgroup
  /// (the consumer) runs the body; setmaxnreg moves registers from the
  /// producer to the consumer. Applies to the staged instance (its `_direct`
  /// twin runs one warpgroup; the sm_80 form launches no producer: the
  /// consumers copy with cp.async). One arbitrary axis; staged blocks are inputs.
  void warp_specialize(WarpSpecialization ws);
  const std::optional<WarpSpecialization>& warp_specialization() const { return ws_; }
  /// A persistent grid (CUTLASS's persistent tile schedulers): the launch
  /// has one program per CTA the device keeps resident (SMs x occupancy on
  /// CUDA, EmulatorOptions::concurrent_programs on the emulator, one on the
  /// host), never more than the parallel axes' P tiles, and program w walks
  /// tiles w, w + W, w + 2 W, ... (W programs). Its arbitrary axis (exactly
  /// one) and the tiles are one loop of my_tiles x K steps, so a pipeline
  /// runs on across tiles: the next tile's first copies are in flight while
  /// this tile's last step and epilogue run, and the stage barriers are set
  /// up once per program. program_id / num_programs of every axis are the
  /// tile's own (unchanged bodies). Worked example, a [3, 4] tile plane,
  /// group_rows 2, W = 5: tiles in order (0,0) (1,0) (0,1) (1,1) (0,2) (1,2)
  /// (0,3) (1,3) (2,0) (2,1) (2,2) (2,3); program 1 does tiles 1, 6, 11:
  /// (1,0), (0,3), (2,3).
  void persistent(Persistent p = {});
  /// Programs that differ only along grid axis 0 (a parallel axis, launched as CUDA's x) run
  /// as one thread-block cluster, resident together on one GPC and reaching each other's
  /// scratch (Ref::in_cluster_program, cluster_barrier), wherever that axis has 2 to
  /// `max_programs` (at most 8, CUDA's portable cluster size) programs and the device has
  /// clusters: an sm_90 device with room for all of the grid's clusters at once, the emulator
  /// standing for sm_90 with room for one (EmulatorOptions::concurrent_programs); elsewhere
  /// (the host, sm_80, larger axes, too little room, Launch::max_cluster below the size) each
  /// program is its own cluster of one, so the body must be right for both, reading
  /// cluster_size(). Not with
  /// persistent(). Worked example, split-K's grid (s, i, j, k) with S splits of 4 of the tile
  /// (i, j): the cluster is the tile's S programs, {s, i, j} for s in [0, S).
  void cluster_first_axis(int max_programs);
  int cluster_first_axis_max() const { return cluster_first_axis_max_; }
  const std::optional<Persistent>& persistence() const { return persistent_; }
  /// Threads a program launches with: threads(), plus the producer warpgroup
  /// of a warp-specialized staged instance where it copies with TMA (sm_90
  /// on; `tma_copies` false: the sm_80 form, which has none).
  int launch_threads(bool tma_copies = true) const {
    return threads_ + (tma_copies && ws_ && !direct_ ? 128 : 0);
  }
  /// Used by the tracer (emit_pipeline): blocks of `operand`, of the extents
  /// `block` (per array dim), are staged in shared memory by a pipeline in
  /// the body. Checks TMA's rules as block(..., InShared) does.
  void stage_in_pipeline(int operand, const std::vector<BlockDim>& block, InShared staging);
  /// Used by the tracer (copy_gmem_to_smem, copy_smem_to_gmem, async_prefetch):
  /// operand `operand` is copied to and from buffers of `box` with `swizzle`.
  void stage_for_copies(int operand, const std::vector<int64_t>& box, int swizzle);
  /// The body receives one Ref per array operand (inputs, outputs, workspaces)
  /// in declaration order.
  template <class F>
  void body(F&& f);
  /// Threads per program on the GPU (a multiple of 32; default one warpgroup).
  void threads(int count) { threads_ = count; }
  /// A register bound per thread for ptxas (PTX .maxnreg, CUDA's
  /// __launch_bounds__ register cap); 0, the default, lets ptxas choose within
  /// the budget of three programs per SM. ptxas spills rather than exceed it,
  /// and the build's SASS checks fail on any spill (tests/sass).
  void max_registers(int count) { max_registers_ = count; }
  /// Elements per run of the GPU's strided layout (PallasLayouts.td): a
  /// power of two; 0, the default, is 16 bytes of the narrowest dtype the
  /// kernel moves. Longer runs put longer rows in one warp (a 4 x 512 bf16
  /// tile in runs of 16: 32 runs a row), each run several 16-byte accesses.
  void run_elements(int count) { run_elements_ = count; }

  // --- read by the tracer and the emitter ---
  const std::string& op() const { return op_; }
  std::string instance_name() const;
  /// The instance name without the variant's option: "softmax_bf16".
  std::string entry_name() const;
  int num_instances() const { return num_instances_; }
  const std::vector<int>& param_counts() const { return param_counts_; }
  const std::vector<OperandDecl>& operands() const { return operands_; }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  const std::vector<DimExpr>& grid_axes() const { return grid_; }
  /// kParallel for every axis unless dimension_semantics() said otherwise.
  Semantics semantics(size_t axis) const {
    return axis < semantics_.size() ? semantics_[axis] : Semantics::kParallel;
  }
  int threads() const { return threads_; }
  int max_registers() const { return max_registers_; }
  int run_elements() const { return run_elements_; }
  /// Whether any block is staged in shared memory (InShared).
  bool has_staged_blocks() const;
  /// The codegen traces a spec with staged blocks twice: as declared (the
  /// TMA instance, sm_90a) and with every block in registers (the `_direct`
  /// instance its entry point falls back to). Set before the spec runs.
  void set_direct(bool direct) { direct_ = direct; }
  bool direct() const { return direct_; }
  /// The direct twin a staged instance falls back to: its own (instance_name()
  /// + "_direct") unless another variant's twin is the same kernel (the
  /// matmul tiles and tiles128 instances: both twins tile 64 x 64), which it
  /// then shares, so that no kernel is compiled twice.
  std::string direct_twin_name() const {
    return shared_twin_.empty() ? instance_name() + "_direct" : shared_twin_;
  }
  void set_shared_twin(std::string twin) { shared_twin_ = std::move(twin); }
  /// A direct twin's variant options: its own and those of the instances
  /// sharing it (the options whose shapes it may be launched for).
  std::vector<int> twin_serves() const {
    std::vector<int> v{variant_index_};
    v.insert(v.end(), also_serves_.begin(), also_serves_.end());
    return v;
  }
  void add_twin_serves(int variant_index) { also_serves_.push_back(variant_index); }
  /// The messages of spec.check(), in declaration order.
  const std::vector<std::string>& check_messages() const { return checks_; }
  const std::function<void(std::span<const Ref>)>& body_fn() const { return body_; }
  size_t body_arity() const { return body_arity_; }
  bool has_body() const { return static_cast<bool>(body_); }
  /// The tracer traces the body as soon as it is declared, while the spec
  /// function's locals (captured by reference) are still alive.
  void set_body_hook(std::function<void(KernelSpec&)> hook) { on_body_ = std::move(hook); }
  std::vector<DType> instance_dtypes() const { return chosen_; }
  /// The variant's chooser, when the spec declared one, and this instance's option.
  const std::optional<DimExpr>& variant_chooser() const { return variant_chooser_; }
  int variant_index() const { return variant_index_; }
  [[noreturn]] void fail(const std::string& message) const;

 private:
  /// Fails naming `what` when `e` reads device_shared_bytes() or persistent_programs().
  void require_no_device(const DimExpr& e, const std::string& what) const;
  /// Fails naming `what` when `e` reads persistent_programs().
  void require_no_programs(const DimExpr& e, const std::string& what) const;
  template <class F, size_t... I>
  static void call_with_refs(F& f, std::span<const Ref> refs, std::index_sequence<I...>) {
    f(refs[I]...);
  }
  template <class T>
  struct arity : arity<decltype(&T::operator())> {};
  template <class C, class R, class... A>
  struct arity<R (C::*)(A...) const> : std::integral_constant<size_t, sizeof...(A)> {};
  template <class C, class R, class... A>
  struct arity<R (C::*)(A...)> : std::integral_constant<size_t, sizeof...(A)> {};

  Operand add_operand(const std::string& name, Role role, DType dtype, std::vector<DimExpr> shape);
  /// TMA's rules for staging blocks of `block_shape` of operand `index`.
  void check_staging(int index, const std::vector<BlockDim>& block_shape,
                     const InShared& staging) const;
  const OperandDecl& decl(Operand op, const char* what) const;

  std::string op_;
  std::vector<int> instance_choice_;
  int params_seen_ = 0;
  int num_instances_ = 1;
  std::vector<DType> chosen_;
  std::optional<DimExpr> variant_chooser_;
  int variant_index_ = 0;
  std::string variant_name_;
  std::vector<int> param_counts_;
  std::vector<OperandDecl> operands_;
  std::vector<std::string> dim_names_;
  std::vector<DimExpr> grid_;
  std::vector<Semantics> semantics_;
  int threads_ = 128;
  int max_registers_ = 0;
  int run_elements_ = 0;
  bool direct_ = false;
  int cluster_first_axis_max_ = 0;  // cluster_first_axis; 0: no clusters along axis 0
  std::string shared_twin_;
  std::vector<int> also_serves_;
  int max_concurrent_steps_ = kDefaultPipelineDepth;
  int delay_release_ = 0;
  std::optional<WarpSpecialization> ws_;
  std::optional<Persistent> persistent_;
  std::vector<std::string> checks_;
  std::vector<std::pair<DimExpr, std::string>> requirements_;
  int errors_operand_ = -1;
  std::function<void(std::span<const Ref>)> body_;
  size_t body_arity_ = 0;
  std::function<void(KernelSpec&)> on_body_;
};

template <class F>
void KernelSpec::body(F&& f) {
  using Fn = std::decay_t<F>;
  constexpr size_t n = arity<Fn>::value;
  body_arity_ = n;
  body_ = [fn = Fn(std::forward<F>(f))](std::span<const Ref> refs) mutable {
    call_with_refs(fn, refs, std::make_index_sequence<n>{});
  };
  if (on_body_) on_body_(*this);
}

//===----------------------------------------------------------------------===//
// Registration
//===----------------------------------------------------------------------===//

using SpecFn = void (*)(KernelSpec&);
struct Registration {
  const char* op;
  SpecFn fn;
  const char* file;
};
/// All specs linked into the tool, sorted by name.
std::vector<Registration> registered_specs();
struct Registrar {
  Registrar(const char* op, SpecFn fn, const char* file);
};

}  // namespace pallas::edsl

/// Declares and registers a kernel spec; the body sees `spec`.
#define PALLAS_KERNEL(op_name)                                         \
  static void pallas_spec_##op_name(::pallas::edsl::KernelSpec& spec); \
  static const ::pallas::edsl::Registrar pallas_registrar_##op_name(   \
      #op_name, &pallas_spec_##op_name, __FILE__);                     \
  static void pallas_spec_##op_name([[maybe_unused]] ::pallas::edsl::KernelSpec& spec)

#endif  // PALLAS_EDSL_SPEC_H

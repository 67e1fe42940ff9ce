// matmul (B as [K, N]) and matmul_bt (B as [N, K]), their batched forms, and
// the products with an epilogue (gemm, gemm_bt, linear_bias, linear_bias_gelu,
// linear_bias_silu, linear_residual), on every backend against a float64
// reference on fresh random data: dims that are not multiples of the
// 128 x 64 x 64 and 64 x 64 x 64 tiles (1, 7, 63, 65, 127, 129, 257, ...), a
// partial last K step, row strides TMA can copy and strides it cannot (the
// direct twin), gemm's beta == 0 with NaNs in C, batch strides with gaps,
// decode shapes through the split-K instance, and the sm_80 form (ldmatrix +
// mma.sync) on the emulator. Outputs are poisoned; the padding of
// strided outputs and the gaps between batch entries must stay untouched.

#include "test_support.h"

#include <pallas/detail/kernel_image.h>
#include <pallas/kernels.h>

#include <tuple>

namespace pallas::testing {
namespace {

struct MatmulShape {
  int64_t m, n, k;
  int64_t pad = 0;  // elements after each row of a, b, c (or residual) and d
  // batch > 0: batched_matmul(_bt) on [batch, ., .] arrays, each matrix
  // followed by `batch_gap` elements (its batch stride is rows * row stride + gap).
  int64_t batch = 0, batch_gap = 0;
  // Broadcast::kA / kB: that input's leading stride is 0 (its batch stride when batched,
  // else its row stride): every batch entry (row) reads the first one, as a shared weight.
  enum class Broadcast { kNone, kA, kB } broadcast = Broadcast::kNone;
};

/// The product's op and what its epilogue does with acc = A @ B (or A @ B^T).
enum class Epilogue {
  kNone,        // matmul, matmul_bt: D = acc
  kAlphaBetaC,  // gemm, gemm_bt: D = alpha acc + beta C (C unread when beta == 0)
  kBias,        // linear_bias: Y = acc + bias[col]
  kBiasGelu,    // linear_bias_gelu: Y = gelu_tanh(acc + bias[col])
  kBiasSilu,    // linear_bias_silu: Y = silu(acc + bias[col])
  kResidual,    // linear_residual: Y = acc + R
};

struct Product {
  bool b_transposed;
  Epilogue epilogue = Epilogue::kNone;
  float alpha = 1.0f, beta = 0.0f;
};

const char* op_name(Product p, const MatmulShape& s) {
  switch (p.epilogue) {
    case Epilogue::kNone:
      if (s.batch > 0) return p.b_transposed ? "batched_matmul_bt" : "batched_matmul";
      return p.b_transposed ? "matmul_bt" : "matmul";
    case Epilogue::kAlphaBetaC:
      return p.b_transposed ? "gemm_bt" : "gemm";
    case Epilogue::kBias:
      return "linear_bias";
    case Epilogue::kBiasGelu:
      return "linear_bias_gelu";
    case Epilogue::kBiasSilu:
      return "linear_bias_silu";
    case Epilogue::kResidual:
      return "linear_residual";
  }
  return "?";
}

double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double silu(double x) { return x / (1.0 + std::exp(-x)); }

/// Runs one product and compares with its epilogue applied to
/// sum_k a[i, k] * b[k, j] in float64. Tolerance: f32 sums of K exact
/// products (f16/bf16 products are exact in f32) lose at most ~K ulps of the
/// sum of |a b|, scaled by the epilogue's slope (|alpha|; gelu's and silu's
/// are below 1.2); half-precision kernels compute exp and division with the
/// approximate instructions (relative error ~1e-6); a half-precision D adds
/// its rounding.
template <class T, class Out>
void check_product(Backend backend, Product p, MatmulShape s, int compute_capability = 90,
                   int concurrent_programs = 4, int64_t shared_bytes_per_block = 0,
                   bool staged_fits = true, uint64_t schedule_seed = 0,
                   LaunchRecord* record = nullptr) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(op_name(p, s)) + " " + dtype_name<T>() + "->" + dtype_name<Out>() +
               " batch " + std::to_string(s.batch) + " (gap " + std::to_string(s.batch_gap) +
               ") m " + std::to_string(s.m) + " n " + std::to_string(s.n) + " k " +
               std::to_string(s.k) + " pad " + std::to_string(s.pad) + " alpha " +
               std::to_string(p.alpha) + " beta " + std::to_string(p.beta) + " sm_" +
               std::to_string(compute_capability) + " shared " +
               std::to_string(shared_bytes_per_block) + " schedule " +
               std::to_string(schedule_seed) + " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const bool bt = p.b_transposed;
  using Broadcast = MatmulShape::Broadcast;
  const bool batched = s.batch > 0;
  const int64_t ds = s.n + s.pad;
  int64_t as = s.k + s.pad, bs = (bt ? s.k : s.n) + s.pad;
  const int64_t b_rows = bt ? s.n : s.k;
  // Batch strides (unused without a batch).
  const int64_t nb = std::max<int64_t>(s.batch, 1);
  int64_t abs_ = s.m * as + s.batch_gap, bbs = b_rows * bs + s.batch_gap;
  const int64_t dbs = s.m * ds + s.batch_gap;
  const size_t a_elements = static_cast<size_t>(nb * abs_),
               b_elements = static_cast<size_t>(nb * bbs);
  if (s.broadcast == Broadcast::kA) (batched ? abs_ : as) = 0;
  if (s.broadcast == Broadcast::kB) (batched ? bbs : bs) = 0;
  SCOPED_TRACE(s.broadcast == Broadcast::kA   ? "a broadcast"
               : s.broadcast == Broadcast::kB ? "b broadcast"
                                              : "no broadcast");
  Array<T> a(backend, a_elements), b(backend, b_elements);
  Array<Out> d(backend, static_cast<size_t>(nb * dbs));
  // C or R ([m, n] with d's row stride), or the bias row.
  const bool matrix_extra =
      p.epilogue == Epilogue::kAlphaBetaC || p.epilogue == Epilogue::kResidual;
  const bool bias_extra = p.epilogue == Epilogue::kBias || p.epilogue == Epilogue::kBiasGelu ||
                          p.epilogue == Epilogue::kBiasSilu;
  Array<Out> e(backend, static_cast<size_t>(matrix_extra ? s.m * ds : bias_extra ? s.n : 1));
  for (T& v : a.host()) v = from_float<T>(dist(rng));
  for (T& v : b.host()) v = from_float<T>(dist(rng));
  // As in BLAS, beta == 0 means C is not read: NaNs there must not show.
  const bool c_unread = p.epilogue == Epilogue::kAlphaBetaC && p.beta == 0.0f;
  for (Out& v : e.host())
    v = from_float<Out>(c_unread ? std::numeric_limits<float>::quiet_NaN() : dist(rng));
  const Out guard = from_float<Out>(12345.0f);
  for (Out& v : d.host()) v = guard;
  for (int64_t bi = 0; bi < nb; ++bi)
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j)
        d.host()[bi * dbs + i * ds + j] = from_float<Out>(dist(rng));  // poison
  a.upload();
  b.upload();
  d.upload();
  e.upload();
  const uint64_t before = detail::tma_descriptors_handed_out();
  TensorView<const T, 2> av(a.data(), {s.m, s.k}, {as, 1});
  TensorView<const T, 2> bv(b.data(), {b_rows, bt ? s.k : s.n}, {bs, 1});
  TensorView<Out, 2> dv(d.data(), {s.m, s.n}, {ds, 1});
  TensorView<const Out, 2> mv(e.data(), {s.m, s.n}, {ds, 1});
  TensorView<const Out, 1> biasv(e.data(), {s.n}, {1});
  TensorView<const T, 3> a3(a.data(), {s.batch, s.m, s.k}, {abs_, as, 1});
  TensorView<const T, 3> b3(b.data(), {s.batch, b_rows, bt ? s.k : s.n}, {bbs, bs, 1});
  TensorView<Out, 3> d3(d.data(), {s.batch, s.m, s.n}, {dbs, ds, 1});
  Launch launch{backend,
                nullptr,
                {.concurrent_programs = concurrent_programs,
                 .schedule_seed = schedule_seed,
                 .compute_capability = compute_capability,
                 .shared_bytes_per_block = shared_bytes_per_block}};
  launch.record = record;
  Status status;
  switch (p.epilogue) {
    case Epilogue::kNone:
      if (s.batch > 0)
        status = bt ? kernels::batched_matmul_bt(a3, b3, d3, launch)
                    : kernels::batched_matmul(a3, b3, d3, launch);
      else
        status = bt ? kernels::matmul_bt(av, bv, dv, launch) : kernels::matmul(av, bv, dv, launch);
      break;
    case Epilogue::kAlphaBetaC:
      status = bt ? kernels::gemm_bt(av, bv, mv, dv, p.alpha, p.beta, launch)
                  : kernels::gemm(av, bv, mv, dv, p.alpha, p.beta, launch);
      break;
    default:  // the linear layers keep the activations' dtype
      if constexpr (std::is_same_v<T, Out>) {
        if (p.epilogue == Epilogue::kBias) status = kernels::linear_bias(av, bv, biasv, dv, launch);
        if (p.epilogue == Epilogue::kBiasGelu)
          status = kernels::linear_bias_gelu(av, bv, biasv, dv, launch);
        if (p.epilogue == Epilogue::kBiasSilu)
          status = kernels::linear_bias_silu(av, bv, biasv, dv, launch);
        if (p.epilogue == Epilogue::kResidual)
          status = kernels::linear_residual(av, bv, mv, dv, launch);
      } else {
        FAIL() << op_name(p, s) << " has no " << dtype_name<T>() << " -> " << dtype_name<Out>()
               << " instance";
      }
  }
  ASSERT_TRUE(status.ok()) << status.message();
  d.download();
  // TMA copies a and b when their row (and batch) strides are multiples of 16
  // bytes (the stride of a single row is never used); the CUDA backend decides
  // by device.
  auto tma_rows = [](int64_t rows, int64_t stride) {
    return rows == 1 || stride * static_cast<int64_t>(sizeof(T)) % 16 == 0;
  };
  // TMA also needs every extent positive (an empty K runs the direct twin).
  // A broadcast (a stride of 0 over several rows or batch entries) is no tensor map.
  auto broadcast = [](int64_t rows, int64_t stride) { return rows > 1 && stride == 0; };
  const bool expect_tma = backend == Backend::kEmulator && staged_fits && s.m > 0 && s.n > 0 &&
                          s.k > 0 && tma_rows(s.m, as) && tma_rows(b_rows, bs) &&
                          tma_rows(nb, abs_) && tma_rows(nb, bbs) && !broadcast(s.m, as) &&
                          !broadcast(b_rows, bs) && !broadcast(nb, abs_) && !broadcast(nb, bbs);
  if (backend != Backend::kCuda) {
    EXPECT_EQ(detail::tma_descriptors_handed_out() - before, expect_tma ? 2u : 0u)
        << (expect_tma ? "the TMA instance did not run" : "the direct twin did not run");
  }
  const double slope = p.epilogue == Epilogue::kAlphaBetaC ? std::abs(p.alpha) : 1.2;
  int misses = 0;
  for (int64_t bi = 0; bi < nb && misses < 5; ++bi)
    for (int64_t g = s.m * ds; g < dbs; ++g)  // the gap after each matrix of D
      if (to_float(d.host()[bi * dbs + g]) != to_float(guard)) {
        ADD_FAILURE() << "d batch " << bi << " gap element " << g - s.m * ds << " written";
        ++misses;
      }
  for (int64_t bi = 0; bi < nb && misses < 5; ++bi)
    for (int64_t i = 0; i < s.m && misses < 5; ++i)
      for (int64_t j = 0; j < ds && misses < 5; ++j) {
        const T* ab = a.host().data() + bi * abs_;
        const T* bb = b.host().data() + bi * bbs;
        const double got = to_float(d.host()[bi * dbs + i * ds + j]);
        if (j >= s.n) {
          if (got != to_float(guard)) {
            ADD_FAILURE() << "d[" << bi << ", " << i << ", " << j << "] (padding) = " << got;
            ++misses;
          }
          continue;
        }
        double acc = 0, magnitude = 0;
        for (int64_t kk = 0; kk < s.k; ++kk) {
          const double x = to_float(ab[i * as + kk]);
          const double y = to_float(bt ? bb[j * bs + kk] : bb[kk * bs + j]);
          acc += x * y;
          magnitude += std::abs(x * y);
        }
        const double m = matrix_extra && !c_unread ? to_float(e.host()[i * ds + j]) : 0.0;
        const double bias = bias_extra ? to_float(e.host()[j]) : 0.0;
        double want = acc;
        switch (p.epilogue) {
          case Epilogue::kNone:
            break;
          case Epilogue::kAlphaBetaC:
            want = p.alpha * acc + (p.beta != 0.0f ? p.beta * m : 0.0);
            break;
          case Epilogue::kBias:
            want = acc + bias;
            break;
          case Epilogue::kBiasGelu:
            want = gelu_tanh(acc + bias);
            break;
          case Epilogue::kBiasSilu:
            want = silu(acc + bias);
            break;
          case Epilogue::kResidual:
            want = acc + m;
            break;
        }
        double tol = slope * (1e-6 * static_cast<double>(s.k) * magnitude + 1e-6) +
                     1e-6 * (std::abs(want) + std::abs(bias) + std::abs(m));
        if constexpr (!std::is_same_v<Out, float>) tol += Tolerance<Out>::rtol * std::abs(want);
        if (!(std::abs(got - want) <= tol)) {
          ADD_FAILURE() << "d[" << bi << ", " << i << ", " << j << "] = " << got << ", want "
                        << want << " (tolerance " << tol << ")";
          ++misses;
        }
      }
}

/// Shapes through the TMA instance (rows of 16-byte multiples) and the direct twin.
std::vector<MatmulShape> shapes_for(Backend backend) {
  // The emulator runs every thread of every program: its shapes stay small.
  std::vector<MatmulShape> shapes = {{129, 65, 72}, {64, 8, 16}, {7, 136, 200, 8},
                                     {1, 1, 1},     {7, 9, 17},  {65, 63, 33, 1}};
  if (backend != Backend::kEmulator)
    shapes.insert(shapes.end(), {{257, 255, 128},
                                 {128, 129, 256},
                                 {1, 257, 64},
                                 {255, 1, 520},
                                 {127, 129, 65},
                                 {63, 257, 127, 3}});
  return shapes;
}

/// The epilogues run on fewer shapes on the emulator: one through the TMA
/// instance with edge tiles in M and N (N past 128: both column chunks of a
/// 128 x 256 tile's epilogue), one through the direct twin.
std::vector<MatmulShape> epilogue_shapes_for(Backend backend) {
  if (backend == Backend::kEmulator) return {{129, 200, 72}, {65, 63, 33, 1}};
  return shapes_for(backend);
}

template <class T, class Out>
void check_shapes(Backend backend, bool b_transposed) {
  for (MatmulShape s : shapes_for(backend)) check_product<T, Out>(backend, {b_transposed}, s);
}

template <class T, class Out>
void check_epilogue(Backend backend, Product p) {
  for (MatmulShape s : epilogue_shapes_for(backend)) check_product<T, Out>(backend, p, s);
}

/// Calls one matmul_bt bf16 instance's argv entry (`argv`) on fresh [m, k] x [n, k] arrays.
Status call_matmul_bt_instance(Status (*argv)(void* const*, const Launch&), int64_t m, int64_t n,
                               int64_t k, const Launch& launch) {
  Array<bfloat16> a(launch.backend, static_cast<size_t>(m * k));
  Array<bfloat16> b(launch.backend, static_cast<size_t>(n * k));
  Array<bfloat16> d(launch.backend, static_cast<size_t>(m * n));
  a.upload();
  b.upload();
  d.upload();
  TensorView<const bfloat16, 2> av(a.data(), {m, k});
  TensorView<const bfloat16, 2> bv(b.data(), {n, k});
  TensorView<bfloat16, 2> dv(d.data(), {m, n});
  void* args[] = {&av, &bv, &dv};
  return argv(args, launch);
}

class MatmulTest : public BackendTest {};

TEST_P(MatmulTest, BTransposedBF16) { check_shapes<bfloat16, bfloat16>(GetParam(), true); }
TEST_P(MatmulTest, BTransposedF16ToF32) { check_shapes<half, float>(GetParam(), true); }
TEST_P(MatmulTest, BF16) { check_shapes<bfloat16, bfloat16>(GetParam(), false); }
TEST_P(MatmulTest, F16ToF32) { check_shapes<half, float>(GetParam(), false); }

TEST_P(MatmulTest, GemmAlphaBetaBF16) {
  check_epilogue<bfloat16, bfloat16>(GetParam(), {false, Epilogue::kAlphaBetaC, 0.5f, -1.5f});
}
// beta == 0: C holds NaNs and must not be read.
TEST_P(MatmulTest, GemmBetaZeroSkipsCF16ToF32) {
  check_epilogue<half, float>(GetParam(), {false, Epilogue::kAlphaBetaC, 2.0f, 0.0f});
}
TEST_P(MatmulTest, GemmBTransposedBF16ToF32) {
  check_epilogue<bfloat16, float>(GetParam(), {true, Epilogue::kAlphaBetaC, -1.0f, 0.25f});
}
TEST_P(MatmulTest, GemmBTransposedF16) {
  check_epilogue<half, half>(GetParam(), {true, Epilogue::kAlphaBetaC, 1.0f, 1.0f});
}
TEST_P(MatmulTest, LinearBiasBF16) {
  check_epilogue<bfloat16, bfloat16>(GetParam(), {true, Epilogue::kBias});
}
TEST_P(MatmulTest, LinearBiasGeluF16) {
  check_epilogue<half, half>(GetParam(), {true, Epilogue::kBiasGelu});
}
TEST_P(MatmulTest, LinearBiasSiluBF16) {
  check_epilogue<bfloat16, bfloat16>(GetParam(), {true, Epilogue::kBiasSilu});
}
TEST_P(MatmulTest, LinearResidualF16) {
  check_epilogue<half, half>(GetParam(), {true, Epilogue::kResidual});
}

// Every edge size of the list in each dim in turn, the others 64:
// M, N and K of 1, 7, 63, 64, 65, 127, 128, 129, 255, 257 around the 128 x 256,
// 128 x 64 and 64 x 64 tiles and the 64-element K step, for both products (the
// emulator, which runs every thread, takes the pipelined wgmma one only).
TEST_P(MatmulTest, EveryEdgeDim) {
  const Backend backend = GetParam();
  for (int64_t v : {1, 7, 63, 64, 65, 127, 128, 129, 255, 257})
    for (MatmulShape s : {MatmulShape{v, 64, 64}, MatmulShape{64, v, 64}, MatmulShape{64, 64, v}}) {
      check_product<bfloat16, bfloat16>(backend, {true}, s);
      if (backend != Backend::kEmulator) check_product<half, float>(backend, {false}, s);
    }
}

// Split-K, the `splitk` instance each non-batched product's entry point
// picks when D has few tiles and K is long (decode: M of 1..128), and with
// at most 16 rows of D the `decode` instance (16 rows a tile, 11 stages),
// with more `splitk_deep` (8 stages), where the device has the shared memory
// (here sm_90's; sm_80's runs `splitk`): several splits, a last split with fewer K steps (or only
// steps past K), every epilogue, both orientations of B, the direct twin (a
// row stride TMA cannot copy), and the sm_80 form. The deep instances sum a tile's splits in
// a cluster where the emulator's resident programs hold one (S of 2 to 4 here, 5 with five
// resident), else through the workspace (S = 5 with four): both paths run.
std::vector<MatmulShape> decode_shapes_for(Backend backend) {
  // {1, 65, 1216}: 19 K steps in 5 splits (both orientations), so the last split's sum
  // takes a whole quad of splits and one with three past the last.
  if (backend == Backend::kEmulator) return {{1, 65, 1216}, {7, 130, 520, 8}};
  // {40, 9000, 400}: one split (S = 1: 71 tiles of 64 x 128, one an SM above 16 rows),
  // finished from the accumulator.
  return {{1, 200, 1500}, {16, 129, 1031},  {64, 256, 2048, 3},
          {128, 64, 777}, {7, 130, 520, 8}, {40, 9000, 400}};
}

TEST_P(MatmulTest, DecodeShapesSplitK) {
  const Backend backend = GetParam();
  for (MatmulShape s : decode_shapes_for(backend)) {
    check_product<bfloat16, bfloat16>(backend, {true}, s);
    check_product<half, float>(backend, {false}, s);
    check_product<bfloat16, float>(backend, {false, Epilogue::kAlphaBetaC, 0.5f, -1.5f}, s);
    check_product<half, half>(backend, {true, Epilogue::kBiasGelu}, s);
    check_product<bfloat16, bfloat16>(backend, {true, Epilogue::kResidual}, s);
  }
  if (backend == Backend::kEmulator) {
    check_product<bfloat16, bfloat16>(backend, {true, Epilogue::kBias}, {7, 130, 520, 8}, 80);
    // Several rows of tiles, D^T = B A^T: 8 tiles of 64 x 128 in 3 splits, the last row of
    // tiles 8 rows and the last column 2 (one slab of the transposing sum), with B [N, K]
    // (read K-major) and [K, N] (read M-major through a transposed view; on sm_80 by
    // ldmatrix.trans).
    check_product<bfloat16, bfloat16>(backend, {true}, {200, 130, 600});  // splitk_deep
    // The deep instances with the emulator's threads in a random order: decode with B [N, K]
    // and splitk_deep with B [K, N] (read through a transposed view; N = 136, a row stride TMA
    // copies). {1, 65, 1216}: 5 splits, summed in a cluster of 5 where five programs are
    // resident (decode's 4 pieces: split 4 sums none); with B [K, N] its row stride (65 bf16)
    // is one TMA cannot copy, so split-K's direct twin runs (no cluster). {200, 136, 600}: 8
    // tiles in 3 splits, clusters of 3.
    for (bool bt : {true, false}) {
      LaunchRecord record;
      check_product<bfloat16, bfloat16>(backend, {bt}, {1, 65, 1216}, 90, 5, 0, true, 7, &record);
      EXPECT_EQ(record.launched_cluster, bt ? 5 : 1) << record.instance;
    }
    {
      LaunchRecord record;
      check_product<bfloat16, bfloat16>(backend, {false}, {200, 136, 600}, 90, 4, 0, true, 7,
                                        &record);
      EXPECT_STREQ(record.instance, "matmul_bf16_bf16_splitk_deep");
      EXPECT_EQ(record.launched_cluster, 3);
    }
    // split-K's four stages on sm_90a (no room for splitk_deep's eight in 200 KiB).
    check_product<bfloat16, bfloat16>(backend, {true}, {200, 130, 600}, 90, 4, 200 * 1024);
    check_product<bfloat16, bfloat16>(backend, {true, Epilogue::kResidual}, {200, 130, 600}, 80);
    check_product<half, float>(backend, {false, Epilogue::kAlphaBetaC, 0.5f, -1.5f},
                               {200, 130, 600});
    check_product<bfloat16, bfloat16>(backend, {false}, {200, 130, 600}, 80);  // cp.async form
    // One split (S = 1), finished from the accumulator without the workspace: 17 rows (more
    // than one slab of 16, so one program an SM, 132 on an H100) in 67 tiles of 64 x 128,
    // 5 K steps (the smallest such shapes; ~20 s of the emulator's time each), on split-K's
    // four stages (below 65 rows the deep instance takes only splits that meet in a cluster).
    check_product<bfloat16, bfloat16>(backend, {true}, {17, 8576, 320});
    check_product<half, float>(backend, {false}, {17, 8576, 320});
    // The same in two rows of tiles: 68 tiles of 64 x 128, one split of 5 K steps, fewer than
    // the deep instance's eight stages.
    {
      LaunchRecord deep;
      check_product<bfloat16, bfloat16>(backend, {true}, {65, 4352, 320}, 90, 4, 0, true, 0, &deep);
      ASSERT_NE(deep.instance, nullptr);
      EXPECT_STREQ(deep.instance, "matmul_bt_bf16_bf16_splitk_deep");
      EXPECT_EQ(deep.grid, (std::array<int64_t, 3>{1, 2, 34}));
    }
    // The decode instance's one split: 16 rows, 67 tiles of 16 x 128 fill one wave of 132
    // programs (one an SM: floor(132 / 67) = 1; split-K's target of 264 for 16 rows would
    // split in 2).
    LaunchRecord record;
    check_product<bfloat16, bfloat16>(backend, {true}, {16, 8576, 320}, 90, 4, 0, true, 0, &record);
    ASSERT_NE(record.instance, nullptr);
    EXPECT_STREQ(record.instance, "matmul_bt_bf16_bf16_decode");
    EXPECT_EQ(record.grid, (std::array<int64_t, 3>{1, 1, 67}));
  }
}

// The shapes above are split-K's: its instances, which serve only the
// shapes their entry point's chooser gives them, accept them, and refuse a
// shape with many tiles and a short K. The chooser's boundaries (M = 1
// keeps the host's runs cheap): a split instance where its 128 x 64 tiles
// are fewer than 264 (one wave) with K of at least 5 steps, and either at
// most 132 of them (it splits) or the tiles schedule fills at most 66 of 132
// SMs; with at most 16 rows of D the decode instance, with more than 16
// `splitk_deep`, where the device has their shared memory (219 and 213 KiB a block; the
// host: always; the emulator: sm_90's 227 KiB), else `splitk`.
TEST_P(MatmulTest, SplitKServesFewTilesAndLongK) {
  const Backend backend = GetParam();
  if (backend == Backend::kCuda) GTEST_SKIP() << "the choice does not depend on the backend";
  const Launch launch{backend, nullptr};
  auto call_splitk = [&](int64_t m, int64_t n, int64_t k) {
    return call_matmul_bt_instance(kernels::matmul_bt_bf16_bf16_splitk_argv, m, n, k, launch);
  };
  auto call_decode = [&](int64_t m, int64_t n, int64_t k) {
    return call_matmul_bt_instance(kernels::matmul_bt_bf16_bf16_decode_argv, m, n, k, launch);
  };
  auto call_deep = [&](int64_t m, int64_t n, int64_t k) {
    return call_matmul_bt_instance(kernels::matmul_bt_bf16_bf16_splitk_deep_argv, m, n, k, launch);
  };
  // The split instance the shape's rows ask for where the device has the shared memory.
  auto call = [&](int64_t m, int64_t n, int64_t k) {
    return m <= 16 ? call_decode(m, n, k) : call_deep(m, n, k);
  };
  auto call_tiles = [&](int64_t m, int64_t n, int64_t k) {
    return call_matmul_bt_instance(kernels::matmul_bt_bf16_bf16_tiles_argv, m, n, k, launch);
  };
  auto expect_refused = [](const Status& s, const char* what) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << what;
    EXPECT_NE(s.message().find("the entry point picks the instance"), std::string::npos)
        << what << ": " << s.message();
  };
  EXPECT_TRUE(call(1, 65, 600).ok());
  EXPECT_TRUE(call(7, 130, 520).ok());
  EXPECT_TRUE(call(17, 65, 600).ok());
  EXPECT_TRUE(call(64, 65, 600).ok());
  EXPECT_TRUE(call(65, 65, 600).ok());
  expect_refused(call_splitk(16, 65, 600), "16 rows on split-K's four stages");
  expect_refused(call_splitk(17, 65, 600), "17 rows on split-K's four stages");
  expect_refused(call_splitk(65, 65, 600), "65 rows on split-K's four stages");
  expect_refused(call_decode(17, 65, 600), "17 rows on the decode instance");
  expect_refused(call_deep(16, 65, 600), "16 rows on the deep 64-row instance");
  // Below 65 rows the deep instance takes only splits that meet in a cluster (2 to 8): 17 rows
  // in 67 tiles of 64 x 128 take one split, on split-K's four stages.
  expect_refused(call_deep(17, 8576, 320), "17 rows, one split, on the deep 64-row instance");
  if (backend == Backend::kHost) EXPECT_TRUE(call_splitk(17, 8576, 320).ok());
  // splitk_deep holds one program an SM: 134 of its 64 x 128 tiles (128 x 8576) would run two
  // waves, so split-K's four stages (two programs an SM) take them; 132 (128 x 8448) it takes.
  expect_refused(call_deep(128, 8576, 320), "134 tiles on the deep 64-row instance");
  expect_refused(call_splitk(128, 8448, 320), "132 tiles on split-K's four stages");
  if (backend == Backend::kHost) EXPECT_TRUE(call_splitk(128, 8576, 320).ok());
  if (backend == Backend::kEmulator) {  // sm_80's 163 KiB: no room for the deep pipelines
    const Launch small{backend, nullptr, {.shared_bytes_per_block = 163 * 1024}};
    for (int64_t m : {16, 17, 65}) {  // the rows each deep instance takes where it fits
      EXPECT_TRUE(
          call_matmul_bt_instance(kernels::matmul_bt_bf16_bf16_splitk_argv, m, 65, 600, small)
              .ok());
      expect_refused(
          call_matmul_bt_instance(m <= 16 ? kernels::matmul_bt_bf16_bf16_decode_argv
                                          : kernels::matmul_bt_bf16_bf16_splitk_deep_argv,
                                  m, 65, 600, small),
          "a deep split instance in 163 KiB");
    }
  }
  expect_refused(call(256, 256, 64), "many tiles, one K step");
  // 128 tiles of 128 x 256 (as 2048^2) are one wave of the tiles schedule;
  // the split instance's 512 tiles of 128 x 64 would not split.
  expect_refused(call(1, 32768, 320), "128 wide tiles on the split instance");
  // 66 tiles of 128 x 256, 263 vs 264 of 128 x 64; 4 vs 5 K steps.
  expect_refused(call(1, 16896, 320), "264 split tiles");
  expect_refused(call_tiles(1, 16832, 320), "263 split tiles on the tiles instance");
  expect_refused(call(1, 65, 256), "4 K steps");
  // A narrow D: 67 tiles of 128 x 256 (more than half the SMs), three quarters empty, are
  // 67 of 128 x 64, which split in one wave.
  expect_refused(call_tiles(8576, 64, 320), "a narrow D on the tiles instance");
  expect_refused(call_tiles(1, 65, 257), "5 K steps on the tiles instance");
  if (backend == Backend::kHost) {  // the emulator would run hundreds of programs
    EXPECT_TRUE(call(1, 16832, 320).ok());
    EXPECT_TRUE(call_tiles(1, 16896, 320).ok());
    EXPECT_TRUE(call(1, 65, 257).ok());
    EXPECT_TRUE(call_tiles(1, 65, 256).ok());
  }
  // gemm_bt chooses as matmul_bt does (its tiles are 128 x 256 too): 66 tiles of 128 x 256
  // are 263 or 264 of 128 x 64.
  Array<bfloat16> a(backend, 320), b(backend, 16896 * 320), c(backend, 16896), d(backend, 16896);
  for (auto* x : {&a, &b, &c, &d}) x->upload();
  float alpha = 1.0f, beta = 1.0f;
  auto call_gemm = [&](auto argv, int64_t n) {
    TensorView<const bfloat16, 2> av(a.data(), {1, 320});
    TensorView<const bfloat16, 2> bv(b.data(), {n, 320});
    TensorView<const bfloat16, 2> cv(c.data(), {1, n});
    TensorView<bfloat16, 2> dv(d.data(), {1, n});
    void* args[] = {&av, &bv, &cv, &dv, &alpha, &beta};
    return argv(args, launch);
  };
  expect_refused(call_gemm(kernels::gemm_bt_bf16_bf16_splitk_argv, 16896), "264 gemm split tiles");
  expect_refused(call_gemm(kernels::gemm_bt_bf16_bf16_tiles_argv, 16832),
                 "263 gemm split tiles on the tiles instance");
  if (backend == Backend::kHost) {
    EXPECT_TRUE(call_gemm(kernels::gemm_bt_bf16_bf16_decode_argv, 16832).ok());
    EXPECT_TRUE(call_gemm(kernels::gemm_bt_bf16_bf16_tiles_argv, 16896).ok());
  }
}

// What matmul_bt's entry point chooses (Launch::record): split-K's splits
// fill one wave of 264 programs (floor(264 / tiles), 1 from 133 tiles) where
// D has at most 16 rows, of 132 above, and many tiles run the persistent
// tiles schedule, in clusters of two where the tile rows are even. The host runs each choice's
// direct twin (64 x 64 tiles, its own splits; the decode instance's is split-K's); the emulator
// the TMA instance: at most 16 rows the decode instance (one program an SM: one wave of 132),
// more the deep 64-row split-K (splitk_deep) where the device has their shared memory. Split-K's
// grid is (splits, tile rows, tile columns); the deep instances ask for the splits of a tile in
// one cluster (2 to 8 of them), which the emulator runs where its resident programs hold one.
TEST_P(MatmulTest, EntryPointRecordsItsChoice) {
  const Backend backend = GetParam();
  if (backend == Backend::kCuda) GTEST_SKIP() << "the choice does not depend on the backend";
  struct Want {
    Backend backend;
    int64_t m, n, k;
    const char* instance;
    std::array<int64_t, 3> grid;
    int cluster = 1;
    int64_t shared = 0;  // Launch::emulator.shared_bytes_per_block (0: sm_90's 227 KiB)
  };
  const Want wants[] = {
      // 64 tiles, 32 K steps: floor(264 / 64) = 4 splits of 8 steps (one wave of 256).
      {Backend::kHost, 1, 4096, 2048, "matmul_bt_bf16_bf16_splitk_direct", {4, 1, 64}},
      // 17 rows, the same 64 tiles: one wave of 132, floor(132 / 64) = 2 splits of 16 steps.
      {Backend::kHost, 17, 4096, 2048, "matmul_bt_bf16_bf16_splitk_direct", {2, 1, 64}},
      // 133 tiles: one wave of them, S = 1 (the tiles schedule would fill 34 of 132 SMs).
      {Backend::kHost, 1, 8512, 2048, "matmul_bt_bf16_bf16_splitk_direct", {1, 1, 133}},
      // 32 tiles of 64 x 64, 10 K steps: 3 splits (4, 4 and 2 steps).
      {Backend::kHost, 256, 512, 640, "matmul_bt_bf16_bf16_splitk_direct", {3, 4, 8}},
      // 128 tiles of 128 x 256 (512 of 64 x 64 in the twin): the tiles schedule.
      {Backend::kHost, 1, 32768, 320, "matmul_bt_bf16_bf16_tiles_direct", {512, 1, 1}},
      // 17 rows, 67 tiles of 64 x 128 (swapped), 5 K steps: one wave of 132 takes one split,
      // finished from the accumulator (DecodeShapesSplitK checks its result); below 65 rows
      // the deep instance takes only splits that meet in a cluster, so split-K's four stages.
      {Backend::kEmulator, 17, 8576, 320, "matmul_bt_bf16_bf16_splitk", {1, 1, 67}},
      // 64 rows, 1 tile of 64 x 128, 10 K steps: 3 splits, one cluster.
      {Backend::kEmulator, 64, 65, 600, "matmul_bt_bf16_bf16_splitk_deep", {3, 1, 1}, 3},
      // 65 rows, 2 tiles of 64 x 128, 10 K steps: 3 splits, two clusters of 3.
      {Backend::kEmulator, 65, 65, 600, "matmul_bt_bf16_bf16_splitk_deep", {3, 2, 1}, 3},
      {Backend::kEmulator, 65, 65, 600, "matmul_bt_bf16_bf16_splitk", {3, 2, 1}, 1, 200 * 1024},
      {Backend::kEmulator,
       65,
       65,
       600,
       "matmul_bt_bf16_bf16_splitk",
       {3, 2, 1},
       1,
       kernels::matmul_bt_bf16_bf16_splitk_deep_metadata().targets[0].shared_bytes - 1},
      // Swapped (D^T = B A^T): 1 tile of 16 x 128, 10 K steps: 3 splits, one cluster.
      {Backend::kEmulator, 1, 65, 600, "matmul_bt_bf16_bf16_decode", {3, 1, 1}, 3},
      // 32 tiles of 16 x 128, 13 K steps: one wave would take 4 splits, but an H100 or H200
      // holds only 30 clusters of 4, so 3 splits (of 5, 5 and 3 steps) in 32 clusters of 3
      // (cluster_splits_for).
      {Backend::kEmulator, 1, 4096, 832, "matmul_bt_bf16_bf16_decode", {3, 1, 32}, 3},
      // 1 tile, 40 K steps: 10 splits, more than a cluster holds (8): no clusters.
      {Backend::kEmulator, 1, 65, 2560, "matmul_bt_bf16_bf16_decode", {10, 1, 1}},
      // sm_80's 163 KiB: no room for the decode pipeline; 1 tile of 64 x 128, 3 splits.
      {Backend::kEmulator, 1, 65, 600, "matmul_bt_bf16_bf16_splitk", {3, 1, 1}, 1, 163 * 1024},
      // A byte short of the decode instance's shared memory: the chooser's bound for it is
      // not below what its kernel takes.
      {Backend::kEmulator,
       1,
       65,
       600,
       "matmul_bt_bf16_bf16_splitk",
       {3, 1, 1},
       1,
       kernels::matmul_bt_bf16_bf16_decode_metadata().targets[0].shared_bytes - 1},
      // 4 tiles of 128 x 256 in 2 tile rows: clusters of 2 (sharing B's blocks).
      {Backend::kEmulator, 130, 300, 64, "matmul_bt_bf16_bf16_tiles", {4, 1, 1}, 2},
      // 3 tile rows (odd): clusters of 1.
      {Backend::kEmulator, 300, 300, 64, "matmul_bt_bf16_bf16_tiles", {6, 1, 1}, 1},
  };
  for (const Want& w : wants) {
    if (w.backend != backend) continue;
    SCOPED_TRACE(std::to_string(w.m) + " x " + std::to_string(w.n) + " x " + std::to_string(w.k));
    Array<bfloat16> a(backend, static_cast<size_t>(w.m * w.k));
    Array<bfloat16> b(backend, static_cast<size_t>(w.n * w.k));
    Array<bfloat16> d(backend, static_cast<size_t>(w.m * w.n));
    LaunchRecord record;
    Launch launch{backend, nullptr, {.shared_bytes_per_block = w.shared}};
    launch.record = &record;
    ASSERT_TRUE(kernels::matmul_bt(TensorView<const bfloat16, 2>(a.data(), {w.m, w.k}),
                                   TensorView<const bfloat16, 2>(b.data(), {w.n, w.k}),
                                   TensorView<bfloat16, 2>(d.data(), {w.m, w.n}), launch)
                    .ok());
    ASSERT_NE(record.instance, nullptr);
    EXPECT_STREQ(record.instance, w.instance);
    EXPECT_EQ(record.grid, w.grid);
    EXPECT_EQ(record.cluster, w.cluster);
    // The emulator runs a cluster where its resident programs hold one; the host none.
    EXPECT_EQ(record.launched_cluster,
              backend == Backend::kHost || w.cluster > launch.emulator.concurrent_programs
                  ? 1
                  : w.cluster);
    EXPECT_EQ(record.persistent, std::string(w.instance).find("tiles") != std::string::npos);
    // The programs that walked the tiles: the host's one, the emulator's resident programs.
    const int64_t programs =
        backend == Backend::kHost
            ? 1
            : std::min<int64_t>(w.grid[0], launch.emulator.concurrent_programs);
    EXPECT_EQ(record.programs, record.persistent ? programs : 0);
    // The host runs direct twins because it has no TMA, and says so.
    if (backend == Backend::kHost) {
      ASSERT_NE(record.fallback, nullptr);
      EXPECT_STREQ(record.fallback, "the host backend has no TMA");
    } else {
      EXPECT_EQ(record.fallback, nullptr) << record.fallback;
    }
    EXPECT_EQ(record.fallback_operand, nullptr);
  }
}

// Launch::record says why a direct twin ran instead of the TMA instance: the operand and the
// TMA rule it breaks, or the device's shared memory.
TEST_P(MatmulTest, RecordSaysWhyTheDirectTwinRan) {
  const Backend backend = GetParam();
  if (backend != Backend::kEmulator) GTEST_SKIP() << "the emulator runs both paths";
  struct Case {
    const char* what;
    int64_t a_stride, b_stride, shared;
    const char* operand;
    const char* fallback;
    const char* instance;
  };
  const Case cases[] = {
      {"a row stride of 9 bf16", 9, 8, 0, "a", "a stride is not a multiple of 16 bytes",
       "matmul_bt_bf16_bf16_tiles_direct"},
      {"b broadcast", 8, 0, 0, "b", "a stride overlaps the dims inside it (a broadcast view)",
       "matmul_bt_bf16_bf16_tiles_direct"},
      {"48 KiB of shared memory", 8, 8, 48 * 1024, nullptr,
       "the staged plan needs more shared memory per block than the GPU has",
       "matmul_bt_bf16_bf16_tiles_direct"},
      {"none", 8, 8, 0, nullptr, nullptr, "matmul_bt_bf16_bf16_tiles"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const int64_t m = 7, n = 9, k = 8;
    Array<bfloat16> a(backend, 128), b(backend, 128), d(backend, 128);  // 9 x 8 at most
    LaunchRecord record;
    Launch launch{backend, nullptr, {.shared_bytes_per_block = c.shared}};
    launch.record = &record;
    ASSERT_TRUE(kernels::matmul_bt(TensorView<const bfloat16, 2>(a.data(), {m, k}, {c.a_stride, 1}),
                                   TensorView<const bfloat16, 2>(b.data(), {n, k}, {c.b_stride, 1}),
                                   TensorView<bfloat16, 2>(d.data(), {m, n}), launch)
                    .ok());
    ASSERT_NE(record.instance, nullptr);
    EXPECT_STREQ(record.instance, c.instance);
    if (c.fallback == nullptr) {
      EXPECT_EQ(record.fallback, nullptr) << record.fallback;
    } else {
      ASSERT_NE(record.fallback, nullptr);
      EXPECT_STREQ(record.fallback, c.fallback);
    }
    if (c.operand == nullptr) {
      EXPECT_EQ(record.fallback_operand, nullptr) << record.fallback_operand;
    } else {
      ASSERT_NE(record.fallback_operand, nullptr);
      EXPECT_STREQ(record.fallback_operand, c.operand);
    }
  }
}

// An empty K: the product is zero and D is its epilogue (BLAS: D = beta C),
// not left unwritten.
TEST_P(MatmulTest, EmptyKGivesTheEpilogueOfZero) {
  const Backend backend = GetParam();
  for (MatmulShape s : {MatmulShape{7, 9, 0}, MatmulShape{130, 65, 0, 8}}) {
    check_product<bfloat16, bfloat16>(backend, {true}, s);
    check_product<half, float>(backend, {false}, s);
    check_product<bfloat16, float>(backend, {false, Epilogue::kAlphaBetaC, 0.5f, -1.5f}, s);
    check_product<half, half>(backend, {true, Epilogue::kBiasGelu}, s);
    check_product<bfloat16, bfloat16>(backend, {false, Epilogue::kNone}, {3, 5, 0, 0, 2, 8});
  }
}

// batched_matmul(_bt): the batch is the grid's first (launched) axis and every
// block squeezes it. Batch strides with a gap after each matrix (TMA copies
// when the strides are multiples of 16 bytes: gap 8; the direct twin: gap 3),
// contiguous batches, a batch of one, edge tiles in M, N and K.
std::vector<MatmulShape> batched_shapes_for(Backend backend) {
  std::vector<MatmulShape> shapes = {
      {129, 65, 72, 0, 3, 8}, {7, 9, 17, 1, 2, 3}, {64, 8, 16, 0, 1, 0}};
  if (backend != Backend::kEmulator)
    shapes.insert(shapes.end(), {{255, 129, 127, 8, 4, 0}, {1, 257, 64, 0, 7, 24}});
  return shapes;
}

TEST_P(MatmulTest, BatchedBF16) {
  for (MatmulShape s : batched_shapes_for(GetParam()))
    check_product<bfloat16, bfloat16>(GetParam(), {false}, s);
}
TEST_P(MatmulTest, BatchedBTransposedF16ToF32) {
  for (MatmulShape s : batched_shapes_for(GetParam()))
    check_product<half, float>(GetParam(), {true}, s);
}

// The emulator's threads in random orders (EmulatorOptions::schedule_seed) instead of
// round-robin: split-K's last-arriver sum over two rows of tiles (semaphores, workspace)
// and the persistent tiles schedule (several programs walking tiles with one pipeline; in
// clusters of two where the tile rows are even, their CTAs sharing B's stages).
TEST_P(MatmulTest, SchedulesInRandomOrders) {
  const Backend backend = GetParam();
  if (backend != Backend::kEmulator) GTEST_SKIP() << "only the emulator reorders threads";
  for (uint64_t schedule : {7u, 1234u}) {
    check_product<bfloat16, bfloat16>(backend, {true}, {200, 130, 600}, 90, 4, 0, true, schedule);
    check_product<bfloat16, bfloat16>(backend, {true}, {512, 300, 130}, 90, 2, 0, true, schedule);
    // 3 tile rows (odd: clusters of 1), 4 programs on 6 tiles of 3 steps.
    check_product<bfloat16, bfloat16>(backend, {true}, {300, 300, 192}, 90, 4, 0, true, schedule);
  }
}

// The tiles schedule in clusters of two CTAs (spec.persistent's cluster, where the tile rows
// are even): a cluster takes tile rows 2 r and 2 r + 1 of one column, and each CTA copies one
// of the two halves of their common B block (B [N, K]: a tile of 128 rows; [K, N]: two of its
// four 64-column tiles) into both CTAs' stages (multicast); a stage is refilled once both
// CTAs' consumers released it. A CTA that read its peer's rows, or a half of B that missed a
// CTA, shows in D; a refill that did not wait for the peer fails the emulator's overwrite
// checks. Emulator: 4 tile rows (two cluster rows), 4 or 5 programs (two clusters: a fifth
// program has no peer and is not launched), every epilogue family (128 x 256 tiles; bias +
// gelu's 32-column chunks; C's 16), the tiles128 instance (capped at 150 KiB), batched (2 tile
// rows in each of 3 entries); odd rows (3: clusters of 1) and the sm_80 form (no clusters)
// walk alone. CUDA: 8 tile rows, every product of the kind on 132 SMs (66 clusters).
TEST_P(MatmulTest, ClustersShareBWhereTileRowsAreEven) {
  const Backend backend = GetParam();
  if (backend == Backend::kHost) GTEST_SKIP() << "the host runs one program: no clusters";
  if (backend == Backend::kCuda) {
    check_product<bfloat16, bfloat16>(backend, {true}, {1024, 5632, 256});
    check_product<half, half>(backend, {true, Epilogue::kBiasGelu}, {1024, 5632, 256});
    check_product<bfloat16, float>(backend, {false, Epilogue::kAlphaBetaC, 0.5f, 2.0f},
                                   {1024, 2816, 256});
    check_product<half, half>(backend, {true, Epilogue::kResidual}, {1024, 2816, 320});
    check_product<bfloat16, bfloat16>(backend, {false}, {1000, 4000, 200, 0, 3, 8});
    return;
  }
  for (int programs : {4, 5}) {
    check_product<bfloat16, bfloat16>(backend, {true}, {512, 300, 192}, 90, programs);
    check_product<half, half>(backend, {true, Epilogue::kBiasGelu}, {512, 300, 192}, 90, programs);
  }
  for (int64_t shared : {int64_t{0}, int64_t{150} * 1024})
    check_product<bfloat16, float>(backend, {false, Epilogue::kAlphaBetaC, 0.5f, 2.0f},
                                   {400, 200, 192}, 90, 4, shared);
  check_product<half, half>(backend, {true, Epilogue::kResidual}, {400, 200, 192}, 90, 4);
  check_product<bfloat16, bfloat16>(backend, {true}, {300, 300, 192}, 90, 4);  // odd rows
  check_product<bfloat16, bfloat16>(backend, {true}, {512, 300, 192}, 80, 4);
  check_product<bfloat16, bfloat16>(backend, {false}, {512, 300, 192, 3}, 90, 4);  // direct
  check_product<half, float>(backend, {true}, {200, 130, 192, 0, 3, 8}, 90, 4);
}

// Broadcast inputs (a stride of 0): a batch sharing one weight matrix, or
// one A for every batch entry (cuBLAS's batch stride 0), and 2-D operands
// whose rows all read the first. TMA copies need dims that do not overlap,
// so these run the direct twin (check_product counts the descriptors).
TEST_P(MatmulTest, BroadcastInputs) {
  const Backend backend = GetParam();
  using B = MatmulShape::Broadcast;
  check_product<bfloat16, bfloat16>(backend, {false}, {129, 65, 72, 0, 3, 8, B::kB});
  check_product<half, float>(backend, {true}, {7, 9, 17, 1, 2, 3, B::kB});
  check_product<bfloat16, float>(backend, {true}, {65, 70, 40, 0, 3, 0, B::kA});
  check_product<bfloat16, bfloat16>(backend, {false}, {65, 63, 33, 0, 0, 0, B::kA});
  check_product<half, half>(backend, {true, Epilogue::kBiasGelu}, {7, 136, 200, 8, 0, 0, B::kB});
  check_product<half, float>(backend, {false, Epilogue::kAlphaBetaC, 0.5f, -1.5f},
                             {33, 70, 40, 0, 0, 0, B::kB});
}

// The sm_80 form (cp.async staging, ldmatrix + mma.sync) on the emulator.
// The tiles schedule is a persistent grid: each program walks several tiles
// with one pipeline (and one accumulator, zeroed between them). One emulated
// program walks 6 tiles of 128 x 256 (and 9 of 128 x 128 with C), on both
// emulated targets; on CUDA 272 tiles of 128 x 256 outnumber an H100's 132
// SMs, so every program walks at least two.
TEST_P(MatmulTest, PersistentProgramsWalkSeveralTiles) {
  const Backend backend = GetParam();
  if (backend == Backend::kHost) GTEST_SKIP() << "the host runs one program for every grid";
  if (backend == Backend::kCuda) {
    check_product<bfloat16, bfloat16>(backend, {true}, {2048, 4352, 64});
    check_product<bfloat16, bfloat16>(backend, {true, Epilogue::kBiasGelu}, {2048, 4352, 64});
    return;
  }
  for (int cc : {90, 80}) {
    check_product<bfloat16, bfloat16>(backend, {true}, {257, 300, 64}, cc, 1);
    check_product<bfloat16, bfloat16>(backend, {true, Epilogue::kBiasGelu}, {257, 300, 64}, cc, 1);
  }
  check_product<half, float>(backend, {false, Epilogue::kAlphaBetaC, 0.5f, 2.0f}, {257, 300, 64},
                             90, 1);
  // Two programs walking 4 tiles each (4 tile rows, grouped in bands; B [K, N] read N-major
  // in place); with C, 128 x 128 tiles.
  check_product<bfloat16, bfloat16>(backend, {true}, {512, 300, 130}, 90, 2);
  check_product<half, float>(backend, {false}, {512, 300, 130}, 90, 2);
  check_product<bfloat16, bfloat16>(backend, {false, Epilogue::kAlphaBetaC, 0.5f, 2.0f},
                                    {512, 200, 64}, 90, 2);
}

// Devices with less shared memory per block than the 128 x 256 pipeline needs (four stages:
// 197632 bytes; sm_80: 163 KiB, sm_86 / sm_89: 99 KiB) run the products that tile 128 x 256
// in their tiles128 instance (128 x 128, 96 KiB):
// still staged (its TMA descriptors are handed out; the direct twin's are not). Below every
// staged plan the direct twin runs.
TEST_P(MatmulTest, SmallSharedMemoryDevicesTile128x128) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the emulator stands for such devices";
  const Backend e = Backend::kEmulator;
  for (int cc : {86, 89}) {  // the sm_80 form, 99 KiB
    check_product<bfloat16, bfloat16>(e, {true}, {257, 300, 64}, cc, 1);
    check_product<half, float>(e, {false}, {129, 136, 80}, cc, 2);
  }
  check_product<bfloat16, bfloat16>(e, {true, Epilogue::kBiasGelu}, {129, 200, 72}, 86);
  // The sm_90a form of tiles128 (4 tile rows, two programs).
  check_product<bfloat16, bfloat16>(e, {true}, {512, 300, 130}, 90, 2, 99 * 1024);
  check_product<half, float>(e, {false}, {512, 136, 64}, 90, 2, 99 * 1024);
  check_product<bfloat16, bfloat16>(e, {true}, {129, 300, 64}, 90, 2, 197632);
  check_product<bfloat16, bfloat16>(e, {true}, {129, 300, 64}, 90, 2, 197631);
  check_product<bfloat16, bfloat16>(e, {true}, {129, 300, 64}, 90, 2, 64 * 1024,
                                    /*staged_fits=*/false);
  // Batched products have their own tiles128 instance: 3 entries of 2 x 2 tiles of 128 x 128
  // (12 tiles, two programs), the sm_90a form capped at 150 KiB and the sm_80 form at sm_86's.
  check_product<half, float>(e, {true}, {200, 130, 192, 0, 3, 8}, 90, 2, 150 * 1024);
  check_product<bfloat16, bfloat16>(e, {false}, {129, 65, 72, 0, 3, 8}, 86, 2);

  // Which instance the chooser keeps at each size: each instance serves only its own option
  // (else "the entry point picks the instance"), and the one kept runs staged (its TMA
  // descriptors are handed out), so the threshold is neither above the 128 x 256 plan nor
  // below what keeps it.
  auto call = [&](bool tiles128, int64_t shared) {
    Launch launch{e, nullptr, {.concurrent_programs = 2, .shared_bytes_per_block = shared}};
    const uint64_t before = detail::tma_descriptors_handed_out();
    Status s = call_matmul_bt_instance(tiles128 ? kernels::matmul_bt_bf16_bf16_tiles128_argv
                                                : kernels::matmul_bt_bf16_bf16_tiles_argv,
                                       129, 300, 64, launch);
    if (s.ok()) {
      EXPECT_EQ(detail::tma_descriptors_handed_out() - before, 2u) << "staged";
    }
    return s;
  };
  for (auto [tiles128, shared, ok] : {std::tuple{false, 197632, true},
                                      {true, 197632, false},
                                      {false, 197631, false},
                                      {true, 197631, true},
                                      {true, 166912, true},  // sm_80's 163 KiB
                                      {true, 101376, true}}) {
    Status s = call(tiles128, shared);
    EXPECT_EQ(s.ok(), ok) << (tiles128 ? "tiles128" : "tiles") << " at " << shared << ": "
                          << s.message();
    if (!ok) {
      EXPECT_NE(s.message().find("the entry point picks the instance"), std::string::npos)
          << s.message();
    }
  }
}

// The products with C or R take the 128 x 256 tiles in four stages where a block may have
// 196704 bytes of shared memory (sm_90), else tiles128 (128 x 128, three stages: sm_80, sm_86
// / sm_89, an sm_90 part capped lower); their epilogue reads C 16 columns at a time. Both
// sm_90a forms against the reference; the instance the entry point records at the threshold.
TEST_P(MatmulTest, ProductsWithCTakeWideTilesWhereTheyFit) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the emulator stands for such devices";
  const Backend e = Backend::kEmulator;
  // K = 256: 4 steps, the tiles schedule (no split); one program walks every tile (3 and 2
  // tiles of 128 x 256: 12 and 8 steps, so each of the four stages is refilled, in both
  // parities; capped at 150 KiB, 6 and 4 of 128 x 128).
  for (int64_t shared : {int64_t{0}, int64_t{150} * 1024}) {
    check_product<bfloat16, bfloat16>(e, {true, Epilogue::kAlphaBetaC, 0.5f, 2.0f}, {300, 200, 256},
                                      90, 1, shared);
    check_product<bfloat16, bfloat16>(e, {true, Epilogue::kResidual}, {129, 130, 256}, 90, 1,
                                      shared);
  }
  for (auto [shared, instance] :
       {std::pair<int64_t, const char*>{197632, "gemm_bt_bf16_bf16_tiles"},
        {197631, "gemm_bt_bf16_bf16_tiles128"},
        {166912, "gemm_bt_bf16_bf16_tiles128"}}) {
    Array<bfloat16> a(e, 129 * 64), b(e, 300 * 64), c(e, 129 * 300), d(e, 129 * 300);
    a.upload();
    b.upload();
    c.upload();
    LaunchRecord record;
    Launch launch{e, nullptr, {.shared_bytes_per_block = shared}};
    launch.record = &record;
    const Status st =
        kernels::gemm_bt(TensorView<const bfloat16, 2>(a.data(), {129, 64}),
                         TensorView<const bfloat16, 2>(b.data(), {300, 64}),
                         TensorView<const bfloat16, 2>(c.data(), {129, 300}),
                         TensorView<bfloat16, 2>(d.data(), {129, 300}), 1.0f, 1.0f, launch);
    ASSERT_TRUE(st.ok()) << st.message();
    ASSERT_NE(record.instance, nullptr);
    EXPECT_STREQ(record.instance, instance) << "at " << shared << " bytes";
  }
}

TEST_P(MatmulTest, Sm80Form) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the sm_80 form is checked on the emulator";
  check_product<bfloat16, bfloat16>(Backend::kEmulator, {true}, {129, 65, 72}, 80);
  check_product<half, float>(Backend::kEmulator, {false}, {65, 136, 80}, 80);
  check_product<half, float>(Backend::kEmulator, {true}, {7, 9, 17}, 80);
  check_product<bfloat16, bfloat16>(Backend::kEmulator, {true, Epilogue::kBiasGelu}, {129, 65, 72},
                                    80);
  check_product<half, float>(Backend::kEmulator, {false, Epilogue::kAlphaBetaC, 0.5f, 2.0f},
                             {65, 63, 33, 1}, 80);
  check_product<bfloat16, bfloat16>(Backend::kEmulator, {true}, {65, 63, 33, 0, 2, 8}, 80);
}

INSTANTIATE_TEST_SUITE_P(Backends, MatmulTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

// Programmatic dependent launch (Launch::programmatic_dependent_launch): a chain of decode
// steps through two buffers, y = x W (matmul_bt) then x = gelu(y) (an elementwise kernel),
// each kernel reading what the one before it wrote and writing what the one before it read.
// A kernel that touched memory before its predecessor finished (no griddepcontrol wait at
// its entry) would read a half-written input or overwrite one still being read. The chain with the
// option must equal the same chain without it bit for bit (the same kernels, the split sums in
// split order), which the first step checks against float64.
TEST(MatmulCudaPdl, DependentChainEqualsTheSerialOne) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int major = cuda_compute_major();
  ASSERT_GE(major, 0) << "cudaGetDevice or cudaDeviceGetAttribute failed";
  if (major < 9) GTEST_SKIP() << "programmatic dependent launch needs sm_90";
  constexpr int64_t kM = 16, kN = 4096, kSteps = 8;
  std::mt19937 rng(fresh_seed());
  Array<bfloat16> w(Backend::kCuda, kN * kN);
  w.fill_random(rng, -1.0f / 64, 1.0f / 64);  // a step scales x by ~0.3: 8 stay in range
  w.upload();
  std::vector<bfloat16> start(kM * kN);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (bfloat16& v : start) v = bfloat16(dist(rng));
  // The chain's last output (and the first step's) on `stream`, with or without the option.
  auto chain = [&](bool pdl, std::vector<bfloat16>& first) -> std::vector<bfloat16> {
    Array<bfloat16> x(Backend::kCuda, kM * kN), y(Backend::kCuda, kM * kN);
    x.host() = start;
    x.upload();
    cudaStream_t stream = nullptr;
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    Launch launch{Backend::kCuda, stream};
    launch.programmatic_dependent_launch = pdl;
    LaunchRecord record;
    launch.record = &record;
    for (int64_t step = 0; step < kSteps; ++step) {
      Status s = kernels::matmul_bt(TensorView<const bfloat16, 2>(x.data(), {kM, kN}),
                                    TensorView<const bfloat16, 2>(w.data(), {kN, kN}),
                                    TensorView<bfloat16, 2>(y.data(), {kM, kN}), launch);
      EXPECT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(record.programmatic, pdl) << "step " << step << ": " << record.instance;
      if (step == 0) {
        EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
        y.download();
        first = y.host();
      }
      s = kernels::gelu(TensorView<const bfloat16, 1>(y.data(), {kM * kN}),
                        TensorView<bfloat16, 1>(x.data(), {kM * kN}), launch);
      EXPECT_TRUE(s.ok()) << s.message();
      EXPECT_EQ(record.programmatic, pdl) << "step " << step << ": " << record.instance;
    }
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    cudaStreamDestroy(stream);
    x.download();
    return x.host();
  };
  std::vector<bfloat16> first_serial, first_pdl;
  const std::vector<bfloat16> serial = chain(false, first_serial);
  const std::vector<bfloat16> pdl = chain(true, first_pdl);
  int misses = 0;
  for (int64_t i = 0; i < kM && misses < 5; ++i)
    for (int64_t j = 0; j < kN && misses < 5; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < kN; ++k)
        acc += to_float(start[i * kN + k]) * double{to_float(w.host()[j * kN + k])};
      if (!expect_close(first_serial[i * kN + j], acc,
                        "step 0 d[" + std::to_string(i) + ", " + std::to_string(j) + "]"))
        ++misses;
    }
  for (size_t e = 0; e < serial.size() && misses < 10; ++e)
    if (std::memcmp(&serial[e], &pdl[e], sizeof(bfloat16)) != 0 ||
        std::memcmp(&first_serial[e], &first_pdl[e], sizeof(bfloat16)) != 0) {
      ADD_FAILURE() << "element " << e << ": with programmatic dependent launch "
                    << to_float(pdl[e]) << " (step 0: " << to_float(first_pdl[e]) << "), without "
                    << to_float(serial[e]) << " (step 0: " << to_float(first_serial[e]) << ")";
      ++misses;
    }
}

// The deep split instances' cluster sum on a device (sm_90): decode (1 x 4096 x 4096) and
// splitk_deep (64 x 4096 x 4096), 32 tiles in 3 splits each, 32 clusters of 3, which an H100
// or H200 holds at once (one program an SM: 39 clusters of 3, but only 30 of 4, hence 3).
// Launch::max_cluster = 1 runs the same kernel's workspace sum instead: both sum in split order, so
// D is the same bit for bit, and the first equals a float64 reference.
TEST(MatmulCudaClusters, SplitsMeetInClustersAndEqualTheWorkspaceSum) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int major = cuda_compute_major();
  ASSERT_GE(major, 0) << "cudaGetDevice or cudaDeviceGetAttribute failed";
  if (major != 9) GTEST_SKIP() << "the deep split instances are sm_90's";
  constexpr int64_t kN = 4096, kK = 4096;
  std::mt19937 rng(fresh_seed());
  Array<bfloat16> w(Backend::kCuda, kN * kK);
  w.fill_random(rng, -1, 1);
  w.upload();
  for (int64_t m : {int64_t{1}, int64_t{64}}) {
    SCOPED_TRACE("m " + std::to_string(m));
    Array<bfloat16> a(Backend::kCuda, m * kK);
    a.fill_random(rng, -1, 1);
    a.upload();
    std::vector<bfloat16> d_by_path[2];
    for (int max_cluster : {0, 1}) {
      Array<bfloat16> d(Backend::kCuda, m * kN);
      d.poison();
      d.upload();
      Launch launch{Backend::kCuda, nullptr};
      launch.max_cluster = max_cluster;
      LaunchRecord record;
      launch.record = &record;
      Status s = kernels::matmul_bt(TensorView<const bfloat16, 2>(a.data(), {m, kK}),
                                    TensorView<const bfloat16, 2>(w.data(), {kN, kK}),
                                    TensorView<bfloat16, 2>(d.data(), {m, kN}), launch);
      ASSERT_TRUE(s.ok()) << s.message();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      EXPECT_STREQ(record.instance,
                   m == 1 ? "matmul_bt_bf16_bf16_decode" : "matmul_bt_bf16_bf16_splitk_deep");
      EXPECT_EQ(record.grid, (std::array<int64_t, 3>{3, 1, 32}));
      EXPECT_EQ(record.launched_cluster, max_cluster == 1 ? 1 : 3)
          << "the device did not place 32 clusters of 3 at once (PALLAS_LOG_LAUNCH=1 says how "
             "many it holds)";
      d.download();
      d_by_path[max_cluster] = d.host();
    }
    int misses = 0;
    for (int64_t i = 0; i < m && misses < 5; ++i)
      for (int64_t j = 0; j < kN && misses < 5; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < kK; ++k)
          acc += to_float(a.host()[i * kK + k]) * double{to_float(w.host()[j * kK + k])};
        if (!expect_close(d_by_path[0][i * kN + j], acc,
                          "d[" + std::to_string(i) + ", " + std::to_string(j) + "]"))
          ++misses;
      }
    for (size_t e = 0; e < d_by_path[0].size() && misses < 10; ++e)
      if (std::memcmp(&d_by_path[0][e], &d_by_path[1][e], sizeof(bfloat16)) != 0) {
        ADD_FAILURE() << "element " << e << ": summed in a cluster " << to_float(d_by_path[0][e])
                      << ", through the workspace " << to_float(d_by_path[1][e]);
        ++misses;
      }
  }
}

// Above kDecodeClusterSteps (128) K steps the decode instance keeps the splits of one wave
// (16 x 4096 x 11008: 172 steps, 32 tiles, S = 4) and sums them through the workspace: an
// H100 or H200 holds only 30 clusters of 4, and three splits in clusters measured slower
// there (bench/RESULTS.md, thirty-second session). D against a float64 reference on every
// row, every 41st column.
TEST(MatmulCudaClusters, LongDecodeKeepsItsSplitsThroughTheWorkspace) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int major = cuda_compute_major();
  ASSERT_GE(major, 0) << "cudaGetDevice or cudaDeviceGetAttribute failed";
  if (major != 9) GTEST_SKIP() << "the deep split instances are sm_90's";
  constexpr int64_t kM = 16, kN = 4096, kK = 11008;
  std::mt19937 rng(fresh_seed());
  Array<bfloat16> a(Backend::kCuda, kM * kK), w(Backend::kCuda, kN * kK),
      d(Backend::kCuda, kM * kN);
  a.fill_random(rng, -1, 1);
  w.fill_random(rng, -1, 1);
  d.poison();
  a.upload();
  w.upload();
  d.upload();
  Launch launch{Backend::kCuda, nullptr};
  LaunchRecord record;
  launch.record = &record;
  Status s = kernels::matmul_bt(TensorView<const bfloat16, 2>(a.data(), {kM, kK}),
                                TensorView<const bfloat16, 2>(w.data(), {kN, kK}),
                                TensorView<bfloat16, 2>(d.data(), {kM, kN}), launch);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_STREQ(record.instance, "matmul_bt_bf16_bf16_decode");
  EXPECT_EQ(record.grid, (std::array<int64_t, 3>{4, 1, 32}));
  EXPECT_EQ(record.launched_cluster, 1) << "32 clusters of 4 placed at once on this device?";
  d.download();
  int misses = 0;
  for (int64_t i = 0; i < kM && misses < 5; ++i)
    for (int64_t j = 0; j < kN && misses < 5; j += 41) {
      double acc = 0;
      for (int64_t k = 0; k < kK; ++k)
        acc += to_float(a.host()[i * kK + k]) * double{to_float(w.host()[j * kK + k])};
      if (!expect_close(d.host()[i * kN + j], acc,
                        "d[" + std::to_string(i) + ", " + std::to_string(j) + "]"))
        ++misses;
    }
}

}  // namespace
}  // namespace pallas::testing

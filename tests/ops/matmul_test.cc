// matmul (B as [K, N]) and matmul_bt (B as [N, K]) on every backend against a float64
// reference on fresh random data: dims that are not multiples of the 128 x 128 x 64 tile
// (1, 7, 63, 65, 127, 129, 257, ...), a partial last K step, row strides TMA can copy and
// strides it cannot (the direct twin), and the sm_80 form (FMAs) on the emulator. Outputs are
// poisoned; the padding of strided outputs must stay untouched.

#include "test_support.h"

#include <pallas/detail/kernel_image.h>
#include <pallas/kernels.h>

namespace pallas::testing {
namespace {

struct MatmulShape {
  int64_t m, n, k;
  int64_t pad = 0;  // elements after each row of a, b and d
};

/// Runs one product and compares with sum_k a[i, k] * b[k, j] in float64.
/// Tolerance: f32 sums of K exact products (f16/bf16 products are exact in f32)
/// lose at most ~K ulps of the sum of |a b|; a half-precision D adds its rounding.
template <class T, class Out>
void check_matmul(Backend backend, bool b_transposed, MatmulShape s, int compute_capability = 90) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(b_transposed ? "matmul_bt " : "matmul ") + dtype_name<T>() + "->" +
               dtype_name<Out>() + " m " + std::to_string(s.m) + " n " + std::to_string(s.n) +
               " k " + std::to_string(s.k) + " pad " + std::to_string(s.pad) + " seed " +
               std::to_string(seed));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  const int64_t as = s.k + s.pad, bs = (b_transposed ? s.k : s.n) + s.pad, ds = s.n + s.pad;
  const int64_t b_rows = b_transposed ? s.n : s.k;
  Array<T> a(backend, static_cast<size_t>(s.m * as)), b(backend, static_cast<size_t>(b_rows * bs));
  Array<Out> d(backend, static_cast<size_t>(s.m * ds));
  for (T& v : a.host()) v = from_float<T>(dist(rng));
  for (T& v : b.host()) v = from_float<T>(dist(rng));
  const Out guard = from_float<Out>(12345.0f);
  for (Out& v : d.host()) v = guard;
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t j = 0; j < s.n; ++j) d.host()[i * ds + j] = from_float<Out>(dist(rng));  // poison
  a.upload();
  b.upload();
  d.upload();
  const uint64_t before = detail::tma_descriptors_handed_out();
  TensorView<const T, 2> av(a.data(), {s.m, s.k}, {as, 1});
  TensorView<const T, 2> bv(b.data(), {b_rows, b_transposed ? s.k : s.n}, {bs, 1});
  TensorView<Out, 2> dv(d.data(), {s.m, s.n}, {ds, 1});
  Launch launch{backend, nullptr, {.compute_capability = compute_capability}};
  Status status =
      b_transposed ? kernels::matmul_bt(av, bv, dv, launch) : kernels::matmul(av, bv, dv, launch);
  ASSERT_TRUE(status.ok()) << status.message();
  d.download();
  // TMA copies a and b when their row strides are multiples of 16 bytes (the
  // stride of a single row is never used); the CUDA backend decides by device.
  auto tma_rows = [](int64_t rows, int64_t stride) {
    return rows == 1 || stride * static_cast<int64_t>(sizeof(T)) % 16 == 0;
  };
  const bool expect_tma =
      backend == Backend::kEmulator && tma_rows(s.m, as) && tma_rows(b_rows, bs);
  if (backend != Backend::kCuda)
    EXPECT_EQ(detail::tma_descriptors_handed_out() - before, expect_tma ? 2u : 0u)
        << (expect_tma ? "the TMA instance did not run" : "the direct twin did not run");
  int misses = 0;
  for (int64_t i = 0; i < s.m && misses < 5; ++i)
    for (int64_t j = 0; j < ds && misses < 5; ++j) {
      const double got = to_float(d.host()[i * ds + j]);
      if (j >= s.n) {
        if (got != to_float(guard)) {
          ADD_FAILURE() << "d[" << i << ", " << j << "] (padding) = " << got;
          ++misses;
        }
        continue;
      }
      double want = 0, magnitude = 0;
      for (int64_t kk = 0; kk < s.k; ++kk) {
        const double x = to_float(a.host()[i * as + kk]);
        const double y = to_float(b_transposed ? b.host()[j * bs + kk] : b.host()[kk * bs + j]);
        want += x * y;
        magnitude += std::abs(x * y);
      }
      double tol = 1e-6 * static_cast<double>(s.k) * magnitude + 1e-6;
      if constexpr (!std::is_same_v<Out, float>) tol += Tolerance<Out>::rtol * std::abs(want);
      if (!(std::abs(got - want) <= tol)) {
        ADD_FAILURE() << "d[" << i << ", " << j << "] = " << got << ", want " << want
                      << " (tolerance " << tol << ")";
        ++misses;
      }
    }
}

class MatmulTest : public BackendTest {};

/// Shapes through the TMA instance (rows of 16-byte multiples) and the direct twin.
template <class T, class Out>
void check_shapes(Backend backend, bool b_transposed) {
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
  for (MatmulShape s : shapes) check_matmul<T, Out>(backend, b_transposed, s);
}

TEST_P(MatmulTest, BTransposedBF16) { check_shapes<bfloat16, bfloat16>(GetParam(), true); }
TEST_P(MatmulTest, BTransposedF16ToF32) { check_shapes<half, float>(GetParam(), true); }
TEST_P(MatmulTest, BF16) { check_shapes<bfloat16, bfloat16>(GetParam(), false); }
TEST_P(MatmulTest, F16ToF32) { check_shapes<half, float>(GetParam(), false); }

// The sm_80 form (cp.async staging, FMAs until an mma.sync rule exists) on the emulator.
TEST_P(MatmulTest, Sm80Form) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the sm_80 form is checked on the emulator";
  check_matmul<bfloat16, bfloat16>(Backend::kEmulator, true, {129, 65, 72}, 80);
  check_matmul<half, float>(Backend::kEmulator, false, {65, 136, 80}, 80);
  check_matmul<half, float>(Backend::kEmulator, true, {7, 9, 17}, 80);
}

INSTANTIATE_TEST_SUITE_P(Backends, MatmulTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

}  // namespace
}  // namespace pallas::testing

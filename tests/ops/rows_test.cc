// Row-wise ops (norms, softmax, row reductions) on every backend against
// float64 references on fresh random data, for the row lengths around the
// warp, the chunk and far past it, 1 / 3 / many rows, and strided rows whose
// padding must stay untouched.

#include "test_support.h"

#include <pallas/detail/kernel_image.h>
#include <pallas/kernels.h>

namespace pallas::testing {
namespace {

struct RowShape {
  int64_t rows, cols, pad;
};

std::vector<RowShape> row_shapes() {
  std::vector<RowShape> shapes;
  for (int64_t cols : {1, 31, 32, 33, 1000, 4096, 65537, 262144}) {
    shapes.push_back({1, cols, 0});
    shapes.push_back({3, cols, 5});  // strided rows
    if (cols <= 4096) shapes.push_back({300, cols, 0});
  }
  // Either side of the widths where a program stops taking a tile of 16 rows (128), of 4
  // rows (512); 37 rows leave a partial tile.
  for (int64_t cols : {128, 129, 512, 513}) shapes.push_back({37, cols, 3});
  // Enough rows (>= 512) that each program does a whole row: one read of a row of at most 4096
  // elements (2500), or a pass for the statistics and one for the output (4100).
  shapes.push_back({520, 2500, 1});
  shapes.push_back({513, 4100, 0});
  return shapes;
}

std::string describe(const RowShape& s) {
  return std::to_string(s.rows) + "x" + std::to_string(s.cols) + " row stride " +
         std::to_string(s.cols + s.pad);
}

constexpr float kGuard = 12345.0f;

/// A [rows, cols] array with row stride cols + pad on the backend.
template <class T>
struct Matrix {
  RowShape s;
  Array<T> a;
  Matrix(Backend backend, RowShape shape) : s(shape), a(backend, shape.rows * stride()) {}
  int64_t stride() const { return s.cols + s.pad; }
  T& at(int64_t r, int64_t c) { return a.host()[r * stride() + c]; }
  TensorView<T, 2> view() { return TensorView<T, 2>(a.data(), {s.rows, s.cols}, {stride(), 1}); }
  TensorView<const T, 2> cview() {
    return TensorView<const T, 2>(a.data(), {s.rows, s.cols}, {stride(), 1});
  }
  /// Output: NaN in the matrix, a guard value in the padding.
  void poison() {
    a.poison();
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = s.cols; c < stride(); ++c) at(r, c) = from_float<T>(kGuard);
  }
  bool padding_untouched() {
    for (int64_t r = 0; r < s.rows; ++r)
      for (int64_t c = s.cols; c < stride(); ++c)
        if (to_float(at(r, c)) != to_float(from_float<T>(kGuard))) {
          ADD_FAILURE() << "padding [" << r << ", " << c << "] was written";
          return false;
        }
    return true;
  }
};

template <class T>
std::vector<double> row(Matrix<T>& m, int64_t r) {
  std::vector<double> v(static_cast<size_t>(m.s.cols));
  for (int64_t c = 0; c < m.s.cols; ++c) v[c] = to_float(m.at(r, c));
  return v;
}

/// Checks y against ref(row) for every row; returns false at the first miss.
/// `ref` returns the expected values, or (for results that are sums of terms)
/// pairs of expected value and the sum of the terms' magnitudes, which is what
/// rounding error scales with when terms cancel.
template <class T, class Ref>
bool check_rows(Matrix<T>& y, Ref ref) {
  for (int64_t r = 0; r < y.s.rows; ++r) {
    auto want = ref(r);
    for (int64_t c = 0; c < y.s.cols; ++c) {
      std::string where = "[" + std::to_string(r) + ", " + std::to_string(c) + "]";
      bool ok;
      if constexpr (std::is_same_v<decltype(want), std::vector<double>>) {
        ok = expect_close(y.at(r, c), want[c], where);
      } else {
        auto [value, magnitude] = want[c];
        double got = to_float(y.at(r, c));
        double tol = Tolerance<T>::atol + Tolerance<T>::rtol * magnitude;
        ok = !std::isnan(got) && std::abs(got - value) <= tol;
        if (!ok)
          ADD_FAILURE() << where << ": got " << got << ", want " << value << " (tolerance " << tol
                        << ")";
      }
      if (!ok) return false;
    }
  }
  return y.padding_untouched();
}

enum class Norm { kRms, kLayer };

template <class T>
void check_norm(Backend backend, Norm norm, bool residual,
                const std::vector<RowShape>& shapes = row_shapes(),
                const EmulatorOptions& emulator = {}) {
  for (RowShape s : shapes) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string(norm == Norm::kRms ? "rms_norm" : "layer_norm") +
                 (residual ? "_residual " : " ") + dtype_name<T>() + " " + describe(s) +
                 " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Matrix<T> x(backend, s), r(backend, s), y(backend, s), h(backend, s);
    Array<T> w(backend, s.cols), b(backend, s.cols);
    x.a.fill_random(rng, -3, 5);  // a non-zero mean exercises layer_norm's centring
    r.a.fill_random(rng, -1, 1);
    w.fill_random(rng, 0.5f, 1.5f);
    b.fill_random(rng, -1, 1);
    y.poison();
    h.poison();
    for (auto* m : {&x, &r, &y, &h}) m->a.upload();
    w.upload();
    b.upload();
    const float eps = 1e-5f;
    TensorView<const T, 1> wv(w.data(), {s.cols}), bv(b.data(), {s.cols});
    Launch launch{backend, nullptr, emulator};
    Status st;
    if (norm == Norm::kRms && !residual)
      st = kernels::rms_norm(x.cview(), wv, eps, y.view(), launch);
    if (norm == Norm::kRms && residual)
      st = kernels::rms_norm_residual(x.cview(), r.cview(), wv, eps, y.view(), h.view(), launch);
    if (norm == Norm::kLayer && !residual)
      st = kernels::layer_norm(x.cview(), wv, bv, eps, y.view(), launch);
    if (norm == Norm::kLayer && residual)
      st = kernels::layer_norm_residual(x.cview(), r.cview(), wv, bv, eps, y.view(), h.view(),
                                        launch);
    ASSERT_TRUE(st.ok()) << st.message();
    y.a.download();
    h.a.download();
    // The normalized input: x, or h = x + r rounded to T.
    auto input = [&](int64_t i) {
      std::vector<double> v = row(x, i);
      if (residual)
        for (int64_t c = 0; c < s.cols; ++c)
          v[c] = to_float(from_float<T>(to_float(x.at(i, c)) + to_float(r.at(i, c))));
      return v;
    };
    if (residual && !check_rows(h, input)) return;
    check_rows(y, [&](int64_t i) {
      std::vector<double> v = input(i);
      std::vector<std::pair<double, double>> out(v.size());
      double n = double(s.cols), mean = 0, var = 0, ms = 0;
      for (double e : v) mean += e, ms += e * e;
      mean /= n;
      ms /= n;
      for (double e : v) var += (e - mean) * (e - mean);
      var /= n;
      for (int64_t c = 0; c < s.cols; ++c) {
        double wc = to_float(w.host()[c]), bc = to_float(b.host()[c]);
        double scaled = norm == Norm::kRms ? v[c] / std::sqrt(ms + eps) * wc
                                           : (v[c] - mean) / std::sqrt(var + eps) * wc;
        double shift = norm == Norm::kRms ? 0.0 : bc;
        // layer_norm's v - mean cancels: an f32 mean's rounding error (it grows with the row
        // length) moves every output by that error times scale * w, so the error scales with
        // |v| + |mean| rather than with |v - mean|.
        double terms = norm == Norm::kRms ? std::abs(scaled)
                                          : (std::abs(v[c]) + std::abs(mean)) /
                                                std::sqrt(var + eps) * std::abs(wc);
        out[static_cast<size_t>(c)] = {scaled + shift, terms + std::abs(shift)};
      }
      return out;
    });
  }
}

template <class T>
void check_softmax(Backend backend, bool log, const std::vector<RowShape>& shapes = row_shapes(),
                   const EmulatorOptions& emulator = {}) {
  for (RowShape s : shapes) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string(log ? "log_softmax " : "softmax ") + dtype_name<T>() + " " +
                 describe(s) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Matrix<T> x(backend, s), y(backend, s);
    x.a.fill_random(rng, -8, 8);
    y.poison();
    x.a.upload();
    y.a.upload();
    Launch launch{backend, nullptr, emulator};
    Status st = log ? kernels::log_softmax(x.cview(), y.view(), launch)
                    : kernels::softmax(x.cview(), y.view(), launch);
    ASSERT_TRUE(st.ok()) << st.message();
    y.a.download();
    check_rows(y, [&](int64_t i) {
      std::vector<double> v = row(x, i), out(v.size());
      double m = *std::max_element(v.begin(), v.end()), sum = 0;
      for (double e : v) sum += std::exp(e - m);
      for (size_t c = 0; c < v.size(); ++c)
        out[c] = log ? v[c] - m - std::log(sum) : std::exp(v[c] - m) / sum;
      return out;
    });
  }
}

template <class T>
void check_row_reductions(Backend backend, int compute_capability = 90) {
  for (RowShape s : row_shapes()) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string("row_sum/row_max ") + dtype_name<T>() + " " + describe(s) +
                 " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Matrix<T> x(backend, s);
    Array<T> sums(backend, s.rows), maxes(backend, s.rows);
    x.a.fill_random(rng, -2, 2);
    sums.poison();
    maxes.poison();
    x.a.upload();
    sums.upload();
    maxes.upload();
    Launch launch{backend, nullptr, {.compute_capability = compute_capability}};
    const uint64_t before = detail::tma_descriptors_handed_out();
    ASSERT_TRUE(kernels::row_sum(x.cview(), TensorView<T, 1>(sums.data(), {s.rows}), launch).ok());
    ASSERT_TRUE(kernels::row_max(x.cview(), TensorView<T, 1>(maxes.data(), {s.rows}), launch).ok());
    // Rows past 512 elements take the rows path, whose chunks a TMA pipeline stages
    // where TMA can copy x (a row stride of a multiple of 16 bytes, or one row): on
    // the emulator; the host runs the direct twin.
    const bool tma = backend == Backend::kEmulator && s.cols > 512 &&
                     (s.rows == 1 || (s.cols + s.pad) * int64_t{sizeof(T)} % 16 == 0);
    if (backend != Backend::kCuda) {
      EXPECT_EQ(detail::tma_descriptors_handed_out() - before, tma ? 2u : 0u);
    }
    sums.download();
    maxes.download();
    for (int64_t r = 0; r < s.rows; ++r) {
      std::vector<double> v = row(x, r);
      double sum = 0, l1 = 0;
      for (double e : v) sum += e, l1 += std::abs(e);
      // A sum's rounding error scales with the sum of magnitudes, not with the result.
      double tol = Tolerance<T>::atol + Tolerance<T>::rtol * l1;
      double got = to_float(sums.host()[r]);
      ASSERT_FALSE(std::isnan(got) || std::abs(got - sum) > tol)
          << "row " << r << " sum: got " << got << ", want " << sum << " (tolerance " << tol << ")";
      ASSERT_TRUE(expect_close(maxes.host()[r], *std::max_element(v.begin(), v.end()),
                               "row " + std::to_string(r) + " max"));
    }
  }
}

class RowsTest : public BackendTest {};

TEST_P(RowsTest, RmsNorm) {
  check_norm<float>(GetParam(), Norm::kRms, false);
  check_norm<bfloat16>(GetParam(), Norm::kRms, false);
  check_norm<half>(GetParam(), Norm::kRms, false);
}
TEST_P(RowsTest, RmsNormResidual) {
  check_norm<float>(GetParam(), Norm::kRms, true);
  check_norm<bfloat16>(GetParam(), Norm::kRms, true);
}
TEST_P(RowsTest, LayerNorm) {
  check_norm<float>(GetParam(), Norm::kLayer, false);
  check_norm<half>(GetParam(), Norm::kLayer, false);
}
TEST_P(RowsTest, LayerNormResidual) {
  check_norm<float>(GetParam(), Norm::kLayer, true);
  check_norm<bfloat16>(GetParam(), Norm::kLayer, true);
}
TEST_P(RowsTest, Softmax) {
  check_softmax<float>(GetParam(), false);
  check_softmax<bfloat16>(GetParam(), false);
}
TEST_P(RowsTest, LogSoftmax) {
  check_softmax<float>(GetParam(), true);
  check_softmax<half>(GetParam(), true);
}
TEST_P(RowsTest, RowSumAndMax) {
  check_row_reductions<float>(GetParam());
  check_row_reductions<bfloat16>(GetParam());
}
// The sm_80 form of the rows path's staged instance (cp.async pipeline) on the emulator.
TEST_P(RowsTest, RowSumAndMaxCpAsyncForm) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the sm_80 form is checked on the emulator";
  check_row_reductions<half>(Backend::kEmulator, 80);
}

INSTANTIATE_TEST_SUITE_P(Backends, RowsTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

TEST(Status, NegativeEpsIsRejected) {
  std::vector<float> x(8), w(4), y(8);
  Status s = kernels::rms_norm(TensorView<const float, 2>(x.data(), {2, 4}),
                               TensorView<const float, 1>(w.data(), {4}), -1.0f,
                               TensorView<float, 2>(y.data(), {2, 4}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "rms_norm_f32: scalar 'eps' is -1, it must be at least 0");
  // As the user wrote it, not rounded to six decimals ("-0.000000").
  s = kernels::rms_norm(TensorView<const float, 2>(x.data(), {2, 4}),
                        TensorView<const float, 1>(w.data(), {4}), -1e-9f,
                        TensorView<float, 2>(y.data(), {2, 4}), Launch{Backend::kHost});
  EXPECT_EQ(s.message(), "rms_norm_f32: scalar 'eps' is -1e-09, it must be at least 0");
}

TEST(Status, BadEmulatorOptionsAreInvalidArguments) {
  std::vector<float> x(8), w(4), y(8);
  auto run = [&](EmulatorOptions options) {
    return kernels::rms_norm(TensorView<const float, 2>(x.data(), {2, 4}),
                             TensorView<const float, 1>(w.data(), {4}), 1e-5f,
                             TensorView<float, 2>(y.data(), {2, 4}),
                             Launch{Backend::kEmulator, nullptr, options});
  };
  Status s = run({.concurrent_programs = 0});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "rms_norm_f32: Launch::emulator.concurrent_programs is 0; at least 1 program must be "
            "resident");
  s = run({.compute_capability = 75});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "rms_norm_f32: Launch::emulator.compute_capability is 75; the emulator stands for "
            "sm_80 to sm_12x (80 to 129)");
  EXPECT_TRUE(run({.compute_capability = 80}).ok());
}

TEST(Status, NormWeightLengthMismatch) {
  std::vector<float> x(8), w(5), y(8);
  Status s = kernels::rms_norm(TensorView<const float, 2>(x.data(), {2, 4}),
                               TensorView<const float, 1>(w.data(), {5}), 1e-5f,
                               TensorView<float, 2>(y.data(), {2, 4}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_EQ(s.message(),
            "rms_norm_f32: operand 'w' dim 0 is 5, but dim 'cols' is 4 (set by operand 'x' dim 1)");
}

// Every row path's kernel (rows.h: RowPath; tiles with per-row values kept in
// warps, rows held in registers, long rows, split rows) in random thread
// orders: the emulator finds no race, no out-of-bounds access and no deadlock,
// and the results match the reference under each order.
TEST(RowPathsEmulator, EveryPathUnderRandomSchedules) {
  const std::vector<RowShape> paths = {{37, 100, 0},   {13, 300, 5},   {600, 1500, 0},
                                       {530, 3000, 1}, {520, 5000, 0}, {2, 10000, 3}};
  for (uint64_t seed : {3, 11}) {
    SCOPED_TRACE("schedule " + std::to_string(seed));
    const EmulatorOptions emulator{2, seed};
    check_softmax<bfloat16>(Backend::kEmulator, /*log=*/false, paths, emulator);
    check_softmax<float>(Backend::kEmulator, /*log=*/true, paths, emulator);
    check_norm<bfloat16>(Backend::kEmulator, Norm::kRms, /*residual=*/false, paths, emulator);
    check_norm<float>(Backend::kEmulator, Norm::kLayer, /*residual=*/true, paths, emulator);
  }
}

// Split rows (rows.h: split_rows) with 1 and 2 programs resident at once, in round-robin and
// random thread orders: an apply item waits only for items with smaller tickets, so a launch
// completes however few programs run at once, and leaves its semaphores at zero.
TEST(SplitRowsEmulator, CompleteWithFewResidentPrograms) {
  const std::vector<RowShape> split = {{2, 10000, 3}, {1, 4097, 0}};
  for (int resident : {1, 2})
    for (uint64_t seed : {0, 7}) {
      SCOPED_TRACE("resident " + std::to_string(resident) + " schedule " + std::to_string(seed));
      const EmulatorOptions emulator{resident, seed};
      check_softmax<float>(Backend::kEmulator, /*log=*/false, split, emulator);
      check_norm<float>(Backend::kEmulator, Norm::kLayer, /*residual=*/true, split, emulator);
    }
}

// Split rows on two streams at once, launched back to back: each launch takes its ticket
// counter and row semaphores from the pool, so neither sees the other's, and every launch
// leaves them at zero for the next.
TEST(SplitRowsCuda, TwoStreamsAtOnce) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  constexpr int64_t kRows = 2, kCols = 300000, kLaunches = 8;
  std::mt19937 rng(fresh_seed());
  Array<float> a(Backend::kCuda, kRows * kCols), b(Backend::kCuda, kRows * kCols);
  a.fill_random(rng, -8, 8);
  b.fill_random(rng, -4, 4);
  a.upload();
  b.upload();
  Array<float> out_a(Backend::kCuda, kLaunches * kRows * kCols),
      out_b(Backend::kCuda, kLaunches * kRows * kCols);
  out_a.poison();
  out_b.poison();
  out_a.upload();
  out_b.upload();
  cudaStream_t s1, s2;
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&s2), cudaSuccess);
  for (int64_t i = 0; i < kLaunches; ++i) {
    const int64_t at = i * kRows * kCols;
    ASSERT_TRUE(kernels::softmax(TensorView<const float, 2>(a.data(), {kRows, kCols}),
                                 TensorView<float, 2>(out_a.data() + at, {kRows, kCols}),
                                 Launch{Backend::kCuda, s1})
                    .ok());
    ASSERT_TRUE(kernels::softmax(TensorView<const float, 2>(b.data(), {kRows, kCols}),
                                 TensorView<float, 2>(out_b.data() + at, {kRows, kCols}),
                                 Launch{Backend::kCuda, s2})
                    .ok());
  }
  out_a.download();
  out_b.download();
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
  for (auto [in, out] : {std::pair{&a, &out_a}, std::pair{&b, &out_b}}) {
    for (int64_t r = 0; r < kRows; ++r) {
      const float* row = in->host().data() + r * kCols;
      double hi = *std::max_element(row, row + kCols), total = 0;
      for (int64_t c = 0; c < kCols; ++c) total += std::exp(row[c] - hi);
      for (int64_t i = 0; i < kLaunches; ++i)
        for (int64_t c = 0; c < kCols; ++c)
          ASSERT_TRUE(expect_close(out->host()[(i * kRows + r) * kCols + c],
                                   std::exp(row[c] - hi) / total,
                                   "launch " + std::to_string(i) + " row " + std::to_string(r) +
                                       " element " + std::to_string(c)));
    }
  }
}

}  // namespace
}  // namespace pallas::testing

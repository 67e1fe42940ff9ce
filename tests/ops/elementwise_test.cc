// Every elementwise op, every dtype, on the host and CUDA backends, against
// float64 references on fresh random data. Sizes straddle the 2048-element
// block (1, block-1, block, block+1, a multi-block size, a large prime).

#include "test_support.h"

#include <pallas/kernels.h>

namespace pallas::testing {
namespace {

using kernels::add;
using kernels::axpy;
using kernels::bias_gelu;
using kernels::gelu;
using kernels::mul;
using kernels::silu;

constexpr int64_t kSizes[] = {1, 2047, 2048, 2049, 3 * 2048 + 5, 1000003};

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }

template <class T, class Op, class Ref>
void check_binary(Backend backend, Op op, Ref ref, const char* name) {
  for (int64_t n : kSizes) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string(name) + " " + dtype_name<T>() + " n=" + std::to_string(n) +
                 " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<T> x(backend, n), y(backend, n), out(backend, n);
    x.fill_random(rng, -4, 4);
    y.fill_random(rng, -4, 4);
    out.poison();
    x.upload();
    y.upload();
    out.upload();
    Status s = op(TensorView<const T, 1>(x.data(), {n}), TensorView<const T, 1>(y.data(), {n}),
                  TensorView<T, 1>(out.data(), {n}), Launch{backend, nullptr});
    ASSERT_TRUE(s.ok()) << s.message();
    out.download();
    for (int64_t i = 0; i < n; ++i)
      if (!expect_close(out.host()[i], ref(to_float(x.host()[i]), to_float(y.host()[i])),
                        "element " + std::to_string(i)))
        break;
  }
}

template <class T, class Op, class Ref>
void check_unary(Backend backend, Op op, Ref ref, const char* name) {
  for (int64_t n : kSizes) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string(name) + " " + dtype_name<T>() + " n=" + std::to_string(n) +
                 " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<T> x(backend, n), out(backend, n);
    x.fill_random(rng, -6, 6);
    out.poison();
    x.upload();
    out.upload();
    Status s = op(TensorView<const T, 1>(x.data(), {n}), TensorView<T, 1>(out.data(), {n}),
                  Launch{backend, nullptr});
    ASSERT_TRUE(s.ok()) << s.message();
    out.download();
    for (int64_t i = 0; i < n; ++i)
      if (!expect_close(out.host()[i], ref(to_float(x.host()[i])), "element " + std::to_string(i)))
        break;
  }
}

template <class T>
void check_axpy(Backend backend) {
  for (int64_t n : kSizes) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string("axpy ") + dtype_name<T>() + " n=" + std::to_string(n) +
                 " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<T> x(backend, n), y(backend, n);
    x.fill_random(rng, -4, 4);
    y.fill_random(rng, -4, 4);
    std::vector<T> y0 = y.host();
    const float a = std::uniform_real_distribution<float>(0.5f, 2.0f)(rng);
    x.upload();
    y.upload();
    Status s = axpy(a, TensorView<const T, 1>(x.data(), {n}), TensorView<T, 1>(y.data(), {n}),
                    Launch{backend, nullptr});
    ASSERT_TRUE(s.ok()) << s.message();
    y.download();
    for (int64_t i = 0; i < n; ++i)
      if (!expect_close(y.host()[i],
                        double(a) * to_float(x.host()[i]) + to_float(y0[static_cast<size_t>(i)]),
                        "element " + std::to_string(i)))
        break;
  }
}

// bias_gelu over [rows, cols] in 8 x 256 tiles; rows are `stride` elements
// apart and the padding between them must stay untouched. `broadcast`: x's
// row stride is 0 (an input may broadcast: every row of x is its first).
template <class T>
void check_bias_gelu(Backend backend) {
  struct Shape {
    int64_t rows, cols, pad;
    bool broadcast = false;
  };
  const Shape shapes[] = {{1, 1, 0},         {7, 255, 0},       {8, 256, 0},  {9, 257, 0},
                          {33, 1000, 0},     {3, 4099, 0},      {17, 300, 5}, {8, 256, 3},
                          {9, 257, 0, true}, {17, 300, 5, true}};
  for (const Shape& sh : shapes) {
    uint32_t seed = fresh_seed();
    int64_t stride = sh.cols + sh.pad;
    const int64_t x_stride = sh.broadcast ? 0 : stride;
    SCOPED_TRACE(std::string("bias_gelu ") + dtype_name<T>() + " " + std::to_string(sh.rows) + "x" +
                 std::to_string(sh.cols) + " row stride " + std::to_string(stride) +
                 " x row stride " + std::to_string(x_stride) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    size_t total = static_cast<size_t>(sh.rows * stride);
    Array<T> x(backend, total), bias(backend, sh.cols), out(backend, total);
    x.fill_random(rng, -4, 4);
    bias.fill_random(rng, -1, 1);
    out.poison();
    const T guard = from_float<T>(12345.0f);
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t c = sh.cols; c < stride; ++c) out.host()[r * stride + c] = guard;
    x.upload();
    bias.upload();
    out.upload();
    Status s = bias_gelu(TensorView<const T, 2>(x.data(), {sh.rows, sh.cols}, {x_stride, 1}),
                         TensorView<const T, 1>(bias.data(), {sh.cols}),
                         TensorView<T, 2>(out.data(), {sh.rows, sh.cols}, {stride, 1}),
                         Launch{backend, nullptr});
    ASSERT_TRUE(s.ok()) << s.message();
    out.download();
    bool ok = true;
    for (int64_t r = 0; r < sh.rows && ok; ++r) {
      for (int64_t c = 0; c < sh.cols && ok; ++c) {
        double want =
            gelu_ref(double(to_float(x.host()[r * x_stride + c])) + to_float(bias.host()[c]));
        ok = expect_close(out.host()[r * stride + c], want,
                          "element [" + std::to_string(r) + ", " + std::to_string(c) + "]");
      }
      for (int64_t c = sh.cols; c < stride && ok; ++c)
        ok = expect_close(out.host()[r * stride + c], 12345.0,
                          "padding [" + std::to_string(r) + ", " + std::to_string(c) + "]");
    }
  }
}

class ElementwiseTest : public BackendTest {};

TEST_P(ElementwiseTest, Add) {
  auto ref = [](double a, double b) { return a + b; };
  auto op = [](auto... args) { return add(args...); };
  check_binary<float>(GetParam(), op, ref, "add");
  check_binary<half>(GetParam(), op, ref, "add");
  check_binary<bfloat16>(GetParam(), op, ref, "add");
}

TEST_P(ElementwiseTest, Mul) {
  auto ref = [](double a, double b) { return a * b; };
  auto op = [](auto... args) { return mul(args...); };
  check_binary<float>(GetParam(), op, ref, "mul");
  check_binary<half>(GetParam(), op, ref, "mul");
  check_binary<bfloat16>(GetParam(), op, ref, "mul");
}

TEST_P(ElementwiseTest, AxpyInPlace) {
  check_axpy<float>(GetParam());
  check_axpy<half>(GetParam());
  check_axpy<bfloat16>(GetParam());
}

TEST_P(ElementwiseTest, Gelu) {
  auto op = [](auto... args) { return gelu(args...); };
  check_unary<float>(GetParam(), op, gelu_ref, "gelu");
  check_unary<half>(GetParam(), op, gelu_ref, "gelu");
  check_unary<bfloat16>(GetParam(), op, gelu_ref, "gelu");
}

TEST_P(ElementwiseTest, Silu) {
  auto op = [](auto... args) { return silu(args...); };
  check_unary<float>(GetParam(), op, silu_ref, "silu");
  check_unary<half>(GetParam(), op, silu_ref, "silu");
  check_unary<bfloat16>(GetParam(), op, silu_ref, "silu");
}

TEST_P(ElementwiseTest, BiasGeluStridedRows) {
  check_bias_gelu<float>(GetParam());
  check_bias_gelu<half>(GetParam());
  check_bias_gelu<bfloat16>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Backends, ElementwiseTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

}  // namespace
}  // namespace pallas::testing

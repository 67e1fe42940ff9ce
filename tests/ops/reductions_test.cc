// Whole-array reductions (sum_all, max_all): programs combine their partials
// through a semaphore in one launch. Checked on every backend, repeatedly (the
// semaphore must be back at zero for the next launch; the emulator also checks
// it at the end of each launch), and on CUDA from two streams at once.

#include "test_support.h"

#include <pallas/kernels.h>

namespace pallas::testing {
namespace {

class WholeArrayTest : public BackendTest {};

template <class T>
void check_whole_array(Backend backend) {
  for (int64_t n : {0, 1, 2047, 2048, 2049, 8191, 8192, 8193, 1000003}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string(dtype_name<T>()) + " n=" + std::to_string(n) +
                 " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<T> x(backend, n), s(backend, 1), m(backend, 1);
    x.fill_random(rng, -3, 2);
    x.upload();
    double sum = 0, l1 = 0, max = -std::numeric_limits<double>::infinity();
    for (T v : x.host()) {
      sum += to_float(v);
      l1 += std::abs(to_float(v));
      max = std::max<double>(max, to_float(v));
    }
    for (int repeat = 0; repeat < 3; ++repeat) {  // a stuck semaphore would skip the result
      s.poison();
      m.poison();
      s.upload();
      m.upload();
      Launch launch{backend, nullptr};
      Status st = kernels::sum_all(TensorView<const T, 1>(x.data(), {n}),
                                   TensorView<T, 1>(s.data(), {1}), launch);
      ASSERT_TRUE(st.ok()) << st.message();
      st = kernels::max_all(TensorView<const T, 1>(x.data(), {n}), TensorView<T, 1>(m.data(), {1}),
                            launch);
      ASSERT_TRUE(st.ok()) << st.message();
      s.download();
      m.download();
      double got = to_float(s.host()[0]);
      double tol = Tolerance<T>::atol + Tolerance<T>::rtol * l1;
      ASSERT_TRUE(!std::isnan(got) && std::abs(got - sum) <= tol)
          << "sum: got " << got << ", want " << sum << " (tolerance " << tol << ")";
      ASSERT_EQ(double(to_float(m.host()[0])), max);
    }
  }
}

TEST_P(WholeArrayTest, SumAndMaxInOneLaunch) {
  check_whole_array<float>(GetParam());
  check_whole_array<bfloat16>(GetParam());
}

TEST_P(WholeArrayTest, OutputMustHaveOneElement) {
  std::vector<float> x(10), out(2);
  Status s = kernels::sum_all(TensorView<const float, 1>(x.data(), {10}),
                              TensorView<float, 1>(out.data(), {2}), Launch{Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_EQ(s.message(), "sum_all_f32: operand 'out' dim 0 is 2, but must be 1");
}

INSTANTIATE_TEST_SUITE_P(Backends, WholeArrayTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

// Two streams at once must not share semaphores: each launch gets its own from the pool.
TEST(WholeArrayCuda, TwoStreamsAtOnce) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 1 << 22;
  std::mt19937 rng(fresh_seed());
  Array<float> a(Backend::kCuda, n), b(Backend::kCuda, n);
  a.fill_random(rng, 0, 1);
  b.fill_random(rng, -1, 0);
  a.upload();
  b.upload();
  double want_a = 0, want_b = 0;
  for (int64_t i = 0; i < n; ++i) want_a += a.host()[i], want_b += b.host()[i];
  cudaStream_t s1, s2;
  ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&s2), cudaSuccess);
  std::vector<Array<float>*> outs;
  Array<float> out_a(Backend::kCuda, 16), out_b(Backend::kCuda, 16);
  for (int i = 0; i < 16; ++i) {
    ASSERT_TRUE(kernels::sum_all(TensorView<const float, 1>(a.data(), {n}),
                                 TensorView<float, 1>(out_a.data() + i, {1}),
                                 Launch{Backend::kCuda, s1})
                    .ok());
    ASSERT_TRUE(kernels::sum_all(TensorView<const float, 1>(b.data(), {n}),
                                 TensorView<float, 1>(out_b.data() + i, {1}),
                                 Launch{Backend::kCuda, s2})
                    .ok());
  }
  out_a.download();
  out_b.download();
  for (int i = 0; i < 16; ++i) {
    EXPECT_NEAR(out_a.host()[i], want_a, 1e-5 * n) << i;
    EXPECT_NEAR(out_b.host()[i], want_b, 1e-5 * n) << i;
  }
  cudaStreamDestroy(s1);
  cudaStreamDestroy(s2);
}

// One stream queueing many launches without waiting: each takes the regions of the one
// before it again (the pool's same-stream reuse; CudaLaunch.PooledRegionsFollowTheirStream
// tests the pool itself), so every sum relies on the previous launch having left its
// semaphores at zero. A kernel that did not would make the later sums wrong.
TEST(WholeArrayCuda, OneStreamQueueReusesItsRegions) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int64_t n = 1 << 22;
  std::mt19937 rng(fresh_seed());
  Array<float> a(Backend::kCuda, n);
  a.fill_random(rng, 0, 1);
  a.upload();
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += a.host()[i];
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  constexpr int kLaunches = 64;
  Array<float> out(Backend::kCuda, kLaunches);
  out.poison();
  out.upload();
  const auto sum_into = [&](int i) {
    return kernels::sum_all(TensorView<const float, 1>(a.data(), {n}),
                            TensorView<float, 1>(out.data() + i, {1}),
                            Launch{Backend::kCuda, stream});
  };
  for (int i = 0; i < kLaunches; ++i) ASSERT_TRUE(sum_into(i).ok()) << i;
  out.download();
  for (int i = 0; i < kLaunches; ++i) EXPECT_NEAR(out.host()[i], want, 1e-5 * n) << i;
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace pallas::testing

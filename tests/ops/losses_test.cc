// cross_entropy on every backend against a float64 reference, for vocabulary
// sizes from 1 to 262144, strided logits, and bad labels.

#include "test_support.h"

#include <pallas/detail/kernel_image.h>
#include <pallas/kernels.h>

namespace pallas::testing {
namespace {

class LossesTest : public BackendTest {};

template <class T>
void check_cross_entropy(Backend backend, int compute_capability = 90) {
  struct Shape {
    int64_t rows, vocab, pad;
  };
  for (Shape s : {Shape{1, 1, 0}, Shape{3, 33, 2}, Shape{100, 1000, 0}, Shape{2, 65537, 0},
                  Shape{2, 262144, 7}}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string(dtype_name<T>()) + " " + std::to_string(s.rows) + "x" +
                 std::to_string(s.vocab) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    const int64_t stride = s.vocab + s.pad;
    Array<T> logits(backend, s.rows * stride);
    Array<int32_t> labels(backend, s.rows);
    Array<float> loss(backend, s.rows);
    logits.fill_random(rng, -6, 6);
    std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(s.vocab - 1));
    for (int32_t& l : labels.host()) l = pick(rng);
    loss.poison();
    logits.upload();
    labels.upload();
    loss.upload();
    const uint64_t before = detail::tma_descriptors_handed_out();
    Status st = kernels::cross_entropy(
        TensorView<const T, 2>(logits.data(), {s.rows, s.vocab}, {stride, 1}),
        TensorView<const int32_t, 1>(labels.data(), {s.rows}),
        TensorView<float, 1>(loss.data(), {s.rows}),
        Launch{backend, nullptr, {.compute_capability = compute_capability}});
    ASSERT_TRUE(st.ok()) << st.message();
    // The logits' chunks are staged by a TMA pipeline where TMA can copy them (row
    // strides of a multiple of 16 bytes, or one row): on the emulator; the host runs the
    // direct twin.
    const bool tma =
        backend == Backend::kEmulator && (s.rows == 1 || stride * int64_t{sizeof(T)} % 16 == 0);
    if (backend != Backend::kCuda) {
      EXPECT_EQ(detail::tma_descriptors_handed_out() - before, tma ? 1u : 0u);
    }
    loss.download();
    for (int64_t r = 0; r < s.rows; ++r) {
      double m = -INFINITY, sum = 0;
      for (int64_t c = 0; c < s.vocab; ++c)
        m = std::max<double>(m, to_float(logits.host()[r * stride + c]));
      for (int64_t c = 0; c < s.vocab; ++c)
        sum += std::exp(to_float(logits.host()[r * stride + c]) - m);
      double want = m + std::log(sum) - to_float(logits.host()[r * stride + labels.host()[r]]);
      // The loss is f32; its error scales with the magnitudes of logsumexp and the picked logit.
      double scale = std::abs(m) + std::log(sum) + 6.0;
      ASSERT_NEAR(loss.host()[r], want, 1e-6 + 2e-6 * scale) << "row " << r;
    }
  }
}

TEST_P(LossesTest, CrossEntropy) {
  check_cross_entropy<float>(GetParam());
  check_cross_entropy<bfloat16>(GetParam());
}

// The sm_80 form of the staged instance (cp.async pipeline) on the emulator.
TEST_P(LossesTest, CrossEntropyCpAsyncForm) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the sm_80 form is checked on the emulator";
  check_cross_entropy<float>(Backend::kEmulator, 80);
  check_cross_entropy<bfloat16>(Backend::kEmulator, 80);
}

// Masked logits (-inf, as attention masks and vocabulary padding write them):
// they add nothing to the sum, a row with only its label's logit finite has
// loss 0, and a row whose logits are all -inf has a NaN loss (its logsumexp is -inf).
// Rows of 5000 span full chunks and a masked last one (rows.h:
// segment_logsumexp starts its running maxima finite, not at -inf).
template <class T>
void check_masked_cross_entropy(Backend backend) {
  constexpr int64_t kRows = 3, kVocab = 5000;
  uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(dtype_name<T>()) + " seed=" + std::to_string(seed));
  std::mt19937 rng(seed);
  Array<T> logits(backend, kRows * kVocab);
  Array<int32_t> labels(backend, kRows);
  Array<float> loss(backend, kRows);
  logits.fill_random(rng, -6, 6);
  std::bernoulli_distribution masked(0.3);
  const T ninf = static_cast<T>(-INFINITY);
  for (int64_t c = 0; c < kVocab; ++c) {
    if (masked(rng)) logits.host()[c] = ninf;         // row 0: 30% masked
    if (c != 4321) logits.host()[kVocab + c] = ninf;  // row 1: only its label is finite
    logits.host()[2 * kVocab + c] = ninf;             // row 2: everything masked
  }
  logits.host()[17] = static_cast<T>(1.5f);  // row 0's label is finite
  labels.host() = {17, 4321, 0};
  loss.poison();
  logits.upload();
  labels.upload();
  loss.upload();
  Status st = kernels::cross_entropy(TensorView<const T, 2>(logits.data(), {kRows, kVocab}),
                                     TensorView<const int32_t, 1>(labels.data(), {kRows}),
                                     TensorView<float, 1>(loss.data(), {kRows}), Launch{backend});
  ASSERT_TRUE(st.ok()) << st.message();
  loss.download();
  double m = -INFINITY, sum = 0;
  for (int64_t c = 0; c < kVocab; ++c) m = std::max<double>(m, to_float(logits.host()[c]));
  for (int64_t c = 0; c < kVocab; ++c) sum += std::exp(to_float(logits.host()[c]) - m);
  const double want = m + std::log(sum) - 1.5;
  EXPECT_NEAR(loss.host()[0], want, 1e-6 + 2e-6 * (std::abs(m) + std::log(sum) + 6.0));
  EXPECT_NEAR(loss.host()[1], 0.0, 1e-6);
  EXPECT_TRUE(std::isnan(loss.host()[2])) << loss.host()[2];
}

TEST_P(LossesTest, MaskedLogits) {
  check_masked_cross_entropy<float>(GetParam());
  check_masked_cross_entropy<bfloat16>(GetParam());
}

INSTANTIATE_TEST_SUITE_P(Backends, LossesTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

TEST(Status, LabelOutOfRange) {
  std::vector<float> logits(3 * 10), loss(3);
  std::vector<int32_t> labels = {4, 10, 0};
  for (Backend b : {Backend::kHost, Backend::kEmulator}) {
    Status s = kernels::cross_entropy(TensorView<const float, 2>(logits.data(), {3, 10}),
                                      TensorView<const int32_t, 1>(labels.data(), {3}),
                                      TensorView<float, 1>(loss.data(), {3}), Launch{b});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "cross_entropy_f32: operand 'labels' element 1 is 10, outside [0, 10)");
  }
}

// Several bad rows of a vocabulary split across programs: the count of failing programs, the
// first one's values, NaN losses for the bad rows and correct ones for the rest.
TEST(Status, SeveralLabelsOutOfRange) {
  constexpr int64_t kRows = 5, kVocab = 5000;
  std::mt19937 rng(fresh_seed());
  std::uniform_real_distribution<float> logit(-3, 3);
  std::vector<float> logits(kRows * kVocab);
  for (float& v : logits) v = logit(rng);
  std::vector<int32_t> labels = {4, 5000, -1, 4999, 123456};
  for (Backend b : {Backend::kHost, Backend::kEmulator}) {
    SCOPED_TRACE(to_string(b));
    std::vector<float> loss(kRows, 1234.5f);
    Status s = kernels::cross_entropy(TensorView<const float, 2>(logits.data(), {kRows, kVocab}),
                                      TensorView<const int32_t, 1>(labels.data(), {kRows}),
                                      TensorView<float, 1>(loss.data(), {kRows}), Launch{b});
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    const std::string counted = " (3 programs failed a check; the first is reported)";
    if (b == Backend::kHost) {  // programs run in grid order
      EXPECT_EQ(
          s.message(),
          "cross_entropy_f32: operand 'labels' element 1 is 5000, outside [0, 5000)" + counted);
    } else {
      EXPECT_TRUE(s.message().starts_with("cross_entropy_f32: operand 'labels' element ") &&
                  s.message().ends_with(counted))
          << s.message();
    }
    for (int64_t r : {1, 2, 4}) EXPECT_TRUE(std::isnan(loss[r])) << "row " << r;
    for (int64_t r : {0, 3}) {
      double m = -INFINITY, sum = 0;
      for (int64_t c = 0; c < kVocab; ++c) m = std::max<double>(m, logits[r * kVocab + c]);
      for (int64_t c = 0; c < kVocab; ++c) sum += std::exp(logits[r * kVocab + c] - m);
      EXPECT_NEAR(loss[r], m + std::log(sum) - logits[r * kVocab + labels[r]], 1e-4) << "row " << r;
    }
  }
}

// On the CUDA backend the labels are device memory: the launch does not wait for the kernel,
// so a bad label is reported by take_device_errors, or by the launch itself with
// Launch::check_device_errors. Its row's loss is NaN.
TEST(LossesCuda, LabelOutOfRangeIsADeviceError) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(take_device_errors().ok());  // nothing left over from earlier tests
  Array<float> logits(Backend::kCuda, 2 * 8), loss(Backend::kCuda, 2);
  Array<int32_t> labels(Backend::kCuda, 2);
  std::mt19937 rng(fresh_seed());
  logits.fill_random(rng, -1, 1);
  labels.host() = {3, -1};
  logits.upload();
  labels.upload();
  auto run = [&](const Launch& launch) {
    return kernels::cross_entropy(TensorView<const float, 2>(logits.data(), {2, 8}),
                                  TensorView<const int32_t, 1>(labels.data(), {2}),
                                  TensorView<float, 1>(loss.data(), {2}), launch);
  };
  const std::string message = "cross_entropy_f32: operand 'labels' element 1 is -1, outside [0, 8)";
  ASSERT_TRUE(run(Launch{Backend::kCuda}).ok());
  Status later = take_device_errors();
  EXPECT_EQ(later.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(later.message(), message);
  EXPECT_TRUE(take_device_errors().ok()) << "the record is cleared once reported";
  loss.download();
  EXPECT_FALSE(std::isnan(loss.host()[0]));
  EXPECT_TRUE(std::isnan(loss.host()[1]));

  Launch checked{Backend::kCuda};
  checked.check_device_errors = true;
  Status now = run(checked);
  EXPECT_EQ(now.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(now.message(), message);
  labels.host() = {3, 7};
  labels.upload();
  EXPECT_TRUE(run(checked).ok());
}

}  // namespace
}  // namespace pallas::testing

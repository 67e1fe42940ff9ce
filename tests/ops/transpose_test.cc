// transpose on every backend and dtype, exact, on fresh random data: shapes that are not
// multiples of the tile in either dim (1, tile - 1, tile + 1, primes), row strides TMA can
// copy (multiples of 16 bytes) and strides it cannot, and misaligned data, which must take the
// direct twin of the TMA instance and still be exact. Outputs are poisoned, and the padding of
// strided outputs must stay untouched.

#include "test_support.h"

#include <pallas/detail/kernel_image.h>
#include <pallas/kernels.h>

namespace pallas::testing {
namespace {

struct TransposeShape {
  int64_t rows, cols;
  int64_t in_pad, out_pad;  // elements after each row
};

template <class T>
T random_value(std::mt19937& rng) {
  if constexpr (std::is_same_v<T, int32_t>) {
    return static_cast<int32_t>(rng());
  } else {
    std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
    return from_float<T>(dist(rng));
  }
}

template <class T>
bool same_bits(T a, T b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// Runs one transpose; `offset` elements shift x's data (misaligning it for TMA).
template <class T>
void check_transpose(Backend backend, TransposeShape s, int64_t offset, bool expect_tma,
                     int compute_capability = 90) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(dtype_name<T>()) + " " + std::to_string(s.rows) + "x" +
               std::to_string(s.cols) + " strides " + std::to_string(s.cols + s.in_pad) + "/" +
               std::to_string(s.rows + s.out_pad) + " offset " + std::to_string(offset) + " seed " +
               std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t xs = s.cols + s.in_pad, ys = s.rows + s.out_pad;
  Array<T> x(backend, static_cast<size_t>(offset + s.rows * xs));
  Array<T> y(backend, static_cast<size_t>(s.cols * ys));
  for (T& v : x.host()) v = random_value<T>(rng);
  const T guard = random_value<T>(rng);
  for (T& v : y.host()) v = guard;  // the padding must keep it
  for (int64_t c = 0; c < s.cols; ++c)
    for (int64_t r = 0; r < s.rows; ++r) y.host()[c * ys + r] = random_value<T>(rng);  // poison
  x.upload();
  y.upload();
  const uint64_t before = detail::tma_descriptors_handed_out();
  Status status =
      kernels::transpose(TensorView<const T, 2>(x.data() + offset, {s.rows, s.cols}, {xs, 1}),
                         TensorView<T, 2>(y.data(), {s.cols, s.rows}, {ys, 1}),
                         Launch{backend, nullptr, {.compute_capability = compute_capability}});
  ASSERT_TRUE(status.ok()) << status.message();
  y.download();
  EXPECT_EQ(detail::tma_descriptors_handed_out() - before, expect_tma ? 2u : 0u)
      << (expect_tma ? "the TMA instance did not run" : "the direct twin did not run");
  int misses = 0;
  for (int64_t c = 0; c < s.cols && misses < 5; ++c)
    for (int64_t r = 0; r < ys && misses < 5; ++r) {
      T want = r < s.rows ? x.host()[offset + r * xs + c] : guard;
      if (!same_bits(y.host()[c * ys + r], want)) {
        ADD_FAILURE() << "y[" << c << ", " << r << "] = " << to_float(y.host()[c * ys + r])
                      << ", want " << to_float(want) << (r < s.rows ? "" : " (padding)");
        ++misses;
      }
    }
}

class TransposeTest : public BackendTest {};

template <class T>
void check_all(Backend backend, int compute_capability = 90) {
  const int64_t tile = 128 / static_cast<int64_t>(sizeof(T));
  const int64_t per16 = 16 / static_cast<int64_t>(sizeof(T));  // elements in 16 bytes
  // TMA copies these (strides multiples of 16 bytes; y's rows, x's `rows` elements, a
  // multiple of 16 bytes) where the TMA instance runs: x's odd extents are clipped loads.
  const bool tma = tma_instance_runs(backend);
  for (TransposeShape s : std::vector<TransposeShape>{
           {per16, 1, per16 - 1, 0},  // the stride of an extent-1 dim is never used
           {per16, 1, per16 - 1, 3},  // y [1, per16]: its stride, never used, is not 16 bytes
           {tile, tile, 0, 0},
           {per16, tile + 1, per16 - (tile + 1) % per16, 0},
           {3 * per16, 2 * tile + 3, per16 - (2 * tile + 3) % per16, per16},
           {2 * tile + per16, 97, per16 - 97 % per16, 16 * per16},
       })
    check_transpose<T>(backend, s, 0, tma, compute_capability);
  // Strides TMA cannot copy, misaligned data, and y's rows not a multiple of 16 bytes (a TMA
  // store writes the 16-byte piece that ends a row whole: an H200 overwrote y's padding):
  // the direct twin.
  for (TransposeShape s : std::vector<TransposeShape>{
           {2, 3, 0, 0},
           {tile + 1, tile - 1, 0, 0},
           {37, 131, 1, 2},
           {3, 2 * tile, 0, 0},
           {1, 1, 0, 0},
           {1, per16, 0, per16 - 1},
           {tile - 1, tile + 1, per16 - (tile + 1) % per16, per16 - (tile - 1) % per16},
           {2 * tile + 3, 3 * per16, 0, per16 - (2 * tile + 3) % per16},
           {97, 5 * per16, per16, 16 * per16 - 97 % (16 * per16)}})
    check_transpose<T>(backend, s, 0, false, compute_capability);
  check_transpose<T>(backend, {tile, tile, 0, 0}, 1, false, compute_capability);
}

// The direct twin says why it ran (Launch::record): y's rows of 3 floats end inside a 16-byte
// piece, which a TMA store would write whole (x's TMA loads would be fine).
TEST_P(TransposeTest, RecordSaysYsRowsKeepTmaOff) {
  if (!tma_instance_runs(GetParam())) GTEST_SKIP() << "no TMA instance here";
  Array<float> x(GetParam(), 8 * 4), y(GetParam(), 4 * 4);
  x.upload();
  y.upload();
  LaunchRecord record;
  Launch launch{GetParam(), nullptr};
  launch.record = &record;
  ASSERT_TRUE(kernels::transpose(TensorView<const float, 2>(x.data(), {3, 4}, {4, 1}),
                                 TensorView<float, 2>(y.data(), {4, 3}, {4, 1}), launch)
                  .ok());
  EXPECT_STREQ(record.instance, "transpose_f32_direct");
  ASSERT_NE(record.fallback_operand, nullptr);
  EXPECT_STREQ(record.fallback_operand, "y");
  EXPECT_STREQ(record.fallback,
               "it is written and its rows are not a multiple of 16 bytes (a TMA store writes the "
               "16-byte piece that ends a row whole)");
}

TEST_P(TransposeTest, F32) { check_all<float>(GetParam()); }
TEST_P(TransposeTest, F16) { check_all<half>(GetParam()); }
TEST_P(TransposeTest, BF16) { check_all<bfloat16>(GetParam()); }
TEST_P(TransposeTest, I32) { check_all<int32_t>(GetParam()); }

// The sm_80 form (cp.async into the same swizzled buffer, the output stored from
// registers), run by the emulator standing for an sm_80 device.
TEST_P(TransposeTest, CpAsyncForm) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the sm_80 form is checked on the emulator";
  check_all<float>(Backend::kEmulator, 80);
  check_all<bfloat16>(Backend::kEmulator, 80);
}

INSTANTIATE_TEST_SUITE_P(Backends, TransposeTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

}  // namespace
}  // namespace pallas::testing

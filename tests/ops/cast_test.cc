// cast between f32 and f16/bf16: exact, round to nearest even, compared with
// the runtime's reference conversions (tested exhaustively in tests/runtime).

#include "test_support.h"

#include <pallas/kernels.h>

namespace pallas::testing {
namespace {

constexpr int64_t kSizes[] = {1, 2047, 2048, 2049, 100003};

/// Random values plus the edge cases every cast must get right.
std::vector<float> cast_inputs(std::mt19937& rng, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  std::uniform_real_distribution<float> mantissa(-2, 2);
  std::uniform_int_distribution<int> exponent(-30, 20);
  for (float& x : v) x = std::ldexp(mantissa(rng), exponent(rng));
  const float specials[] = {
      0.0f,    -0.0f,          65504.0f,        65520.0f,
      1e-8f,   -3e-5f,         1.0f + 0x1p-11f, std::numeric_limits<float>::infinity(),
      3.0e38f, 1.17549435e-38f};
  for (size_t i = 0; i < std::size(specials) && i < v.size(); ++i)
    v[i * 7 % v.size()] = specials[i];
  return v;
}

template <class From, class To>
void check_cast(Backend backend) {
  for (int64_t n : kSizes) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string("cast ") + dtype_name<From>() + " -> " + dtype_name<To>() +
                 " n=" + std::to_string(n) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<From> x(backend, n);
    Array<To> out(backend, n);
    std::vector<float> values = cast_inputs(rng, n);
    for (int64_t i = 0; i < n; ++i) x.host()[i] = from_float<From>(values[i]);
    out.poison();
    x.upload();
    out.upload();
    Status s = kernels::cast(TensorView<const From, 1>(x.data(), {n}),
                             TensorView<To, 1>(out.data(), {n}), Launch{backend, nullptr});
    ASSERT_TRUE(s.ok()) << s.message();
    out.download();
    for (int64_t i = 0; i < n; ++i) {
      float want = to_float(from_float<To>(to_float(x.host()[i])));
      float got = to_float(out.host()[i]);
      if (std::memcmp(&want, &got, sizeof(float)) != 0) {
        ADD_FAILURE() << "element " << i << " (" << to_float(x.host()[i]) << "): got " << got
                      << ", want " << want;
        break;
      }
    }
  }
}

class CastTest : public BackendTest {};

TEST_P(CastTest, F32ToF16) { check_cast<float, half>(GetParam()); }
TEST_P(CastTest, F32ToBF16) { check_cast<float, bfloat16>(GetParam()); }
TEST_P(CastTest, F16ToF32) { check_cast<half, float>(GetParam()); }
TEST_P(CastTest, BF16ToF32) { check_cast<bfloat16, float>(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Backends, CastTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

}  // namespace
}  // namespace pallas::testing

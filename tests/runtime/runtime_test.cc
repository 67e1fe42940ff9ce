// Unit tests of the pallas runtime: dtypes, Status, TensorView, operand checks, cubin
// selection and launch_kernel (host backend; CUDA backend without or with a device).
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "pallas/detail/kernel_image.h"
#include "pallas/pallas.h"
#include "pallas/thrust.h"

namespace pallas {
namespace {

// ---------------------------------------------------------------------------------------------
// dtype

static_assert(dtype_of_v<float> == DType::kF32);
static_assert(dtype_of_v<const float> == DType::kF32);
static_assert(dtype_of_v<half> == DType::kF16);
static_assert(dtype_of_v<const half> == DType::kF16);
static_assert(dtype_of_v<bfloat16> == DType::kBF16);
static_assert(dtype_of_v<int32_t> == DType::kI32);
static_assert(dtype_of_v<const volatile int32_t> == DType::kI32);
static_assert(size_of(DType::kF32) == 4 && size_of(DType::kF16) == 2 &&
              size_of(DType::kBF16) == 2 && size_of(DType::kI32) == 4);
// The conversions are usable in constant expressions.
static_assert(half(1.0f).bits == 0x3c00);
static_assert(static_cast<float>(half::from_bits(0x3555)) == 0.333251953125f);
static_assert(bfloat16(1.0f).bits == 0x3f80);
static_assert(static_cast<float>(bfloat16::from_bits(0xc000)) == -2.0f);

float f32(uint32_t bits) { return std::bit_cast<float>(bits); }
uint16_t h16(float f) { return half(f).bits; }
uint16_t b16(float f) { return bfloat16(f).bits; }
bool half_is_nan(uint16_t b) { return (b & 0x7fffu) > 0x7c00u; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7fffu) > 0x7f80u; }

TEST(DType, ToString) {
  EXPECT_STREQ(to_string(DType::kF32), "f32");
  EXPECT_STREQ(to_string(DType::kF16), "f16");
  EXPECT_STREQ(to_string(DType::kBF16), "bf16");
  EXPECT_STREQ(to_string(DType::kI32), "i32");
}

TEST(Half, RoundTripsEveryBitPattern) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = static_cast<float>(half::from_bits(static_cast<uint16_t>(b)));
    const uint16_t back = half(f).bits;
    if (half_is_nan(static_cast<uint16_t>(b))) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(half_is_nan(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000u, b & 0x8000u) << std::hex << b;
    } else {
      ASSERT_EQ(back, b) << std::hex << b;
      ASSERT_EQ(std::bit_cast<uint32_t>(static_cast<float>(half::from_bits(back))),
                std::bit_cast<uint32_t>(f))
          << std::hex << b;
    }
  }
}

TEST(Half, ExactValues) {
  EXPECT_EQ(static_cast<float>(half::from_bits(0x3c00)), 1.0f);
  EXPECT_EQ(static_cast<float>(half::from_bits(0xc000)), -2.0f);
  EXPECT_EQ(static_cast<float>(half::from_bits(0x7bff)), 65504.0f);
  EXPECT_EQ(static_cast<float>(half::from_bits(0x0400)), std::ldexp(1.0f, -14));
  EXPECT_EQ(static_cast<float>(half::from_bits(0x0001)), std::ldexp(1.0f, -24));
  EXPECT_EQ(static_cast<float>(half::from_bits(0x03ff)), std::ldexp(1023.0f, -24));
  EXPECT_EQ(static_cast<float>(half::from_bits(0x7c00)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(std::bit_cast<uint32_t>(static_cast<float>(half::from_bits(0x8000))), 0x80000000u);
}

// Every midpoint between two adjacent finite halves rounds to the even one, and the floats just
// beside the midpoint round to the nearer one.
TEST(Half, RoundsEveryMidpointToEven) {
  for (uint16_t b = 0; b < 0x7bff; ++b) {
    const double lo = static_cast<float>(half::from_bits(b));
    const double hi = static_cast<float>(half::from_bits(static_cast<uint16_t>(b + 1)));
    const float mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (b & 1u) ? static_cast<uint16_t>(b + 1) : b;
    ASSERT_EQ(h16(mid), even) << std::hex << b;
    ASSERT_EQ(h16(-mid), even | 0x8000u) << std::hex << b;
    ASSERT_EQ(h16(std::nextafter(mid, 0.0f)), b) << std::hex << b;
    ASSERT_EQ(h16(std::nextafter(mid, 1e30f)), b + 1) << std::hex << b;
  }
}

TEST(Half, Ties) {
  EXPECT_EQ(h16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // 1 + half ulp -> 1 (even)
  EXPECT_EQ(h16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // 1 + 1.5 ulp -> 1 + 2 ulp
  EXPECT_EQ(h16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  EXPECT_EQ(h16(-(1.0f + std::ldexp(1.0f, -11))), 0xbc00);
  EXPECT_EQ(h16(2049.0f), 0x6800);  // 2048 + 1 -> 2048
  EXPECT_EQ(h16(2051.0f), 0x6802);  // 2048 + 3 -> 2052
}

TEST(Half, InfinityAndOverflow) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(h16(kInf), 0x7c00);
  EXPECT_EQ(h16(-kInf), 0xfc00);
  EXPECT_EQ(h16(65504.0f), 0x7bff);
  EXPECT_EQ(h16(std::nextafter(65520.0f, 0.0f)), 0x7bff);  // below the midpoint
  EXPECT_EQ(h16(65520.0f), 0x7c00);                        // the midpoint ties to infinity
  EXPECT_EQ(h16(-65520.0f), 0xfc00);
  EXPECT_EQ(h16(1e10f), 0x7c00);
  EXPECT_EQ(h16(-1e10f), 0xfc00);
  EXPECT_EQ(h16(std::numeric_limits<float>::max()), 0x7c00);
}

TEST(Half, NaNStaysNaN) {
  EXPECT_TRUE(half_is_nan(h16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(half_is_nan(h16(-std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(h16(-std::numeric_limits<float>::quiet_NaN()) & 0x8000u, 0x8000u);
  EXPECT_TRUE(half_is_nan(h16(f32(0x7f800001u))));  // signalling, payload only in low bits
  EXPECT_TRUE(half_is_nan(h16(f32(0xff800001u))));
  EXPECT_TRUE(half_is_nan(h16(f32(0x7fffffffu))));
  EXPECT_TRUE(std::isnan(static_cast<float>(half::from_bits(0x7c01))));
  EXPECT_TRUE(std::isnan(static_cast<float>(half::from_bits(0xfe00))));
}

TEST(Half, Subnormals) {
  const float tiny = std::ldexp(1.0f, -24);  // the smallest half subnormal
  EXPECT_EQ(h16(tiny), 0x0001);
  EXPECT_EQ(h16(-tiny), 0x8001);
  EXPECT_EQ(h16(tiny / 2), 0x0000);  // a tie with zero -> zero (even)
  EXPECT_EQ(h16(-tiny / 2), 0x8000);
  EXPECT_EQ(h16(std::nextafter(tiny / 2, 1.0f)), 0x0001);
  EXPECT_EQ(h16(std::nextafter(tiny / 2, 0.0f)), 0x0000);
  EXPECT_EQ(h16(3 * tiny / 2), 0x0002);  // 1.5 -> 2
  EXPECT_EQ(h16(5 * tiny / 2), 0x0002);  // 2.5 -> 2
  EXPECT_EQ(h16(1023 * tiny), 0x03ff);
  EXPECT_EQ(h16(1023.5f * tiny), 0x0400);  // rounds up into the smallest normal
  EXPECT_EQ(h16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(h16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(h16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(h16(0.0f), 0x0000);
  EXPECT_EQ(h16(-0.0f), 0x8000);
}

#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__aarch64__))
// Cross-check against the compiler's own binary16 conversion on random floats.
TEST(Half, MatchesCompilerFloat16) {
  std::mt19937 rng(1234);
  for (int i = 0; i < 2'000'000; ++i) {
    // Mostly floats in and around the half range, some anywhere.
    uint32_t bits = rng();
    if (i % 4 != 0) bits = (bits & 0x807fffffu) | ((100u + (bits >> 23) % 45u) << 23);
    const float f = f32(bits);
    const _Float16 ref = static_cast<_Float16>(f);
    const uint16_t want = std::bit_cast<uint16_t>(ref);
    const uint16_t got = h16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(half_is_nan(got)) << std::hex << bits;
    } else {
      ASSERT_EQ(got, want) << std::hex << bits;
    }
  }
}
#endif

TEST(BFloat16, RoundTripsEveryBitPattern) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const float f = static_cast<float>(bfloat16::from_bits(static_cast<uint16_t>(b)));
    ASSERT_EQ(std::bit_cast<uint32_t>(f), b << 16);
    const uint16_t back = bfloat16(f).bits;
    if (bf16_is_nan(static_cast<uint16_t>(b))) {
      ASSERT_TRUE(bf16_is_nan(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000u, b & 0x8000u) << std::hex << b;
    } else {
      ASSERT_EQ(back, b) << std::hex << b;
    }
  }
}

TEST(BFloat16, RoundsEveryMidpointToEven) {
  for (uint16_t b = 0; b < 0x7f7f; ++b) {
    const uint32_t lo = static_cast<uint32_t>(b) << 16;
    const float mid = f32(lo + 0x8000u);  // exactly halfway to the next bfloat16
    const uint16_t even = (b & 1u) ? static_cast<uint16_t>(b + 1) : b;
    ASSERT_EQ(b16(mid), even) << std::hex << b;
    ASSERT_EQ(b16(-mid), even | 0x8000u) << std::hex << b;
    ASSERT_EQ(b16(f32(lo + 0x7fffu)), b) << std::hex << b;
    ASSERT_EQ(b16(f32(lo + 0x8001u)), b + 1) << std::hex << b;
  }
}

TEST(BFloat16, SpecialValues) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(b16(1.0f), 0x3f80);
  EXPECT_EQ(b16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // tie -> even
  EXPECT_EQ(b16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // tie -> even
  EXPECT_EQ(b16(kInf), 0x7f80);
  EXPECT_EQ(b16(-kInf), 0xff80);
  EXPECT_EQ(b16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past the largest
  EXPECT_EQ(b16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(b16(f32(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(b16(f32(0x7f7f8000u)), 0x7f80);  // the midpoint past the largest ties to infinity
  EXPECT_TRUE(bf16_is_nan(b16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(bf16_is_nan(b16(f32(0x7f800001u))));  // payload only in the dropped bits
  EXPECT_TRUE(bf16_is_nan(b16(f32(0xff800001u))));
  EXPECT_TRUE(bf16_is_nan(b16(f32(0x7fffffffu))));  // would carry into the sign if rounded
  EXPECT_EQ(b16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(b16(f32(0x00008000u)), 0x0000);  // a subnormal tie -> even
  EXPECT_EQ(b16(f32(0x00018000u)), 0x0002);
  EXPECT_EQ(b16(-0.0f), 0x8000);
}

// ---------------------------------------------------------------------------------------------
// Status

TEST(Status, DefaultIsOk) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_TRUE(Status::Ok().ok());
  EXPECT_EQ(Status::Ok().message(), "");
}

TEST(Status, Error) {
  Status s = Status::Error(StatusCode::kShapeMismatch, "bad shape");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_EQ(s.message(), "bad shape");
  Status copy = s;
  EXPECT_EQ(copy.message(), "bad shape");
  Status ok = Status::Error(StatusCode::kOk, "ignored");
  EXPECT_TRUE(ok.ok());
  EXPECT_EQ(ok.message(), "");
}

TEST(Status, CodeNames) {
  EXPECT_STREQ(to_string(StatusCode::kOk), "ok");
  EXPECT_STREQ(to_string(StatusCode::kInvalidArgument), "invalid argument");
  EXPECT_STREQ(to_string(StatusCode::kShapeMismatch), "shape mismatch");
  EXPECT_STREQ(to_string(StatusCode::kNullPointer), "null pointer");
  EXPECT_STREQ(to_string(StatusCode::kMisaligned), "misaligned");
  EXPECT_STREQ(to_string(StatusCode::kUnsupportedDtype), "unsupported dtype");
  EXPECT_STREQ(to_string(StatusCode::kNoDevice), "no device");
  EXPECT_STREQ(to_string(StatusCode::kNoBinaryForArch), "no binary for arch");
  EXPECT_STREQ(to_string(StatusCode::kCudaError), "cuda error");
  EXPECT_STREQ(to_string(StatusCode::kUnsupportedBackend), "unsupported backend");
}

// ---------------------------------------------------------------------------------------------
// TensorView

static_assert(std::is_convertible_v<TensorView<float, 2>, TensorView<const float, 2>>);
static_assert(!std::is_constructible_v<TensorView<float, 2>, TensorView<const float, 2>>);
static_assert(!std::is_constructible_v<TensorView<const float, 2>, TensorView<float, 3>>);
static_assert(!std::is_constructible_v<TensorView<const float, 2>, TensorView<int32_t, 2>>);
static_assert(std::is_trivially_copyable_v<TensorView<half, 4>>);
static_assert(TensorView<float, 3>::rank == 3);

TEST(TensorView, RowMajorStrides) {
  float data[24];
  TensorView<float, 3> v(data, {2, 3, 4});
  EXPECT_EQ(v.data(), data);
  EXPECT_EQ(v.shape(), (std::array<int64_t, 3>{2, 3, 4}));
  EXPECT_EQ(v.strides(), (std::array<int64_t, 3>{12, 4, 1}));
  EXPECT_EQ(v.shape(1), 3);
  EXPECT_EQ(v.stride(0), 12);
  EXPECT_EQ(v.numel(), 24);
}

TEST(TensorView, ExplicitStrides) {
  float data[64];
  TensorView<float, 2> v(data, {4, 10}, {16, 1});
  EXPECT_EQ(v.strides(), (std::array<int64_t, 2>{16, 1}));
  EXPECT_EQ(v.numel(), 40);
}

TEST(TensorView, Default) {
  TensorView<float, 2> v;
  EXPECT_EQ(v.data(), nullptr);
  EXPECT_EQ(v.numel(), 0);
  TensorView<const int32_t, 0> scalar;
  EXPECT_EQ(scalar.numel(), 1);
}

TEST(TensorView, ConstConversion) {
  half data[6];
  TensorView<half, 2> v(data, {2, 3}, {3, 1});
  TensorView<const half, 2> c = v;
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.shape(), v.shape());
  EXPECT_EQ(c.strides(), v.strides());
}

constexpr TensorView<const float, 2> kConstexprView(nullptr, {5, 7});
static_assert(kConstexprView.stride(0) == 7 && kConstexprView.numel() == 35);

// ---------------------------------------------------------------------------------------------
// Backend, Launch

TEST(Launch, Defaults) {
  Launch l;
  EXPECT_EQ(l.backend, Backend::kCuda);
  EXPECT_EQ(l.stream, nullptr);
  EXPECT_STREQ(to_string(Backend::kCuda), "cuda");
  EXPECT_STREQ(to_string(Backend::kHost), "host");
}

// ---------------------------------------------------------------------------------------------
// check_operand, check_dim

using detail::check_dim;
using detail::check_operand;

const void* addr(uintptr_t a) { return reinterpret_cast<const void*>(a); }

/// check_operand for an operand the kernel writes (`written`: an output; else an input).
template <size_t R>
Status check(const void* data, size_t element_size, std::array<int64_t, R> shape,
             std::array<int64_t, R> strides, bool written = true) {
  return check_operand("add_f32", "x", data, element_size, static_cast<int>(R), shape.data(),
                       strides.data(), written);
}

// check_no_overlap: `out` (f32 unless said) against `x`.
struct View {
  uintptr_t at;
  std::vector<int64_t> shape, strides;
  size_t element = 4;
};
bool overlaps(const View& out, const View& x) {
  Status s = detail::check_no_overlap(
      "add_f32", "out", addr(out.at), out.element, static_cast<int>(out.shape.size()),
      out.shape.data(), out.strides.data(), "x", addr(x.at), x.element,
      static_cast<int>(x.shape.size()), x.shape.data(), x.strides.data());
  if (!s.ok()) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "add_f32: output 'out' overlaps operand 'x' in memory (only an operand the kernel "
              "declares in-place may share memory with an output)");
  }
  return !s.ok();
}

TEST(CheckStorage, ViewsOfContainersStayInside) {
  const int64_t shape[2] = {3, 3}, rows[2] = {4, 1}, dense[2] = {3, 1};
  // Pointers (-1) and empty views pass.
  EXPECT_TRUE(detail::check_storage("k", "x", 2, shape, rows, -1).ok());
  const int64_t empty[2] = {0, 3};
  EXPECT_TRUE(detail::check_storage("k", "x", 2, empty, rows, 0).ok());
  // The last element is 2 * 4 + 2 = 10.
  EXPECT_TRUE(detail::check_storage("k", "x", 2, shape, rows, 11).ok());
  Status s = detail::check_storage("k", "x", 2, shape, rows, 10);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "k: operand 'x' reaches element 10 of its storage, which holds 10 elements");
  EXPECT_TRUE(detail::check_storage("k", "x", 2, shape, dense, 9).ok());
  EXPECT_FALSE(detail::check_storage("k", "x", 2, shape, dense, 8).ok());
}

TEST(TensorView, FromContainersKeepsTheirSize) {
  std::vector<float> v(12);
  TensorView<float, 2> a(v, {3, 4});
  EXPECT_EQ(a.data(), v.data());
  EXPECT_EQ(a.storage_elements(), 12);
  EXPECT_EQ(a.stride(0), 4);
  const std::vector<float>& cv = v;
  TensorView<const float, 2> b(cv, {2, 2}, {6, 1});
  EXPECT_EQ(b.storage_elements(), 12);
  TensorView<const float, 2> c = a;  // const conversion keeps it
  EXPECT_EQ(c.storage_elements(), 12);
  EXPECT_EQ((TensorView<float, 1>(v.data(), {12}).storage_elements()), -1);  // a pointer
  // A view of mutable elements needs a mutable container; no views of temporaries.
  static_assert(!std::is_constructible_v<TensorView<float, 1>, const std::vector<float>&,
                                         std::array<int64_t, 1>>);
  static_assert(!std::is_constructible_v<TensorView<const float, 1>, std::vector<float>&&,
                                         std::array<int64_t, 1>>);
  // Thrust's host_vector through <pallas/thrust.h>.
  thrust::host_vector<int32_t> h(5);
  TensorView<int32_t, 1> t(h, {5});
  EXPECT_EQ(t.data(), thrust::raw_pointer_cast(h.data()));
  EXPECT_EQ(t.storage_elements(), 5);
}

TEST(CheckNoOverlap, WholeRangesOfContiguousViews) {
  EXPECT_FALSE(overlaps({0x1000, {100}, {1}}, {0x2000, {100}, {1}}));
  EXPECT_FALSE(overlaps({0x1000, {100}, {1}}, {0x1190, {100}, {1}}));  // adjacent: 400 bytes
  EXPECT_TRUE(overlaps({0x1000, {100}, {1}}, {0x1000, {100}, {1}}));   // in place
  EXPECT_TRUE(overlaps({0x1004, {100}, {1}}, {0x1000, {100}, {1}}));   // shifted by one
  EXPECT_TRUE(overlaps({0x1000, {10, 10}, {10, 1}}, {0x1000 + 396, {1}, {1}}));  // last element
  // A loss written over its labels: f32 over i32 of the same bytes.
  EXPECT_TRUE(overlaps({0x1000, {8}, {1}}, {0x1000, {8}, {1}, 4}));
  EXPECT_FALSE(overlaps({0x1000, {0}, {1}}, {0x1000, {8}, {1}}));  // empty: nothing to share
}

TEST(CheckNoOverlap, RowsOfOneMatrixAreComparedRowByRow) {
  // [4, 8] f32 (rows of 32 bytes): columns 0-3 and 4-7 share no byte.
  EXPECT_FALSE(overlaps({0x1000, {4, 4}, {8, 1}}, {0x1010, {4, 4}, {8, 1}}));
  EXPECT_TRUE(overlaps({0x1000, {4, 5}, {8, 1}}, {0x1010, {4, 4}, {8, 1}}));  // column 4 twice
  // Even and odd rows of one matrix.
  EXPECT_FALSE(overlaps({0x1000, {2, 8}, {16, 1}}, {0x1020, {2, 8}, {16, 1}}));
  // One row against the rows of a matrix: inside a gap, or on a row.
  EXPECT_FALSE(overlaps({0x1010, {4}, {1}}, {0x1000, {4, 4}, {8, 1}}));
  EXPECT_TRUE(overlaps({0x1048, {4}, {1}}, {0x1000, {4, 4}, {8, 1}}));
  // Contiguous outer dims merge into rows: [2, 2, 4] with strides {16, 8, 1} is [4, 4] by 8.
  EXPECT_FALSE(overlaps({0x1000, {2, 2, 4}, {16, 8, 1}}, {0x1010, {4, 4}, {8, 1}}));
}

TEST(CheckNoOverlap, OtherStridedViewsOverlapWhenTheirRangesDo) {
  // Different row strides, ranges intersecting: reported although no byte is shared.
  EXPECT_TRUE(overlaps({0x1000, {2, 4}, {16, 1}}, {0x1010, {2, 4}, {32, 1}}));
  // Two independent outer dims (a 3-D view with padding) against a row inside its range.
  EXPECT_TRUE(overlaps({0x1000, {2, 2, 4}, {64, 8, 1}}, {0x1040, {4}, {1}}));
  EXPECT_FALSE(overlaps({0x1000, {2, 2, 4}, {64, 8, 1}}, {0x2000, {4}, {1}}));
}

TEST(CheckOperand, AcceptsGoodViews) {
  EXPECT_TRUE(check<2>(addr(0x1000), 4, {4, 10}, {10, 1}).ok());
  EXPECT_TRUE(check<2>(addr(0x1000), 4, {4, 10}, {16, 1}).ok());  // padded rows
  EXPECT_TRUE(check<3>(addr(0x1000), 2, {2, 3, 4}, {14, 5, 1}).ok());
  EXPECT_TRUE(check<1>(addr(0x1001), 1, {7}, {1}).ok());  // bytes need no alignment
  EXPECT_TRUE(check<0>(addr(0x1000), 4, {}, {}).ok());
}

TEST(CheckOperand, IgnoresStridesOfUnitDims) {
  EXPECT_TRUE(check<2>(addr(0x1000), 4, {1, 10}, {0, 1}).ok());
  EXPECT_TRUE(check<2>(addr(0x1000), 4, {4, 1}, {1, 7}).ok());
  EXPECT_TRUE(check<3>(addr(0x1000), 4, {3, 1, 5}, {5, 99, 1}).ok());
}

TEST(CheckOperand, NullPointer) {
  Status s = check<2>(nullptr, 4, {4, 10}, {10, 1});
  EXPECT_EQ(s.code(), StatusCode::kNullPointer);
  EXPECT_EQ(s.message(), "add_f32: operand 'x' is a null pointer");
  Status scalar = check<0>(nullptr, 4, {}, {});
  EXPECT_EQ(scalar.code(), StatusCode::kNullPointer);
}

TEST(CheckOperand, EmptyViewMayBeNull) {
  EXPECT_TRUE(check<2>(nullptr, 4, {0, 10}, {10, 1}).ok());
  EXPECT_TRUE(check<2>(nullptr, 4, {4, 0}, {0, 1}).ok());
  EXPECT_TRUE(check<2>(addr(0x1003), 4, {4, 0}, {3, 3}).ok());  // nothing is accessed
}

TEST(CheckOperand, Misaligned) {
  Status s = check<2>(addr(0x1001), 2, {4, 10}, {10, 1});
  EXPECT_EQ(s.code(), StatusCode::kMisaligned);
  EXPECT_EQ(s.message(),
            "add_f32: operand 'x' is not aligned to its 2-byte element size (address 0x1001)");
  Status f = check<1>(addr(0x7f0000000a06), 4, {3}, {1});
  EXPECT_EQ(f.code(), StatusCode::kMisaligned);
  EXPECT_EQ(f.message(),
            "add_f32: operand 'x' is not aligned to its 4-byte element size (address "
            "0x7f0000000a06)");
}

TEST(CheckOperand, LastDimStride) {
  Status s = check<2>(addr(0x1000), 4, {4, 10}, {30, 3});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "add_f32: operand 'x' dim 1 has stride 3; the kernel needs unit stride in the last "
            "dim");
  Status neg = check<1>(addr(0x1000), 4, {5}, {-1});
  EXPECT_EQ(neg.message(),
            "add_f32: operand 'x' dim 0 has stride -1; the kernel needs unit stride in the last "
            "dim");
}

TEST(CheckOperand, OverlappingDims) {
  const std::string why = " (an output's elements may not share memory; only inputs broadcast)";
  Status s = check<2>(addr(0x1000), 4, {4, 10}, {5, 1});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "add_f32: operand 'x' dim 0 has stride 5, smaller than the 10 elements of the dims "
            "inside it" +
                why);
  // Dim 0 must step past dims 1 and 2: (3 - 1) * 5 + 4 = 14 elements.
  Status r3 = check<3>(addr(0x1000), 4, {2, 3, 4}, {10, 5, 1});
  EXPECT_EQ(r3.message(),
            "add_f32: operand 'x' dim 0 has stride 10, smaller than the 14 elements of the dims "
            "inside it" +
                why);
  Status broadcast = check<2>(addr(0x1000), 4, {4, 10}, {0, 1});
  EXPECT_EQ(broadcast.message(),
            "add_f32: operand 'x' dim 0 has stride 0, smaller than the 10 elements of the dims "
            "inside it" +
                why);
  Status negative = check<2>(addr(0x1000), 4, {4, 10}, {-10, 1});
  EXPECT_EQ(negative.message(),
            "add_f32: operand 'x' dim 0 has stride -10, smaller than the 10 elements of the "
            "dims inside it" +
                why);
}

// Dims need not nest in declared order, only not overlap: [batch, heads, seq, d] viewing
// [batch, seq, heads, d] memory is an output like any other; two dims of one stride are not.
TEST(CheckOperand, PermutedViewsMayBeWritten) {
  EXPECT_TRUE(check<4>(addr(0x1000), 2, {2, 3, 4, 8}, {96, 8, 24, 1}).ok());
  EXPECT_TRUE(check<2>(addr(0x1000), 4, {10, 4}, {1, 10}, true).code() ==
              StatusCode::kInvalidArgument);  // the last dim still needs unit stride
  EXPECT_TRUE(check<3>(addr(0x1000), 4, {4, 5, 8}, {8, 32, 1}).ok());  // [4, 5, 8] of [5, 4, 8]
  Status same = check<3>(addr(0x1000), 4, {4, 5, 8}, {8, 8, 1});
  EXPECT_EQ(same.message(),
            "add_f32: operand 'x' dim 0 has stride 8, smaller than the 40 elements of the dims "
            "inside it (an output's elements may not share memory; only inputs broadcast)")
      << "dims 0 and 1 reach the same elements";
  EXPECT_FALSE(check<3>(addr(0x1000), 4, {4, 5, 8}, {8, 24, 1}).ok());  // (3, 0) == (0, 1)
  EXPECT_TRUE(detail::dims_disjoint_by_stride(3, std::array<int64_t, 3>{4, 5, 8}.data(),
                                              std::array<int64_t, 3>{8, 32, 1}.data()));
  EXPECT_FALSE(detail::dims_disjoint_by_stride(3, std::array<int64_t, 3>{4, 5, 8}.data(),
                                               std::array<int64_t, 3>{8, 24, 1}.data()));
}

// An input may broadcast (stride 0) or overlap its dims: it is only read. Never backwards.
TEST(CheckOperand, InputsMayBroadcast) {
  EXPECT_TRUE(check<2>(addr(0x1000), 4, {4, 10}, {0, 1}, false).ok());
  EXPECT_TRUE(check<2>(addr(0x1000), 4, {4, 10}, {5, 1}, false).ok());
  EXPECT_TRUE(check<3>(addr(0x1000), 2, {3, 64, 64}, {0, 64, 1}, false).ok());  // one B, 3 uses
  EXPECT_TRUE(check<3>(addr(0x1000), 2, {3, 4, 64}, {64, 0, 1}, false).ok());
  Status negative = check<2>(addr(0x1000), 4, {4, 10}, {-10, 1}, false);
  EXPECT_EQ(negative.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(negative.message(),
            "add_f32: operand 'x' dim 0 has negative stride -10; an input's strides are 0 "
            "(broadcast) or positive");
  // The last dim stays unit-stride (kernels read runs of it), and huge spans still overflow.
  EXPECT_EQ(check<2>(addr(0x1000), 4, {4, 10}, {10, 0}, false).code(),
            StatusCode::kInvalidArgument);
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(check<3>(addr(0x1000), 4, {big, big, 2}, {big, big, 1}, false).code(),
            StatusCode::kInvalidArgument);
}

// TMA's copies need dims that do not overlap: a broadcast input keeps the entry point's
// direct twin (tma_rule_broken names why); a dim of extent 1 may have any stride.
TEST(TmaRuleBroken, BroadcastViewsRunTheDirectTwin) {
  alignas(16) static const char data[16] = {};
  const int64_t shape[] = {3, 64, 64}, one[] = {1, 64, 64}, box[] = {1, 64, 64};
  const int64_t dense[] = {4096, 64, 1}, padded[] = {4104, 64, 1}, broadcast[] = {0, 64, 1},
                overlapping[] = {32, 64, 1};
  detail::TmaOperand op{
      "b", data, 2, 3, shape, dense, box, 128, detail::TmaOperand::Element::kBF16};
  EXPECT_EQ(detail::tma_rule_broken(op), nullptr);
  op.strides = padded;
  EXPECT_EQ(detail::tma_rule_broken(op), nullptr);
  for (const int64_t* strides : {broadcast, overlapping}) {
    op.strides = strides;
    ASSERT_NE(detail::tma_rule_broken(op), nullptr);
    EXPECT_STREQ(detail::tma_rule_broken(op),
                 "a stride overlaps the dims inside it (a broadcast view)");
  }
  op.shape = one;  // never stepped along
  op.strides = broadcast;
  EXPECT_EQ(detail::tma_rule_broken(op), nullptr);
}

// A tensor map's strides need not grow in dim order: [batch, heads, seq, d] over
// [batch, seq, heads, d] memory is copied by TMA (each stride a multiple of 16 bytes).
TEST(TmaRuleBroken, PermutedViewsKeepTma) {
  alignas(16) static const char data[16] = {};
  const int64_t shape[] = {2, 3, 70, 64}, box[] = {1, 1, 64, 64};
  const int64_t permuted[] = {70 * 3 * 64, 64, 3 * 64, 1}, clashing[] = {70 * 3 * 64, 64, 64, 1};
  detail::TmaOperand op{
      "q", data, 2, 4, shape, permuted, box, 128, detail::TmaOperand::Element::kBF16};
  EXPECT_EQ(detail::tma_rule_broken(op), nullptr);
  op.strides = clashing;
  EXPECT_STREQ(detail::tma_rule_broken(op),
               "a stride overlaps the dims inside it (a broadcast view)");
}

// A TMA store writes the 16-byte piece that ends a row whole (an H200 overwrote the padding
// after a [70, 161] f32 output's rows): an operand the kernel writes needs rows of a multiple
// of 16 bytes; one it only reads may end its rows anywhere (loads fill past the end with 0).
TEST(TmaRuleBroken, WrittenRowsAreWhole16BytePieces) {
  alignas(16) static const char data[16] = {};
  const int64_t odd[] = {70, 161}, even[] = {70, 160}, one[] = {1, 1}, strides[] = {164, 1},
                box[] = {32, 32};
  detail::TmaOperand op{"out",
                        data,
                        4,
                        2,
                        odd,
                        strides,
                        box,
                        128,
                        detail::TmaOperand::Element::kF32,
                        /*written=*/false};
  EXPECT_EQ(detail::tma_rule_broken(op), nullptr);
  op.written = true;
  for (const int64_t* shape : {odd, one}) {
    op.shape = shape;
    EXPECT_STREQ(detail::tma_rule_broken(op),
                 "it is written and its rows are not a multiple of 16 bytes (a TMA store writes "
                 "the 16-byte piece that ends a row whole)");
  }
  op.shape = even;
  EXPECT_EQ(detail::tma_rule_broken(op), nullptr);
  const int64_t bf16_strides[] = {168, 1};  // 336 bytes
  op.strides = bf16_strides;
  op.element_bytes = 2;
  op.element = detail::TmaOperand::Element::kBF16;
  EXPECT_EQ(detail::tma_rule_broken(op), nullptr);  // 160 elements: 320 bytes
  op.shape = odd;                                   // 161: 322 bytes
  EXPECT_NE(detail::tma_rule_broken(op), nullptr);
}

TEST(CheckOperand, NegativeExtent) {
  Status s = check<2>(addr(0x1000), 4, {4, -3}, {10, 1});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "add_f32: operand 'x' dim 1 has negative extent -3");
  // A negative extent is an error even when another dim is empty, and even with null data.
  Status empty = check<2>(nullptr, 4, {0, -1}, {1, 1});
  EXPECT_EQ(empty.code(), StatusCode::kInvalidArgument);
}

TEST(CheckOperand, HugeSpan) {
  const int64_t big = int64_t{1} << 40;
  Status s = check<2>(addr(0x1000), 4, {big, big}, {big, 1});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "add_f32: operand 'x' dim 0 with stride 1099511627776 spans more than 2^63 "
            "elements");
}

TEST(CheckDim, Mismatch) {
  EXPECT_TRUE(check_dim("add_f32", "y", 0, 1000, "n", 1000, "x", 0).ok());
  Status s = check_dim("add_f32", "y", 0, 100, "n", 1000, "x", 0);
  EXPECT_EQ(s.code(), StatusCode::kShapeMismatch);
  EXPECT_EQ(s.message(),
            "add_f32: operand 'y' dim 0 is 100, but dim 'n' is 1000 (set by operand 'x' dim 0)");
  Status fixed = check_dim("rms_norm_f16", "w", 0, 7, "cols", 8, nullptr, 0);
  EXPECT_EQ(fixed.message(), "rms_norm_f16: operand 'w' dim 0 is 7, but dim 'cols' is 8");
}

// ---------------------------------------------------------------------------------------------
// Cubin selection

using detail::Cubin;
using detail::select_cubin;

const unsigned char kFakeCubin[] = {0x7f, 'E', 'L', 'F'};

int selected_sm(std::span<const Cubin> cubins, int device_sm, bool* arch_specific = nullptr) {
  const Cubin* c = select_cubin(cubins, device_sm);
  if (c == nullptr) return -1;
  if (arch_specific) *arch_specific = c->arch_specific;
  return c->sm;
}

TEST(SelectCubin, Rules) {
  const Cubin cubins[] = {{80, false, kFakeCubin, 4}, {86, false, kFakeCubin, 4},
                          {90, false, kFakeCubin, 4}, {90, true, kFakeCubin, 4},
                          {100, true, kFakeCubin, 4}, {120, false, kFakeCubin, 4}};
  bool specific = false;
  EXPECT_EQ(selected_sm(cubins, 90, &specific), 90);
  EXPECT_TRUE(specific);  // sm_90a preferred over sm_90, whatever the order
  EXPECT_EQ(selected_sm(cubins, 80), 80);
  EXPECT_EQ(selected_sm(cubins, 86), 86);
  EXPECT_EQ(selected_sm(cubins, 87), 86);  // highest compatible generic
  EXPECT_EQ(selected_sm(cubins, 89), 86);
  EXPECT_EQ(selected_sm(cubins, 100, &specific), 100);
  EXPECT_TRUE(specific);
  EXPECT_EQ(selected_sm(cubins, 103), -1);  // sm_100a runs only on sm_100
  EXPECT_EQ(selected_sm(cubins, 120), 120);
  EXPECT_EQ(selected_sm(cubins, 121), 120);
  EXPECT_EQ(selected_sm(cubins, 75), -1);  // no generic cubin across major versions
  EXPECT_EQ(selected_sm(std::span<const Cubin>(cubins, 3), 90, &specific), 90);
  EXPECT_FALSE(specific);
  const Cubin only_specific[] = {{90, true, kFakeCubin, 4}};
  EXPECT_EQ(selected_sm(only_specific, 90), 90);
  EXPECT_EQ(selected_sm(only_specific, 91), -1);
  EXPECT_EQ(selected_sm({}, 90), -1);
}

// ---------------------------------------------------------------------------------------------
// launch_kernel

using detail::HostEntry;
using detail::KernelImage;
using detail::launch_kernel;

struct HostCall {
  int calls = 0;
  void** args = nullptr;
  std::array<int64_t, 3> grid{};
};
HostCall g_host_call;

void record_host_call(void** args, int64_t g0, int64_t g1, int64_t g2) {
  ++g_host_call.calls;
  g_host_call.args = args;
  g_host_call.grid = {g0, g1, g2};
  // Behave like a kernel: z[i] = x[i] + y[i] over every program.
  const float* x = *static_cast<const float**>(args[0]);
  const float* y = *static_cast<const float**>(args[1]);
  float* z = *static_cast<float**>(args[2]);
  const int64_t n = *static_cast<const int64_t*>(args[3]);
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
}

const KernelMetadata kAddMetadata{"add_f32", "add", "[cdiv(n, 256)]", 256, {}, {}};

KernelImage make_image(HostEntry host = record_host_call, std::span<const Cubin> cubins = {}) {
  return KernelImage{&kAddMetadata, "add_f32_kernel", cubins, host, 256, 0};
}

// Launch memory no allocator can serve is a status, not an exception (std::bad_alloc).
TEST(LaunchResources, AllocationFailureIsOutOfMemory) {
  const KernelImage image = make_image();
  for (Backend backend : {Backend::kHost, Backend::kEmulator}) {
    detail::LaunchResources resources;
    const detail::ResourceRequest requests[] = {
        {uint64_t{1} << 60, detail::ResourceKind::kWorkspace}};
    Status s = detail::acquire_resources(image, Launch{backend}, requests, resources);
    EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
    EXPECT_EQ(s.message(),
              "add_f32: allocating 1152921504606846976 bytes of launch memory "
              "(workspace, semaphores) failed");
  }
  EXPECT_STREQ(to_string(StatusCode::kOutOfMemory), "out of memory");
}

class LaunchKernel : public ::testing::Test {
 protected:
  void SetUp() override { g_host_call = {}; }

  std::vector<float> x_{1, 2, 3}, y_{10, 20, 30}, z_{0, 0, 0};
  const float* xp_ = x_.data();
  const float* yp_ = y_.data();
  float* zp_ = z_.data();
  int64_t n_ = 3;
  void* args_[4] = {&xp_, &yp_, &zp_, &n_};
};

TEST_F(LaunchKernel, HostCallsEntryWithArgsAndGrid) {
  const KernelImage image = make_image();
  Status s = launch_kernel(image, args_, {3, 2, 1}, Launch{Backend::kHost, nullptr});
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(g_host_call.calls, 1);
  EXPECT_EQ(g_host_call.args, args_);
  EXPECT_EQ(g_host_call.grid, (std::array<int64_t, 3>{3, 2, 1}));
  EXPECT_EQ(z_, (std::vector<float>{11, 22, 33}));
}

// A persistent image's grid[0] is its tile count: the host runs one program that walks them
// all (the emulator launches EmulatorOptions::concurrent_programs of them, CUDA SMs x
// occupancy: persistent_wgmma in tests/kernels covers both).
TEST_F(LaunchKernel, HostRunsOnePersistentProgram) {
  KernelImage image = make_image();
  image.persistent = true;
  ASSERT_TRUE(launch_kernel(image, args_, {40, 1, 1}, {Backend::kHost}).ok());
  EXPECT_EQ(g_host_call.grid, (std::array<int64_t, 3>{1, 1, 1}));
  g_host_call = {};
  ASSERT_TRUE(launch_kernel(image, args_, {0, 1, 1}, {Backend::kHost}).ok());
  EXPECT_EQ(g_host_call.calls, 0);  // no tiles: nothing to launch
}

// Clusters (a persistent grid in clusters asks for them): the host runs clusters of one, and a
// cluster size that is not a portable power of two is an error naming it.
TEST_F(LaunchKernel, ClustersOnTheHostAreOfOneAndSizesArePortable) {
  KernelImage image = make_image();
  image.persistent = true;
  ASSERT_TRUE(launch_kernel(image, args_, {40, 1, 1}, {Backend::kHost}, 2).ok());
  EXPECT_EQ(g_host_call.grid, (std::array<int64_t, 3>{1, 1, 1}));
  const std::string sizes =
      " programs; 1 to 8 (CUDA's portable sizes), and for a persistent grid 1, 2, 4 or 8 (sizes "
      "that halve to each other)";
  for (int cluster : {0, 3, 16}) {
    Status s = launch_kernel(image, args_, {40, 1, 1}, {Backend::kHost}, cluster);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "add_f32: clusters of " + std::to_string(cluster) + sizes);
  }
  // A grid clustered along x (KernelSpec::cluster_first_axis) asks for any size up to 8; the
  // host runs clusters of one, and says so.
  image.persistent = false;
  LaunchRecord record;
  Launch recorded{Backend::kHost};
  recorded.record = &record;
  ASSERT_TRUE(launch_kernel(image, args_, {3, 2, 1}, recorded, 3).ok());
  EXPECT_EQ(g_host_call.grid, (std::array<int64_t, 3>{3, 2, 1}));
  EXPECT_EQ(record.cluster, 3);
  EXPECT_EQ(record.launched_cluster, 1);
  for (int cluster : {0, 9}) {
    Status s = launch_kernel(image, args_, {9, 1, 1}, {Backend::kHost}, cluster);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), "add_f32: clusters of " + std::to_string(cluster) + sizes);
  }
  image.persistent = true;
  Launch bounded{Backend::kHost};
  bounded.max_cluster = -1;
  Status s = launch_kernel(image, args_, {40, 1, 1}, bounded, 2);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "add_f32: Launch::max_cluster is -1; 0 (no limit) or a positive bound");
}

// The shared memory a variant chooser sees (DimExpr::device_shared_bytes): the host's is
// unbounded, the emulator's the GPU it stands for unless set, both at most the launch's cap;
// negative sizes are errors naming the field.
TEST_F(LaunchKernel, DeviceSharedBytesForVariantChoosers) {
  EXPECT_EQ(detail::device_shared_bytes({Backend::kHost}), INT64_MAX);
  Launch capped{Backend::kHost};
  capped.max_shared_bytes_per_block = 101376;
  EXPECT_EQ(detail::device_shared_bytes(capped), 101376);
  for (auto [cc, bytes] : {std::pair{90, 232448},
                           {100, 232448},
                           {86, 101376},
                           {89, 101376},
                           {80, 166912},
                           {87, 166912}}) {
    Launch emulated{Backend::kEmulator};
    emulated.emulator.compute_capability = cc;
    EXPECT_EQ(detail::device_shared_bytes(emulated), bytes) << "sm_" << cc;
  }
  Launch sized{Backend::kEmulator};
  sized.emulator.shared_bytes_per_block = 150000;
  EXPECT_EQ(detail::device_shared_bytes(sized), 150000);
  sized.max_shared_bytes_per_block = 120000;
  EXPECT_EQ(detail::device_shared_bytes(sized), 120000);

  const KernelImage image = make_image();
  Launch bad{Backend::kHost};
  bad.max_shared_bytes_per_block = -1;
  Status s = launch_kernel(image, args_, {4, 1, 1}, bad);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "add_f32: Launch::max_shared_bytes_per_block is -1; 0 (the device's) or a positive "
            "bound");
  Launch bad_emulator{Backend::kEmulator};
  bad_emulator.emulator.shared_bytes_per_block = -5;
  s = launch_kernel(image, args_, {4, 1, 1}, bad_emulator);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "add_f32: Launch::emulator.shared_bytes_per_block is -5; 0 (the compute "
            "capability's) or a positive size");
}

TEST_F(LaunchKernel, HostHasNoCudaGridLimits) {
  const KernelImage image = make_image();
  ASSERT_TRUE(launch_kernel(image, args_, {int64_t{1} << 33, 70000, 1}, {Backend::kHost}).ok());
  EXPECT_EQ(g_host_call.grid, (std::array<int64_t, 3>{int64_t{1} << 33, 70000, 1}));
}

TEST_F(LaunchKernel, EmptyGridLaunchesNothing) {
  const KernelImage image = make_image();
  for (const std::array<int64_t, 3>& grid :
       {std::array<int64_t, 3>{0, 1, 1}, std::array<int64_t, 3>{4, 0, 1},
        std::array<int64_t, 3>{4, 1, 0}}) {
    EXPECT_TRUE(launch_kernel(image, args_, grid, {Backend::kHost}).ok());
    // No device, binary or stream is needed either.
    EXPECT_TRUE(launch_kernel(image, args_, grid, {Backend::kCuda}).ok());
  }
  EXPECT_EQ(g_host_call.calls, 0);
  const KernelImage no_host = make_image(nullptr);
  EXPECT_TRUE(launch_kernel(no_host, args_, {0, 1, 1}, {Backend::kHost}).ok());
}

// Launch::record: the instance and the grid asked for, the cluster after max_cluster, an
// empty grid included (nothing runs); a call that fails its checks records nothing.
TEST_F(LaunchKernel, RecordSaysWhatWasLaunched) {
  KernelImage image = make_image();
  LaunchRecord record;
  Launch launch{Backend::kHost};
  launch.record = &record;
  ASSERT_TRUE(launch_kernel(image, args_, {3, 2, 1}, launch).ok());
  ASSERT_NE(record.instance, nullptr);
  EXPECT_STREQ(record.instance, "add_f32");
  EXPECT_EQ(record.grid, (std::array<int64_t, 3>{3, 2, 1}));
  EXPECT_EQ(record.cluster, 1);
  EXPECT_FALSE(record.persistent);
  EXPECT_EQ(record.programs, 0);  // not a persistent grid
  image.persistent = true;
  launch.max_cluster = 2;
  ASSERT_TRUE(launch_kernel(image, args_, {40, 1, 1}, launch, 4).ok());
  EXPECT_EQ(record.grid, (std::array<int64_t, 3>{40, 1, 1}));  // tiles, not the 1 program
  EXPECT_EQ(record.programs, 1);                               // the host walks them in one
  EXPECT_EQ(record.cluster, 2);
  EXPECT_TRUE(record.persistent);
  ASSERT_TRUE(launch_kernel(image, args_, {0, 1, 1}, launch).ok());
  EXPECT_EQ(record.grid, (std::array<int64_t, 3>{0, 1, 1}));
  EXPECT_EQ(record.programs, 0);  // nothing ran
  // A call that fails, refused or on its backend, leaves the record as it was.
  record = {};
  EXPECT_FALSE(launch_kernel(image, args_, {-1, 1, 1}, launch).ok());
  EXPECT_EQ(record.instance, nullptr);
  const KernelImage no_host = make_image(nullptr);
  EXPECT_EQ(launch_kernel(no_host, args_, {3, 1, 1}, launch).code(),
            StatusCode::kUnsupportedBackend);
  EXPECT_EQ(record.instance, nullptr);
}

TEST_F(LaunchKernel, NegativeGrid) {
  const KernelImage image = make_image();
  Status s = launch_kernel(image, args_, {4, -1, 1}, {Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "add_f32: grid axis 1 has negative extent -1");
  EXPECT_EQ(g_host_call.calls, 0);
}

TEST_F(LaunchKernel, NoHostForm) {
  const KernelImage image = make_image(nullptr);
  Status s = launch_kernel(image, args_, {1, 1, 1}, {Backend::kHost});
  EXPECT_EQ(s.code(), StatusCode::kUnsupportedBackend);
  EXPECT_EQ(s.message(), "add_f32: no host form was built for this kernel");
}

TEST_F(LaunchKernel, CudaGridLimits) {
  const KernelImage image = make_image();
  Status x = launch_kernel(image, args_, {int64_t{1} << 31, 1, 1}, {Backend::kCuda});
  EXPECT_EQ(x.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(x.message(),
            "add_f32: grid axis 0 has 2147483648 programs; CUDA allows at most 2147483647 on "
            "axis 0 (x)");
  Status y = launch_kernel(image, args_, {1, 65536, 1}, {Backend::kCuda});
  EXPECT_EQ(y.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(y.message(),
            "add_f32: grid axis 1 has 65536 programs; CUDA allows at most 65535 on axis 1 (y)");
  Status z = launch_kernel(image, args_, {1, 1, 70000}, {Backend::kCuda});
  EXPECT_EQ(z.message(),
            "add_f32: grid axis 2 has 70000 programs; CUDA allows at most 65535 on axis 2 (z)");
}

TEST_F(LaunchKernel, CudaBadBlockSize) {
  KernelImage image = make_image();
  image.threads = 2048;
  Status s = launch_kernel(image, args_, {1, 1, 1}, {Backend::kCuda});
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "add_f32: 2048 threads per program; CUDA allows 1 to 1024");
}

TEST_F(LaunchKernel, CudaWithoutDevice) {
  if (cuda_device_available()) GTEST_SKIP() << "a CUDA device is present";
  const Cubin cubins[] = {{90, true, kFakeCubin, 4}};
  const KernelImage image = make_image(record_host_call, cubins);
  Status s = launch_kernel(image, args_, {1, 1, 1}, {Backend::kCuda});
  EXPECT_EQ(s.code(), StatusCode::kNoDevice);
  EXPECT_EQ(s.message().rfind("add_f32: no usable CUDA device: cuda", 0), 0u) << s.message();
  EXPECT_NE(s.message().find(" failed: cudaError"), std::string::npos) << s.message();
  EXPECT_EQ(g_host_call.calls, 0);  // never falls back silently
}

TEST_F(LaunchKernel, CudaNoBinaryForArch) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const Cubin cubins[] = {{10, false, kFakeCubin, 4}, {11, true, kFakeCubin, 4}};
  const KernelImage image = make_image(record_host_call, cubins);
  Status s = launch_kernel(image, args_, {1, 1, 1}, {Backend::kCuda});
  EXPECT_EQ(s.code(), StatusCode::kNoBinaryForArch);
  EXPECT_EQ(s.message().rfind("add_f32: no binary for ", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("; built targets: sm_10, sm_11a"), std::string::npos) << s.message();

  const KernelImage none = make_image(record_host_call, {});
  Status n = launch_kernel(none, args_, {1, 1, 1}, {Backend::kCuda});
  EXPECT_EQ(n.code(), StatusCode::kNoBinaryForArch);
  EXPECT_NE(n.message().find("; built targets: none"), std::string::npos) << n.message();
}

}  // namespace
}  // namespace pallas

// Element types of kernel operands, and the 16-bit float types used on the host.
//
// pallas::half and pallas::bfloat16 are plain 16-bit storage types with the same layout as
// CUDA's __half and __nv_bfloat16. Conversions from float round to nearest, ties to even;
// NaN stays NaN (made quiet), values beyond the largest finite value become infinity, and
// half subnormals are produced exactly. Conversions to float are exact.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace pallas {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32 };

// "f32", "f16", "bf16", "i32"
const char* to_string(DType dtype);

constexpr size_t size_of(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
  }
  return 0;
}

namespace detail {

constexpr uint16_t float_to_half_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or NaN
    if (abs == 0x7f800000u) return sign | 0x7c00u;
    // NaN: keep the top payload bits, force the quiet bit so the result is a NaN.
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  if (abs >= 0x38800000u) {                       // >= 2^-14: a normal half
    // Rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even;
    // a carry out of the mantissa correctly increments the exponent.
    const uint32_t rebased = abs - (112u << 23);
    const uint32_t lsb = (rebased >> 13) & 1u;
    return static_cast<uint16_t>(sign | ((rebased + 0xfffu + lsb) >> 13));
  }
  if (abs <= 0x33000000u) return sign;  // <= 2^-25 (a tie with zero rounds to even zero)
  // A half subnormal: the value in units of 2^-24 is mant * 2^(e - 126), e <= 112.
  const uint32_t e = abs >> 23;
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126u - e;  // 14..24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | q);
}

constexpr float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);
  // Subnormal: normalise into a float (always normal in float).
  uint32_t e = 113;  // exponent field of 2^-14
  while ((mant & 0x400u) == 0) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

constexpr uint16_t float_to_bfloat16_bits(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) {  // NaN: truncate, force the quiet bit
    return static_cast<uint16_t>((x >> 16) | 0x0040u);
  }
  // Round to nearest even on the 16 dropped bits; overflow carries into infinity.
  const uint32_t lsb = (x >> 16) & 1u;
  return static_cast<uint16_t>((x + 0x7fffu + lsb) >> 16);
}

constexpr float bfloat16_bits_to_float(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

}  // namespace detail

// IEEE 754 binary16.
struct half {
  uint16_t bits = 0;

  half() = default;
  constexpr explicit half(float f) : bits(detail::float_to_half_bits(f)) {}
  constexpr explicit operator float() const { return detail::half_bits_to_float(bits); }
  static constexpr half from_bits(uint16_t b) {
    half h;
    h.bits = b;
    return h;
  }
};

// bfloat16: the top 16 bits of an IEEE 754 binary32.
struct bfloat16 {
  uint16_t bits = 0;

  bfloat16() = default;
  constexpr explicit bfloat16(float f) : bits(detail::float_to_bfloat16_bits(f)) {}
  constexpr explicit operator float() const { return detail::bfloat16_bits_to_float(bits); }
  static constexpr bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

static_assert(sizeof(half) == 2 && alignof(half) == 2 && std::is_trivially_copyable_v<half>);
static_assert(sizeof(bfloat16) == 2 && alignof(bfloat16) == 2 &&
              std::is_trivially_copyable_v<bfloat16>);

namespace detail {
template <class T>
inline constexpr bool kAlwaysFalse = false;

template <class T>
struct DTypeOf {
  static_assert(kAlwaysFalse<T>,
                "pallas::dtype_of_v: no DType for this element type; kernels take float, "
                "pallas::half, pallas::bfloat16 or int32_t");
};
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<half> {
  static constexpr DType value = DType::kF16;
};
template <>
struct DTypeOf<bfloat16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
}  // namespace detail

// float -> kF32, half -> kF16, bfloat16 -> kBF16, int32_t -> kI32 (cv-qualifiers ignored).
template <class T>
inline constexpr DType dtype_of_v = detail::DTypeOf<std::remove_cv_t<T>>::value;

}  // namespace pallas

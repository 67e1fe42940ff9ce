// The libdevice functions the NVVM lowering calls (__nv_*), on the host with
// the C library's implementations.

#include <cmath>

extern "C" {
float __nv_expf(float x) { return std::exp(x); }
float __nv_exp2f(float x) { return std::exp2(x); }
// ex2.approx.ftz.f32 (the approximate exp of half-precision kernels,
// ElementwiseRules.cpp: lowerApproxExp): 2^x with subnormal results flushed.
float pallas_emu_ex2_approx_ftz(float x) {
  float r = std::exp2(x);
  return std::fpclassify(r) == FP_SUBNORMAL ? 0.0f : r;
}
// lg2.approx.ftz.f32 (the approximate log of half-precision kernels,
// ElementwiseRules.cpp: lowerApproxLog): a subnormal input reads as 0.
float pallas_emu_lg2_approx_ftz(float x) {
  return std::log2(std::fpclassify(x) == FP_SUBNORMAL ? 0.0f : x);
}
// rcp.approx.ftz.f32 (the approximate division of half-precision kernels,
// ElementwiseRules.cpp: lowerApproxDiv): subnormal inputs and results flush
// to zero (the hardware's 1 ulp error is below what these kernels resolve).
float pallas_emu_rcp_approx_ftz(float x) {
  float r = 1.0f / (std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x);
  return std::fpclassify(r) == FP_SUBNORMAL ? std::copysign(0.0f, r) : r;
}
float __nv_expm1f(float x) { return std::expm1(x); }
float __nv_logf(float x) { return std::log(x); }
float __nv_log2f(float x) { return std::log2(x); }
float __nv_log10f(float x) { return std::log10(x); }
float __nv_log1pf(float x) { return std::log1p(x); }
float __nv_tanhf(float x) { return std::tanh(x); }
float __nv_erff(float x) { return std::erf(x); }
float __nv_sqrtf(float x) { return std::sqrt(x); }
float __nv_rsqrtf(float x) { return 1.0f / std::sqrt(x); }
float __nv_fabsf(float x) { return std::fabs(x); }
float __nv_powf(float x, float y) { return std::pow(x, y); }
float __nv_sinf(float x) { return std::sin(x); }
float __nv_cosf(float x) { return std::cos(x); }
float __nv_tanf(float x) { return std::tan(x); }
float __nv_floorf(float x) { return std::floor(x); }
float __nv_ceilf(float x) { return std::ceil(x); }
float __nv_fmaxf(float x, float y) { return std::fmax(x, y); }
float __nv_fminf(float x, float y) { return std::fmin(x, y); }
float __nv_exp10f(float x) { return std::pow(10.0f, x); }
float __nv_sinhf(float x) { return std::sinh(x); }
float __nv_coshf(float x) { return std::cosh(x); }
float __nv_asinf(float x) { return std::asin(x); }
float __nv_acosf(float x) { return std::acos(x); }
float __nv_atanf(float x) { return std::atan(x); }
float __nv_atan2f(float y, float x) { return std::atan2(y, x); }
float __nv_cbrtf(float x) { return std::cbrt(x); }
float __nv_erfcf(float x) { return std::erfc(x); }
float __nv_roundf(float x) { return std::round(x); }
float __nv_truncf(float x) { return std::trunc(x); }
float __nv_fmodf(float x, float y) { return std::fmod(x, y); }
float __nv_fmaf(float x, float y, float z) { return std::fma(x, y, z); }
int __nv_abs(int x) { return x < 0 ? -x : x; }
long long __nv_llabs(long long x) { return x < 0 ? -x : x; }
int __nv_min(int x, int y) { return x < y ? x : y; }
int __nv_max(int x, int y) { return x > y ? x : y; }
unsigned __nv_umin(unsigned x, unsigned y) { return x < y ? x : y; }
unsigned __nv_umax(unsigned x, unsigned y) { return x > y ? x : y; }
double __nv_exp(double x) { return std::exp(x); }
double __nv_log(double x) { return std::log(x); }
double __nv_tanh(double x) { return std::tanh(x); }
double __nv_erf(double x) { return std::erf(x); }
double __nv_sqrt(double x) { return std::sqrt(x); }
double __nv_rsqrt(double x) { return 1.0 / std::sqrt(x); }
}

// Activation functions shared by the elementwise ops and the matmul epilogues,
// so `gelu` and `linear_bias_gelu` compute the same function. Both take and
// return f32 values (blocks or scalars).
#pragma once

#include <pallas/EDSL/Spec.h>

namespace pallas::edsl::activations {

/// gelu, tanh form: 0.5 x (1 + tanh(z)), z = sqrt(2/pi) (x + 0.044715 x^3),
/// computed as x * logistic(2 z), the same function (0.5 (1 + tanh(z)) =
/// 1 / (1 + exp(-2 z))): one exp and one division, and no cancellation in
/// 1 + tanh(z) for negative x (gelu(-4) = -1.3e-4 keeps its digits).
inline Value gelu_tanh(const Value& x) {
  constexpr double kTwoSqrt2OverPi = 2 * 0.7978845608028654;
  return x * logistic(kTwoSqrt2OverPi * (x + 0.044715 * x * x * x));
}

/// silu (swish): x * sigmoid(x).
inline Value silu(const Value& x) { return x * logistic(x); }

}  // namespace pallas::edsl::activations

// Activation functions shared by the elementwise ops and the matmul epilogues,
// so `gelu` and `linear_bias_gelu` compute the same function. Both take and
// return f32 values (blocks or scalars).
#pragma once

#include <pallas/EDSL/Spec.h>

namespace pallas::edsl::activations {

/// gelu, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline Value gelu_tanh(const Value& x) {
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  Value inner = kSqrt2OverPi * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + tanh(inner));
}

/// silu (swish): x * sigmoid(x).
inline Value silu(const Value& x) { return x * logistic(x); }

}  // namespace pallas::edsl::activations

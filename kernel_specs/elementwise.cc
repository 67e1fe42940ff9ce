// Elementwise ops: add, mul, axpy (in place), gelu, silu, and bias_gelu on a
// 2-D array. Each op has an f32, f16 and bf16 kernel; half-precision inputs
// are computed in f32 and rounded once when stored.

#include <pallas/EDSL/Spec.h>

#include "activations.h"

using namespace pallas::edsl;
using pallas::edsl::activations::gelu_tanh;

namespace {

// Elements per program of the 1-D ops: 16 per thread of a 128-thread program,
// i.e. four 16-byte accesses per f32 operand, enough bytes in flight per
// thread to saturate HBM.
constexpr int64_t kBlock = 2048;

// Program i sees elements [i * kBlock, (i + 1) * kBlock); the last block is
// masked at the array edge.
Indices block_i(const ProgramIds& p) { return at(p[0]); }

using UnaryFn = Value (*)(const Value&);
using BinaryFn = Value (*)(const Value&, const Value&);

// out = fn(x, y) over same-shape 1-D arrays.
void binary_elementwise(KernelSpec& spec, BinaryFn fn) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", T, {n});
  Operand y = spec.input("y", T, {n});
  Operand out = spec.output("out", T, {n});
  spec.grid({cdiv(n, kBlock)});
  for (Operand op : {x, y, out}) spec.block(op, {Blocked{kBlock}}, block_i);
  spec.body([fn, T](Ref x, Ref y, Ref out) {
    out.store(fn(x.load().cast(f32), y.load().cast(f32)).cast(T));
  });
}

// out = fn(x) over a 1-D array.
void unary_elementwise(KernelSpec& spec, UnaryFn fn) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  DimExpr n = spec.dim("n");
  Operand x = spec.input("x", T, {n});
  Operand out = spec.output("out", T, {n});
  spec.grid({cdiv(n, kBlock)});
  for (Operand op : {x, out}) spec.block(op, {Blocked{kBlock}}, block_i);
  spec.body([fn, T](Ref x, Ref out) { out.store(fn(x.load().cast(f32)).cast(T)); });
}

}  // namespace

PALLAS_KERNEL(add) {
  binary_elementwise(spec, [](const Value& a, const Value& b) { return a + b; });
}

PALLAS_KERNEL(mul) {
  binary_elementwise(spec, [](const Value& a, const Value& b) { return a * b; });
}

// y = a * x + y, written in place over y.
PALLAS_KERNEL(axpy) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  DimExpr n = spec.dim("n");
  Scalar a = spec.scalar("a", f32);
  Operand x = spec.input("x", T, {n});
  Operand y = spec.input("y", T, {n});
  Operand y_out = spec.output("y_out", T, {n});
  spec.alias(y, y_out);
  spec.grid({cdiv(n, kBlock)});
  for (Operand op : {x, y, y_out}) spec.block(op, {Blocked{kBlock}}, block_i);
  spec.body([a, T](Ref x, Ref y, Ref y_out) {
    y_out.store((a * x.load().cast(f32) + y.load().cast(f32)).cast(T));
  });
}

PALLAS_KERNEL(gelu) { unary_elementwise(spec, gelu_tanh); }

PALLAS_KERNEL(silu) { unary_elementwise(spec, activations::silu); }

// out[r, c] = gelu(x[r, c] + bias[c]): a [rows, cols] array in 8 x 256 tiles,
// the bias row loaded once per tile and broadcast along its rows.
PALLAS_KERNEL(bias_gelu) {
  constexpr int64_t kRows = 8, kCols = 256;
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", T, {rows, cols});
  Operand bias = spec.input("bias", T, {cols});
  Operand out = spec.output("out", T, {rows, cols});
  spec.grid({cdiv(rows, kRows), cdiv(cols, kCols)});
  auto tile = [](const ProgramIds& p) { return at(p[0], p[1]); };
  spec.block(x, {Blocked{kRows}, Blocked{kCols}}, tile);
  spec.block(bias, {Blocked{kCols}}, [](const ProgramIds& p) { return at(p[1]); });
  spec.block(out, {Blocked{kRows}, Blocked{kCols}}, tile);
  spec.body([T](Ref x, Ref bias, Ref out) {
    out.store(gelu_tanh(x.load().cast(f32) + bias.load().cast(f32)).cast(T));
  });
}

// rms_norm and layer_norm over the last axis of a [rows, cols] array, each
// optionally fused with a residual add: y = norm(x + r), also writing h = x + r.
// Statistics accumulate in f32; half-precision inputs are read as f32.

#include "rows.h"

using namespace pallas::edsl;
using namespace pallas::edsl::rows;

namespace {

/// Declares the operands shared by the four norm kernels and returns them:
/// x (and r), the weight (and bias), eps, y (and h).
struct NormOperands {
  Operand x, r, w, b, y, h;
  Scalar eps;
};

NormOperands declare(KernelSpec& spec, DType T, bool residual, bool bias) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  NormOperands o;
  o.x = spec.input("x", T, {rows, cols});
  if (residual) o.r = spec.input("r", T, {rows, cols});
  o.w = spec.input("w", T, {cols});
  if (bias) o.b = spec.input("b", T, {cols});
  o.eps = spec.scalar("eps", f32, /*min=*/0.0);
  o.y = spec.output("y", T, {rows, cols});
  if (residual) o.h = spec.output("h", T, {rows, cols});
  spec.grid({rows});
  for (Operand op : {o.x, o.r, o.y, o.h})
    if (op.index >= 0) spec.block(op, {squeezed, full}, row_i);
  for (Operand op : {o.w, o.b})
    if (op.index >= 0) spec.block(op, {full}, whole);
  return o;
}

/// Chunk c of the normalized input: x, or h = x + r rounded to T and stored
/// (the first pass stores h; later passes read it back).
Value input_chunk(const Ref& x, const Ref* r, const Ref* h, const Value& c, DType T, bool first) {
  if (!r) return chunk_f32(x, c);
  if (!first) return chunk_f32(*h, c);
  Value sum = (x.load_at({c * kChunk}, {kChunk}).cast(f32) + chunk_f32(*r, c)).cast(T);
  h->store_at(sum, {c * kChunk});
  return sum.cast(f32);
}

/// y = x * rsqrt(mean(x^2) + eps) * w
void rms_body(Ref x, const Ref* r, Ref w, Ref y, const Ref* h, Scalar eps, DType T) {
  Value cols = x.extent(0);
  auto scale_of = [&](const Value& squares) {
    return rsqrt(squares / cols.cast(f32) + Value(eps));
  };
  by_row_length(
      cols,
      [&] {
        Value v = input_chunk(x, r, h, index(0), T, /*first=*/true);
        y.store_at((v * scale_of(sum(v * v)) * chunk_f32(w, index(0))).cast(T), {0});
      },
      [&] {
        Value squares = fold_chunks(cols, 0.0, [&](Value c, Value acc) {
          Value v = input_chunk(x, r, h, c, T, /*first=*/true);
          return acc + sum(v * v);
        });
        Value scale = scale_of(squares);
        for_chunks(cols, [&](Value c) {
          Value v = input_chunk(x, r, h, c, T, /*first=*/false);
          y.store_at((v * scale * chunk_f32(w, c)).cast(T), {c * kChunk});
        });
      });
}

/// y = (x - mean) * rsqrt(var + eps) * w + b, with the variance computed
/// around the mean (a second pass) for accuracy.
void layer_body_chunks(Ref x, const Ref* r, Ref w, Ref b, Ref y, const Ref* h, Scalar eps, DType T,
                       const Value& cols, const Value& n);

void layer_body(Ref x, const Ref* r, Ref w, Ref b, Ref y, const Ref* h, Scalar eps, DType T) {
  Value cols = x.extent(0);
  Value n = cols.cast(f32);
  when(cols <= index(kChunk), [&] {  // one read, kept in registers
    Value v = input_chunk(x, r, h, index(0), T, /*first=*/true);
    Value mean = sum(v) / n;
    Value d = select(in_row(index(0), cols), v - mean, 0.0);
    Value scale = rsqrt(sum(d * d) / n + Value(eps));
    y.store_at((d * scale * chunk_f32(w, index(0)) + chunk_f32(b, index(0))).cast(T), {0});
  });
  when(cols > index(kChunk), [&] { layer_body_chunks(x, r, w, b, y, h, eps, T, cols, n); });
}

void layer_body_chunks(Ref x, const Ref* r, Ref w, Ref b, Ref y, const Ref* h, Scalar eps, DType T,
                       const Value& cols, const Value& n) {
  Value mean = fold_chunks(cols, 0.0,
                           [&](Value c, Value acc) {
                             return acc + sum(input_chunk(x, r, h, c, T, /*first=*/true));
                           }) /
               n;
  Value var = fold_chunks(cols, 0.0,
                          [&](Value c, Value acc) {
                            Value d = select(in_row(c, cols),
                                             input_chunk(x, r, h, c, T, false) - mean, 0.0);
                            return acc + sum(d * d);
                          }) /
              n;
  Value scale = rsqrt(var + Value(eps));
  for_chunks(cols, [&](Value c) {
    Value v = input_chunk(x, r, h, c, T, /*first=*/false);
    y.store_at(((v - mean) * scale * chunk_f32(w, c) + chunk_f32(b, c)).cast(T), {c * kChunk});
  });
}

}  // namespace

PALLAS_KERNEL(rms_norm) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  NormOperands o = declare(spec, T, /*residual=*/false, /*bias=*/false);
  spec.body([o, T](Ref x, Ref w, Ref y) { rms_body(x, nullptr, w, y, nullptr, o.eps, T); });
}

PALLAS_KERNEL(rms_norm_residual) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  NormOperands o = declare(spec, T, /*residual=*/true, /*bias=*/false);
  spec.body([o, T](Ref x, Ref r, Ref w, Ref y, Ref h) { rms_body(x, &r, w, y, &h, o.eps, T); });
}

PALLAS_KERNEL(layer_norm) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  NormOperands o = declare(spec, T, /*residual=*/false, /*bias=*/true);
  spec.body(
      [o, T](Ref x, Ref w, Ref b, Ref y) { layer_body(x, nullptr, w, b, y, nullptr, o.eps, T); });
}

PALLAS_KERNEL(layer_norm_residual) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  NormOperands o = declare(spec, T, /*residual=*/true, /*bias=*/true);
  spec.body([o, T](Ref x, Ref r, Ref w, Ref b, Ref y, Ref h) {
    layer_body(x, &r, w, b, y, &h, o.eps, T);
  });
}

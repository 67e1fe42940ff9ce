// softmax and log_softmax over the last axis of a [rows, cols] array, and the
// row reductions row_sum and row_max ([rows, cols] -> [rows]). f32 arithmetic;
// half-precision inputs are read as f32 and outputs rounded once.

#include "rows.h"

using namespace pallas::edsl;
using namespace pallas::edsl::rows;

namespace {

void declare_rows(KernelSpec& spec, DType T) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", T, {rows, cols});
  Operand y = spec.output("y", T, {rows, cols});
  spec.grid({rows});
  spec.block(x, {squeezed, full}, row_i);
  spec.block(y, {squeezed, full}, row_i);
}

}  // namespace

// y = exp(x - max) / sum(exp(x - max))
PALLAS_KERNEL(softmax) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  declare_rows(spec, T);
  spec.body([T](Ref x, Ref y) {
    Value cols = x.extent(0);
    Value m = row_maximum(x, cols);
    Value inv = 1.0 / row_exp_sum(x, cols, m);
    for_chunks(
        cols, [&](Value c) { y.store_at((exp(chunk_f32(x, c) - m) * inv).cast(T), {c * kChunk}); });
  });
}

// y = x - max - log(sum(exp(x - max)))
PALLAS_KERNEL(log_softmax) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  declare_rows(spec, T);
  spec.body([T](Ref x, Ref y) {
    Value cols = x.extent(0);
    Value m = row_maximum(x, cols);
    Value shift = m + log(row_exp_sum(x, cols, m));
    for_chunks(cols, [&](Value c) { y.store_at((chunk_f32(x, c) - shift).cast(T), {c * kChunk}); });
  });
}

namespace {
void declare_row_reduction(KernelSpec& spec, DType T) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", T, {rows, cols});
  Operand out = spec.output("out", T, {rows});
  spec.grid({rows});
  spec.block(x, {squeezed, full}, row_i);
  spec.block(out, {full}, whole);
}
}  // namespace

// out[r] = sum(x[r, :]), accumulated in f32.
PALLAS_KERNEL(row_sum) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  declare_row_reduction(spec, T);
  spec.body([T](Ref x, Ref out) {
    Value cols = x.extent(0);
    Value s =
        fold_chunks(cols, 0.0, [&](Value c, Value acc) { return acc + sum(chunk_f32(x, c)); });
    out.store_at(s.cast(T), {program_id(0)});
  });
}

// out[r] = max(x[r, :]); NaN propagates; an empty row gives -inf.
PALLAS_KERNEL(row_max) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  declare_row_reduction(spec, T);
  spec.body(
      [T](Ref x, Ref out) { out.store_at(row_maximum(x, x.extent(0)).cast(T), {program_id(0)}); });
}

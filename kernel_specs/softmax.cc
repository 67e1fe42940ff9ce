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

/// The statistics m = max(row), l = sum(exp(row - m)) and then every chunk of
/// y = out(x chunk, m, l): from one read of a row that fits in one chunk,
/// else an online pass over the row (rows.h) and a second pass for y.
template <class Out>
void row_softmax(const Ref& x, const Ref& y, DType T, Out out) {
  Value cols = x.extent(0);
  by_row_length(
      cols,
      [&] {
        Value v = select(in_row(index(0), cols), chunk_f32(x, index(0)), kNegInf);
        Value m = max(v);
        y.store_at(out(v, m, sum(exp_minus(v, m))).cast(T), {0});
      },
      [&] {
        std::vector<Value> ml = segment_logsumexp(x, cols, Segment{index(0), num_chunks(cols)});
        for_chunks(cols, [&](Value c) {
          y.store_at(out(chunk_f32(x, c), ml[0], ml[1]).cast(T), {c * kChunk});
        });
      });
}

// y = exp(x - max) / sum(exp(x - max))
PALLAS_KERNEL(softmax) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  declare_rows(spec, T);
  spec.body([T](Ref x, Ref y) {
    row_softmax(x, y, T, [](Value v, Value m, Value l) { return exp_minus(v, m) * (1.0 / l); });
  });
}

// y = x - max - log(sum(exp(x - max)))
PALLAS_KERNEL(log_softmax) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  declare_rows(spec, T);
  spec.body([T](Ref x, Ref y) {
    row_softmax(x, y, T, [](Value v, Value m, Value l) { return v - (m + log(l)); });
  });
}

namespace {
/// [rows, cols] x -> [rows] out on a (rows, P) grid (see rows.h), with one f32
/// partial per program; returns the semaphores the body arrives at.
Semaphores declare_row_reduction(KernelSpec& spec, DType T) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", T, {rows, cols});
  Operand out = spec.output("out", T, {rows});
  DimExpr split = programs_per_row(rows, cols);
  spec.workspace("partials", f32, rows * split);
  Semaphores arrived = spec.semaphores("arrived", rows);
  spec.grid({rows, split});
  spec.block(x, {squeezed, full}, row_i);
  spec.block(out, {full}, whole);
  return arrived;
}
}  // namespace

// out[r] = sum(x[r, :]), accumulated in f32 (segments in order, then their sums in order).
PALLAS_KERNEL(row_sum) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  Semaphores arrived = declare_row_reduction(spec, T);
  spec.body([=](Ref x, Ref out, Ref partials) {
    Value part =
        fold_segment(segment_of_row(x.extent(0)), {0.0}, [&](Value c, std::vector<Value> acc) {
          return std::vector<Value>{acc[0] + sum(chunk_f32(x, c))};
        })[0];
    when(publish_partials(arrived, {{partials, part}}), [&] {
      Value total = fold_partials({0.0}, [&](Value s, std::vector<Value> acc) {
        return std::vector<Value>{acc[0] + partial_of_row(partials, s)};
      })[0];
      out.store_at(total.cast(T), {program_id(0)});
      finish_row(arrived);
    });
  });
}

// out[r] = max(x[r, :]); NaN propagates; an empty row gives -inf.
PALLAS_KERNEL(row_max) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  Semaphores arrived = declare_row_reduction(spec, T);
  spec.body([=](Ref x, Ref out, Ref partials) {
    Value cols = x.extent(0);
    Value part =
        fold_segment(segment_of_row(cols), {kNegInf}, [&](Value c, std::vector<Value> acc) {
          return std::vector<Value>{
              maximum(acc[0], max(select(in_row(c, cols), chunk_f32(x, c), kNegInf)))};
        })[0];
    when(publish_partials(arrived, {{partials, part}}), [&] {
      Value m = fold_partials({kNegInf}, [&](Value s, std::vector<Value> acc) {
        return std::vector<Value>{maximum(acc[0], partial_of_row(partials, s))};
      })[0];
      out.store_at(m.cast(T), {program_id(0)});
      finish_row(arrived);
    });
  });
}

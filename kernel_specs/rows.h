// Shared by the row-wise ops (norms, softmax, row reductions): one program per
// row of a [rows, cols] array, which loops over its row in chunks of kChunk
// elements at run-time offsets, so one kernel serves every row length.
// Elements of the last chunk past the row end load as 0; the ops mask them out
// of every reduction where 0 would change the result (max, variance).
#pragma once

#include <pallas/EDSL/Spec.h>

#include <limits>

namespace pallas::edsl::rows {

/// 16 elements per thread of a 128-thread program: four 16-byte accesses per
/// f32 chunk, two per half-precision chunk.
inline constexpr int64_t kChunk = 2048;

/// Program i sees row i, whole.
inline Indices row_i(const ProgramIds& p) { return at(p[0], 0); }
/// Every program sees the whole [cols] vector (weights, biases).
inline Indices whole(const ProgramIds&) { return at(0); }

/// Number of chunks covering a row of `cols` elements.
inline Value num_chunks(const Value& cols) { return (cols + (kChunk - 1)) / kChunk; }

/// Chunk `c` of a row ref, as f32.
inline Value chunk_f32(const Ref& row, const Value& c) {
  return row.load_at({c * kChunk}, {kChunk}).cast(f32);
}

/// i1 block: which elements of chunk `c` lie inside the row.
inline Value in_row(const Value& c, const Value& cols) {
  return iota({kChunk}, 0) + (c * kChunk).cast(i32) < cols.cast(i32);
}

/// `for c in chunks: acc = f(c, acc)` over one f32 accumulator, from `init`.
template <class F>
Value fold_chunks(const Value& cols, double init, F f) {
  return fori(index(0), num_chunks(cols), {constant(init, f32)},
              [&](Value c, std::vector<Value> acc) { return std::vector<Value>{f(c, acc[0])}; })[0];
}

/// `for c in chunks: f(c)`.
template <class F>
void for_chunks(const Value& cols, F f) {
  fori(index(0), num_chunks(cols), {}, [&](Value c, std::vector<Value>) {
    f(c);
    return std::vector<Value>{};
  });
}

inline constexpr double kNegInf = -std::numeric_limits<double>::infinity();

/// The row's maximum, with the elements past its end left out.
inline Value row_maximum(const Ref& x, const Value& cols) {
  return fold_chunks(cols, kNegInf, [&](Value c, Value acc) {
    return maximum(acc, max(select(in_row(c, cols), chunk_f32(x, c), kNegInf)));
  });
}

/// sum(exp(x - m)) over the row.
inline Value row_exp_sum(const Ref& x, const Value& cols, const Value& m) {
  return fold_chunks(cols, 0.0, [&](Value c, Value acc) {
    return acc + sum(select(in_row(c, cols), exp(chunk_f32(x, c) - m), 0.0));
  });
}

}  // namespace pallas::edsl::rows

// Shared by the row-wise ops (norms, softmax, row reductions): one program per
// row of a [rows, cols] array, which loops over its row in chunks of kChunk
// elements at run-time offsets, so one kernel serves every row length.
// Elements of the last chunk past the row end load as 0; the ops mask them out
// of every reduction where 0 would change the result (max, variance).
#pragma once

#include <pallas/EDSL/Spec.h>

#include <limits>
#include <utility>
#include <vector>

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

/// `one()` when the row fits in one chunk, else `many()`. A one-chunk row is
/// read once and kept in registers between its statistics and its output; a
/// longer row is read again for the output.
template <class One, class Many>
void by_row_length(const Value& cols, One one, Many many) {
  when(cols <= index(kChunk), [&] { one(); });
  when(cols > index(kChunk), [&] { many(); });
}

//===----------------------------------------------------------------------===//
// Row reductions split across programs
//
// A row reduction (row_sum, row_max, cross_entropy) runs on a grid of
// (rows, P) programs: program (r, s) reduces segment s of row r (a contiguous
// run of its chunks) to partials in a workspace, then bumps the row's
// semaphore; the program that bumps it last combines the row's P partials,
// writes the result and returns the semaphore to zero. P is chosen at run time
// from the shape (programs_per_row): 1 when there are enough rows to fill the
// GPU, up to one program per chunk when there are few long rows, so a single
// 256K-element row is reduced by 128 programs rather than one.
//===----------------------------------------------------------------------===//

/// About this many programs in all when rows are few (a few per SM).
inline constexpr int64_t kTargetPrograms = 512;

/// P for a [rows, cols] row reduction: max(1, min(chunks per row, cdiv(512, rows))).
inline DimExpr programs_per_row(const DimExpr& rows, const DimExpr& cols) {
  return max(min(cdiv(cols, kChunk), cdiv(kTargetPrograms, max(rows, 1))), 1);
}

/// Chunks [first, end) of the current program's segment: the row's chunks
/// dealt into num_programs(1) contiguous segments of equal length (the last
/// ones may be shorter or empty).
struct Segment {
  Value first, end;
};
inline Segment segment_of_row(const Value& cols) {
  Value chunks = num_chunks(cols);
  Value per = (chunks + num_programs(1) - 1) / num_programs(1);
  Value first = minimum(program_id(1) * per, chunks);
  return {first, minimum(first + per, chunks)};
}

/// `for c in segment: acc = f(c, acc)` over f32 accumulators.
template <class F>
std::vector<Value> fold_segment(const Segment& seg, std::vector<double> inits, F f) {
  std::vector<Value> carry;
  for (double v : inits) carry.push_back(constant(v, f32));
  return fori(seg.first, seg.end, carry,
              [&](Value c, std::vector<Value> acc) { return f(c, acc); });
}

/// exp(x - m) where an m of -inf (nothing seen yet) counts as 0, so that
/// exp(-inf - -inf) gives 0 rather than NaN.
inline Value exp_minus(const Value& x, const Value& m) {
  return exp(x - select(m == constant(kNegInf, m.dtype()), 0.0, m));
}

/// One pass over a segment: {m, l} with m its maximum and l = sum(exp(x - m))
/// (online: l is rescaled whenever m grows).
inline std::vector<Value> segment_logsumexp(const Ref& x, const Value& cols, const Segment& seg) {
  return fold_segment(seg, {kNegInf, 0.0}, [&](Value c, std::vector<Value> acc) {
    Value v = select(in_row(c, cols), chunk_f32(x, c), kNegInf);
    Value m = maximum(acc[0], max(v));
    Value l = acc[1] * exp_minus(acc[0], m) + sum(exp_minus(v, m));
    return std::vector<Value>{m, l};
  });
}

/// Writes this program's partials (one value per workspace, at r * P + s) and
/// arrives at row r's semaphore; true (i1) in the row's last program to arrive.
inline Value publish_partials(const Semaphores& arrived,
                              std::vector<std::pair<Ref, Value>> partials) {
  Value slot = program_id(0) * num_programs(1) + program_id(1);
  for (auto& [workspace, value] : partials) workspace.store_at(value, {slot});
  Value before = arrived.add(program_id(0), constant(1, i32));
  return before == num_programs(1).cast(i32) - 1;
}

/// Partial s of the current row, written by program (r, s).
inline Value partial_of_row(const Ref& workspace, const Value& s) {
  return workspace.load_scalar({program_id(0) * num_programs(1) + s});
}

/// `for s in [0, P): acc = f(s, acc)` over the row's partials, in order (so
/// the result does not depend on which program finished last).
template <class F>
std::vector<Value> fold_partials(std::vector<double> inits, F f) {
  std::vector<Value> carry;
  for (double v : inits) carry.push_back(constant(v, f32));
  return fori(index(0), num_programs(1), carry,
              [&](Value s, std::vector<Value> acc) { return f(s, acc); });
}

/// In the row's last program, after combining: the semaphore back to zero.
inline void finish_row(const Semaphores& arrived) {
  arrived.add(program_id(0), -num_programs(1).cast(i32));
}

}  // namespace pallas::edsl::rows

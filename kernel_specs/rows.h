// Shared by the row-wise ops (norms, softmax, row reductions, cross_entropy)
// over a [rows, cols] array: a program loops over its row, or its segment of
// a row, in chunks of kChunk elements at run-time offsets, so one kernel
// serves every row length. How many programs share a row is chosen at run
// time from the shape (programs_per_row): the row reductions combine partials
// in the row's last program (finish_with_row_partials; a row of one program
// needs none), softmax and the norms deal
// statistics and apply items by ticket (split_rows).
// Elements of the last chunk past the row end load as 0; the ops mask them out
// of every reduction where 0 would change the result (max, variance).
#pragma once

#include <pallas/EDSL/Spec.h>

#include <iterator>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

namespace pallas::edsl::rows {

/// 16 elements per thread of a 128-thread program: four 16-byte accesses per
/// f32 chunk, two per half-precision chunk.
inline constexpr int64_t kChunk = 2048;

/// The paths of a row op. Each is a kernel instance of its own
/// (KernelSpec::variant; see "Row paths as kernel instances" below), and
/// by_rows_per_program, by_row_length and split_rows emit its code only.
enum RowPath { kTile16, kTile4, kRow2048, kRow4096, kLongRow, kSplit };
inline std::vector<std::string> row_path_names() {
  return {"tile16", "tile4", "row2048", "row4096", "long", "split"};
}

/// Program i sees row i, whole.
inline Indices row_i(const ProgramIds& p) { return at(p[0], 0); }
/// Every program sees the whole [cols] vector (weights, biases).
inline Indices whole(const ProgramIds&) { return at(0); }

/// Number of chunks covering a row of `cols` elements.
inline Value num_chunks(const Value& cols) { return (cols + (kChunk - 1)) / kChunk; }

/// A row of at most kRowChunks chunks (4096 elements) is read once and kept in
/// registers (32 f32 per thread of 128) between its statistics and its output.
inline constexpr int64_t kRowChunks = 2;

/// Chunks [c, c + chunks) of a row ref (or the [cols] weights), as f32;
/// elements past the row end read as `fill` when given, else 0.
inline Value chunk_f32(const Ref& row, const Value& c, int64_t chunks = 1,
                       std::optional<double> fill = {}) {
  Value v = fill ? row.load_at({c * kChunk}, {chunks * kChunk}, *fill)
                 : row.load_at({c * kChunk}, {chunks * kChunk});
  return v.cast(f32);
}

/// Every program sees the whole [rows, cols] array and picks its row in the
/// body (see Row).
inline Indices all_rows(const ProgramIds&) { return at(0, 0); }

/// Row `index` of a [rows, cols] operand whose block is {full, full} (all_rows).
struct Row {
  Ref array;
  Value index;

  /// Chunks [c, c + chunks) in the operand's dtype; elements past the row end
  /// read as 0.
  Value chunk(const Value& c, int64_t chunks = 1, std::optional<double> fill = {}) const {
    Value v = fill ? array.load_at({index, c * kChunk}, {1, chunks * kChunk}, *fill)
                   : array.load_at({index, c * kChunk}, {1, chunks * kChunk});
    return reshape(v, {chunks * kChunk});
  }
  /// As f32; elements past the row end read as `fill` when given, else 0.
  Value chunk_f32(const Value& c, int64_t chunks = 1, std::optional<double> fill = {}) const {
    return chunk(c, chunks, fill).cast(f32);
  }
  /// Full chunk c (inside the row: c < cols / kChunk), as f32.
  Value full_chunk_f32(const Value& c) const {
    return reshape(array.load_inside({index, c * kChunk}, {1, kChunk}), {kChunk}).cast(f32);
  }
  /// Stores `v` (one or more chunks) from chunk c; elements past the row end
  /// are skipped.
  void store_chunk(const Value& v, const Value& c) const {
    array.store_at(reshape(v, {1, v.shape()[0]}), {index, c * kChunk});
  }
};

/// Full chunk `c` of a row Ref (c < cols / kChunk), as f32: the GPU tests no
/// row end in it.
inline Value full_chunk_f32(const Ref& row, const Value& c) {
  return row.load_inside({c * kChunk}, {kChunk}).cast(f32);
}
inline Value full_chunk_f32(const Row& row, const Value& c) { return row.full_chunk_f32(c); }

/// Chunk `c` of a picked row, as f32 (`fill` past the row end when given).
inline Value chunk_f32(const Row& row, const Value& c, int64_t chunks = 1,
                       std::optional<double> fill = {}) {
  return row.chunk_f32(c, chunks, fill);
}

//===----------------------------------------------------------------------===//
// Short rows: several rows per program
//
// A row of at most 512 elements would leave most lanes of a 2048-element
// chunk idle, so a program takes a tile of R rows x C columns instead, the
// narrowest of kTiles that holds the row (2048 elements, like a chunk). Row
// statistics are reductions along the tile's last axis with keepdims, which
// the GPU keeps in each row's lanes when a row lies in one warp (16 x 128;
// the strided_rows layout), else replicated in every thread (4 x 512).
//
// Worked example: 1000 rows of 100 elements: C = 128, R = 16, so
// cdiv(1000, 16) = 63 programs; program 62 has rows 992..999, and its 8 rows
// past the end load 0 and are not stored.
//===----------------------------------------------------------------------===//

struct Tile {
  int64_t rows, cols;
};
inline constexpr Tile kTiles[] = {{16, 128}, {4, 512}};  // narrowest first

/// For a tile path (kTile16, kTile4), `tile(t, first_row)`: the program's
/// tile of rows from first_row; for the others `row(program_id(0))`.
template <class TileFn, class RowFn>
void by_rows_per_program(int path, TileFn tile, RowFn row) {
  if (path == kTile16 || path == kTile4) {
    const Tile& t = kTiles[path == kTile16 ? 0 : 1];
    tile(t, program_id(0) * t.rows);
    return;
  }
  row(program_id(0));
}

/// i1 [R, C]: which elements of a tile lie inside their row.
inline Value in_tile_row(const Tile& t, const Value& cols) {
  return iota({t.rows, t.cols}, 1) < cols.cast(i32);
}

/// The tile of `t` from `first_row` of a {full, full} ref, in its dtype; rows
/// past the array end and columns past the row end read as 0.
inline Value load_tile(const Ref& array, const Tile& t, const Value& first_row) {
  return array.load_at({first_row, index(0)}, {t.rows, t.cols});
}
/// The same with `fill` outside the array (a column past the row end): a
/// tile's max needs no mask.
inline Value load_tile(const Ref& array, const Tile& t, const Value& first_row, double fill) {
  return array.load_at({first_row, index(0)}, {t.rows, t.cols}, fill);
}
inline void store_tile(const Ref& array, const Value& v, const Value& first_row) {
  array.store_at(v, {first_row, index(0)});
}

/// i1 block: which elements of chunks [c, c + chunks) lie inside the row.
inline Value in_row(const Value& c, const Value& cols, int64_t chunks = 1) {
  return iota({chunks * kChunk}, 0) + (c * kChunk).cast(i32) < cols.cast(i32);
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

/// A whole row's path: `held(chunks)` for kRow2048 (1 chunk) and kRow4096
/// (kRowChunks): the row is read once and kept in registers between its
/// statistics and its output; `many()` for kLongRow, which reads the row
/// again for the output.
template <class Held, class Many>
void by_row_length(int path, Held held, Many many) {
  if (path == kLongRow) return many();
  held(path == kRow2048 ? int64_t{1} : kRowChunks);
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
// GPU (then a program writes its row's result itself, with no workspace or
// semaphore: finish_with_row_partials), up to one program per chunk when
// there are few long rows, so a single
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
/// Segment `s` of `parts` of a row of `cols` elements.
inline Segment segment(const Value& cols, const Value& s, const Value& parts) {
  Value chunks = num_chunks(cols);
  Value per = (chunks + parts - 1) / parts;
  Value first = minimum(s * per, chunks);
  return {first, minimum(first + per, chunks)};
}
inline Segment segment_of_row(const Value& cols) {
  return segment(cols, program_id(1), num_programs(1));
}

/// `for c in segment: acc = f(c, acc)` over f32 accumulators.
template <class F>
std::vector<Value> fold_segment(const Segment& seg, std::vector<double> inits, F f) {
  std::vector<Value> carry;
  for (double v : inits) carry.push_back(constant(v, f32));
  return fori(seg.first, seg.end, carry,
              [&](Value c, std::vector<Value> acc) { return f(c, acc); });
}

/// `for c in segment: f(c)`.
template <class F>
void for_segment(const Segment& seg, F f) {
  fori(seg.first, seg.end, {}, [&](Value c, std::vector<Value>) {
    f(c);
    return std::vector<Value>{};
  });
}

/// exp(x - m) where an m of -inf (nothing seen yet) counts as 0, so that
/// exp(-inf - -inf) gives 0 rather than NaN.
inline Value exp_minus(const Value& x, const Value& m) {
  return exp(x - select(m == constant(kNegInf, m.dtype()), 0.0, m));
}

/// The end of the segment's full chunks (those wholly inside a row of `cols`):
/// its partial last chunk, if it has one, starts there.
inline Value full_chunks_end(const Segment& seg, const Value& cols) {
  return maximum(minimum(cols / kChunk, seg.end), seg.first);
}

/// `acc = f(c, acc, masked)` over the segment's chunks with [kChunk] f32
/// accumulators: one partial per element, so nothing crosses threads inside
/// the loop and the caller reduces the accumulators once, after it. Chunks
/// wholly inside the row run with `masked` false; the row's last, partial
/// chunk (when the segment has it) runs alone with `masked` true, and `f`
/// masks its elements past the row end there (they load as 0). The
/// accumulators are [kChunk] unless `carry_shape` says otherwise (one value
/// per group of a chunk: segment_logsumexp).
///
/// Worked example: cols = 5000, the whole row as one segment [0, 3): chunks 0
/// and 1 unmasked, chunk 2 (elements 4096..6143, of which 904 in the row) masked.
template <class F>
std::vector<Value> fold_segment_elements(const Segment& seg, const Value& cols,
                                         std::vector<double> inits, F f,
                                         std::vector<int64_t> carry_shape = {kChunk}) {
  std::vector<Value> carry;
  for (double v : inits) carry.push_back(broadcast_to(constant(v, f32), carry_shape));
  Value inside = full_chunks_end(seg, cols);
  carry = fori(seg.first, inside, carry,
               [&](Value c, std::vector<Value> acc) { return f(c, acc, false); });
  return fori(inside, seg.end, carry,
              [&](Value c, std::vector<Value> acc) { return f(c, acc, true); });
}

/// The elements of chunk c of `x` (a row Ref or a Row) as f32, with `fill` past
/// the row end when `masked` (a padded load: no per-element mask); a chunk
/// that is not `masked` is a full one (fold_segment_elements).
template <class RowOf>
Value chunk_or(const RowOf& x, const Value& c, const Value&, bool masked, double fill) {
  return masked ? chunk_f32(x, c, 1, fill) : full_chunk_f32(x, c);
}

/// How a row path reads its chunks (a kernel instance each, see "Row paths
/// as kernel instances"): kDirect loads them from global memory into
/// registers; kStaged stages them in shared memory through a TMA pipeline
/// (emit_pipeline: the next chunk's copy is in flight while this one is
/// folded), the sm_90 instance, whose entry point falls back to the direct
/// twin where TMA's rules do not hold (KernelSpec::direct).
enum class ChunkSource { kDirect, kStaged };
inline ChunkSource chunk_source(const KernelSpec& spec) {
  return spec.direct() ? ChunkSource::kDirect : ChunkSource::kStaged;
}

/// `acc = f(c, v, acc)` over the chunks c of `seg` of a row, with v chunk c
/// as f32 and `fill` past the row end; `inits` broadcast to `carry_shape`.
/// kDirect: fold_segment_elements (full chunks unmasked, the partial one
/// padded). kStaged: emit_pipeline over [1, kChunk] blocks of the row (8 TMA
/// boxes of 256 elements each, no swizzle: each thread reads its own 16-byte
/// runs), which arrive with TMA's zero fill past the row end. A fill of 0
/// (a sum) pipelines every chunk of the segment; any other fill pipelines
/// its full chunks only and folds the row's last, partial chunk after the
/// pipeline from a padded load (fold_segment_elements' masked chunk). A mask
/// inside the pipeline (select(in_row(c, cols), v, fill) on every chunk) kept
/// each thread's 16 element positions live through the loop: row_max_*_rows
/// took 68 registers against row_sum's 40, 7 programs an SM instead of 12,
/// and ran at 32 % of the copy's bandwidth on an H200 (bf16, 16384 x 4096,
/// where no chunk is partial) against row_sum's 48 %.
///
/// Worked example: cols = 5000, one segment [0, 3): chunks 0 and 1 through
/// the pipeline, chunk 2 (904 elements in the row) loaded with -inf past 5000.
template <class F>
std::vector<Value> fold_row_chunks(ChunkSource source, const Row& row, const Value& cols,
                                   const Segment& seg, double fill, std::vector<double> inits, F f,
                                   std::vector<int64_t> carry_shape = {kChunk}) {
  if (source == ChunkSource::kDirect)
    return fold_segment_elements(
        seg, cols, std::move(inits),
        [&](Value c, std::vector<Value> acc, bool masked) {
          return f(c, chunk_or(row, c, cols, masked, fill), std::move(acc));
        },
        carry_shape);
  std::vector<Value> carry;
  for (double v : inits) carry.push_back(broadcast_to(constant(v, f32), carry_shape));
  Value r = row.index;
  // Where the pipeline stops: the segment's end, or with a non-zero fill the
  // end of its full chunks.
  Value piped_end = fill == 0.0 ? seg.end : full_chunks_end(seg, cols);
  carry = emit_pipeline(seg.first, piped_end,
                        {PipelineOperand{row.array,
                                         {squeezed, Blocked{kChunk}},
                                         [r](const Value& c) { return at(r, c); },
                                         InShared{.swizzle = 0}}},
                        std::move(carry),
                        [&](Value c, std::vector<Ref> blocks, std::vector<Value> acc) {
                          return f(c, blocks[0].load().cast(f32), std::move(acc));
                        });
  if (fill == 0.0) return carry;
  return fori(piped_end, seg.end, std::move(carry), [&](Value c, std::vector<Value> acc) {
    return f(c, chunk_f32(row, c, 1, fill), std::move(acc));
  });
}

/// The elements of one 16-byte run of dtype T: 8 of bf16 or f16, 4 of f32.
/// The GPU's strided layout gives a run to one thread, so a reduction over
/// each run of a chunk reshaped to [kChunk / run, run] stays in that thread.
inline int64_t run_elements(DType T) { return T == f32 ? 4 : 8; }
inline DType dtype_of(const Ref& x) { return x.dtype(); }
inline DType dtype_of(const Row& x) { return x.array.dtype(); }

/// One pass over a segment: {m, l} with m its maximum and l = sum(exp(x - m)),
/// online per group of a chunk, as a hand-written kernel folds a 16-byte
/// vector at a time: each group of `run` elements (one 16-byte run, which one
/// thread holds) keeps a running pair (m_g, l_g); a chunk first takes each
/// group's maximum, then rescales l_g once and adds the group's exps:
///
///   m' = max(m_g, max_k v_k)     l' = l_g * exp(m_g - m') + sum_k exp(v_k - m')
///
/// so one exp per element plus one per group, rather than two per element.
/// The groups are combined once at the end. `x` is a row Ref or a Row.
///
/// The running maxima start at half the lowest float, not -inf, so they are
/// finite from the start and exp(x - m) needs no -inf guard (exp_minus): an
/// element of -inf (or past the row end) gives exp(-inf) = 0, a running pair
/// still at its start gives 0 * exp(start - m) = 0. A segment with no element
/// above the start gives m = start and l = 0, so m + log(l) is -inf as
/// before, and softmax's 0 / 0 is NaN as before. Half, because the
/// approximate exp of half-precision kernels computes m * log2(e) (the FMA
/// fold of ElementwiseRules.cpp), which must stay finite.
/// `chunks` folds a segment (fold_segment_elements or fold_row_chunks);
/// segment_logsumexp below picks it.
template <class Fold>
std::vector<Value> segment_logsumexp_by(DType T, Fold chunks) {
  const double lowest = std::numeric_limits<float>::lowest() / 2;
  const int64_t run = run_elements(T), groups = kChunk / run;
  std::vector<Value> ml = chunks(
      std::vector<double>{lowest, 0.0},
      [&](Value, Value chunk, std::vector<Value> acc) {
        Value v = reshape(chunk, {groups, run});
        Value m = maximum(acc[0], max(v, 1, /*keepdims=*/true));
        return std::vector<Value>{m, acc[1] * exp(acc[0] - m) + sum(exp(v - m), 1, true)};
      },
      std::vector<int64_t>{groups, 1});
  Value m = max(ml[0]);
  return {m, sum(ml[1] * exp(ml[0] - m))};
}

template <class RowOf>
std::vector<Value> segment_logsumexp(const RowOf& x, const Value& cols, const Segment& seg) {
  return segment_logsumexp_by(
      dtype_of(x), [&](std::vector<double> inits, auto f, std::vector<int64_t> shape) {
        return fold_segment_elements(
            seg, cols, std::move(inits),
            [&](Value c, std::vector<Value> acc, bool masked) {
              return f(c, chunk_or(x, c, cols, masked, kNegInf), std::move(acc));
            },
            shape);
      });
}

/// The same over a row's chunks read from `source` (fold_row_chunks).
inline std::vector<Value> segment_logsumexp(ChunkSource source, const Row& x, const Value& cols,
                                            const Segment& seg) {
  return segment_logsumexp_by(
      dtype_of(x), [&](std::vector<double> inits, auto f, std::vector<int64_t> shape) {
        return fold_row_chunks(source, x, cols, seg, kNegInf, std::move(inits), f, shape);
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

/// Runs `finish(values)` once per row, with the row's partials combined
/// (one value per workspace of `partials`, in their order). With P = 1
/// (num_programs(1): rows enough to fill the GPU, e.g. 16384 x 4096) the
/// program's own partials are its row's and finish takes them at once. With
/// P > 1 each program publishes its partials and the row's last program to
/// arrive runs finish(fold()), fold reading the row's P partials in order
/// (fold_partials), then puts the semaphore back to zero.
///
/// Why P = 1 skips the workspace: publishing costs a program two fences
/// (fence.acq_rel.gpu around the atomic), an atomic whose result it waits
/// for, a load of its own partial back from L2 and three barriers, about as
/// long as reading an 8 KiB bf16 row. For P = 1 folding the one partial is
/// the identity (0 + s, max(-inf, s)), but for logsumexp's l * exp(m - m),
/// which the half-precision kernels' approximate exp may round by an ulp:
/// without the fold the result is, if anything, closer.
template <class Fold, class Finish>
void finish_with_row_partials(const Semaphores& arrived,
                              const std::vector<std::pair<Ref, Value>>& partials, Fold fold,
                              Finish finish) {
  when(num_programs(1) == index(1), [&] {
    std::vector<Value> own;
    for (const auto& partial : partials) own.push_back(partial.second);
    finish(std::move(own));
  });
  when(num_programs(1) > index(1), [&] {
    when(publish_partials(arrived, partials), [&] {
      finish(fold());
      finish_row(arrived);
    });
  });
}

//===----------------------------------------------------------------------===//
// Rows whose output needs whole-row statistics, split across programs
//
// softmax and the norms read a row for its statistics (max and sum of exp,
// sum of squares, mean and variance), then write it from them. When there
// are enough rows to fill the GPU, a program does a whole row (Q = 1 program
// per row). When rows are few and long, a row is split into P segments
// (programs_per_row) and done by Q = 2P work items: P statistics items, each
// writing its segment's partials to workspaces and arriving at the row's
// `ready` semaphore, then P apply items, each waiting until `ready` reaches
// P, combining the P partials in order and writing its segment.
//
// Items are dealt by ticket (an atomic counter), not by program id: an apply
// item waits only for items with smaller tickets, which have all started and
// wait for nothing, so the launch completes whatever number of programs the
// GPU keeps resident (no cooperative launch), and the host backend, which
// runs programs one after another, runs it as it is.
//
// Worked example: 2 rows of 10000 elements (5 chunks): P = min(5, cdiv(512,
// 2)) = 5, Q = 10, a (2, 10) grid. Tickets 0-4 are the statistics of row 0's
// segments 0-4 (one chunk each), 5-9 its apply items, 10-19 the same for
// row 1.
//===----------------------------------------------------------------------===//

/// Q: 1 when P is 1, else 2P.
inline DimExpr items_per_row(const DimExpr& rows, const DimExpr& cols) {
  DimExpr p = programs_per_row(rows, cols);
  return p * 2 - 1 + min(p - 1, 1);
}

/// The semaphores of a split-rows kernel: the ticket counter, and per row
/// the statistics items that arrived and the apply items that finished.
struct SplitRows {
  Semaphores ticket, ready, done;
};
inline SplitRows declare_split_rows(KernelSpec& spec, const DimExpr& rows) {
  return {spec.semaphores("ticket", 1), spec.semaphores("ready", rows),
          spec.semaphores("done", rows)};
}

/// The items of a split row, on a (rows, Q) grid with Q = 2P > 1:
///   stats(row, seg, slot):   a statistics item: segment `seg`'s partials to
///                            the workspaces at `slot`;
///   apply(row, seg, base, P): an apply item, once every statistics item of
///                            the row has arrived; the row's partials are at
///                            slots base .. base + P - 1.
template <class Stats, class Apply>
void split_row_items(const SplitRows& sem, const Value& cols, Stats stats, Apply apply) {
  Value q = num_programs(1);
  Value total = (num_programs(0) * q).cast(i32);
  Value ticket = sem.ticket.add(0, constant(1, i32));
  when(ticket == total - constant(1, i32), [&] {  // every ticket is taken: back to 0
    sem.ticket.add(0, constant(0, i32) - total);
  });
  Value t = ticket.cast(DType::index);
  Value row = t / q, item = t - row * q, parts = q / 2;
  Value parts_i32 = parts.cast(i32);
  when(item < parts, [&] {
    stats(row, segment(cols, item, parts), row * parts + item);
    sem.ready.signal(row);
  });
  when(item >= parts, [&] {
    while_loop([&](std::vector<Value>) { return sem.ready.read(row) < parts_i32; },
               [](std::vector<Value> none) { return none; }, {});
    apply(row, segment(cols, item - parts, parts), row * parts, parts);
    Value finished = sem.done.add(row, constant(1, i32));
    when(finished == parts_i32 - constant(1, i32), [&] {  // the row's last: both back to 0
      sem.ready.add(row, constant(0, i32) - parts_i32);
      sem.done.add(row, constant(0, i32) - parts_i32);
    });
  });
}

/// The body of a row path whose output needs the whole row's statistics:
/// `whole(row)` (program r does row r) for every path but kSplit, whose
/// programs are split_row_items.
template <class Whole, class Stats, class Apply>
void split_rows(int path, const SplitRows& sem, const Value& cols, Whole whole, Stats stats,
                Apply apply) {
  if (path != kSplit) return whole(program_id(0));
  split_row_items(sem, cols, stats, apply);
}

//===----------------------------------------------------------------------===//
// Row paths as kernel instances
//
// A row op's paths, each its own kernel (KernelSpec::variant), so that each
// kernel's registers are those of its path; the entry point picks one from
// the shape at run time, exactly as the paths were picked inside one kernel:
//   kTile16, kTile4: short rows, a tile of rows per program (kTiles);
//   kRow2048, kRow4096: a row per program, read once and kept in registers;
//   kLongRow: a row per program, longer than kRowChunks chunks;
//   kSplit: few long rows, each split over 2P work items (split_rows).
// Worked example: 16384 x 4096 takes kRow4096 (Q = 1, 2048 < cols <= 4096);
// 8 x 262144 takes kSplit (P = min(128, 64) = 64, Q = 128).
//===----------------------------------------------------------------------===//

/// The path of a [rows, cols] launch: kSplit when Q > 1, else by row length.
inline DimExpr row_path(const DimExpr& rows, const DimExpr& cols) {
  DimExpr whole = le(items_per_row(rows, cols), 1);
  DimExpr by_length = DimExpr(4) - le(cols, kRowChunks * kChunk) - le(cols, kChunk) -
                      le(cols, kTiles[1].cols) - le(cols, kTiles[0].cols);
  return whole * by_length + (DimExpr(1) - whole) * kSplit;
}

/// The grid of `path` for [rows, cols]: a tile of rows, a row, or a row's Q items per program.
inline std::vector<DimExpr> row_path_grid(int path, const DimExpr& rows, const DimExpr& cols) {
  if (path == kTile16 || path == kTile4) return {cdiv(rows, kTiles[path == kTile16 ? 0 : 1].rows)};
  if (path == kSplit) return {rows, items_per_row(rows, cols)};
  return {rows};
}

/// Threads per program of `path` for inputs of dtype T, where each element
/// of the row comes with `operands` row-length inputs (softmax 1; the norms 2,
/// x and their weights; the residual norms 3): 256 where 128 would leave a
/// thread more live values than fit in 96 registers, else 128. A 4096-element
/// row held in registers is 16 elements per thread instead of 32 (f32, or
/// with weights); a chunk loop carrying per-element f32 moments (the norms in
/// f32) or reading two rows and writing a third (the residual norms) is 8
/// elements per thread instead of 16. softmax's and cross_entropy's loops
/// carry one (max, sum) pair per 16-byte run (segment_logsumexp) and fit at
/// 128. The bound is tested (status_test.cc: KernelMetadata registers) and the
/// SASS report (bench/sass_report.py) shows each path's registers.
inline int row_path_threads(int path, DType T, int operands = 1) {
  if (path == kRow4096) return (T == f32 || operands > 1) ? 256 : 128;
  if (path == kLongRow || path == kSplit)
    return ((T == f32 && operands > 1) || operands > 2) ? 256 : 128;
  return 128;
}

/// Elements per run of the GPU's strided layout for `path` (KernelSpec::
/// run_elements; 0: the default, 16 bytes). A 4 x 512 tile in runs of 16 has
/// each row in one warp (32 runs), so its row statistics are warp shuffles
/// with no shared memory and no barrier, as for the 16 x 128 tile.
inline int row_path_run_elements(int path) { return path == kTile4 ? 16 : 0; }

/// `for s in [0, parts): acc = f(slot, acc)` over a row's partials, in order.
template <class F>
std::vector<Value> fold_slots(const Value& base, const Value& parts, std::vector<double> inits,
                              F f) {
  std::vector<Value> carry;
  for (double v : inits) carry.push_back(constant(v, f32));
  return fori(index(0), parts, carry,
              [&](Value s, std::vector<Value> acc) { return f(base + s, acc); });
}

}  // namespace pallas::edsl::rows

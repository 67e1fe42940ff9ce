// softmax and log_softmax over the last axis of a [rows, cols] array, and the
// row reductions row_sum and row_max ([rows, cols] -> [rows]). f32 arithmetic;
// half-precision inputs are read as f32 and outputs rounded once.

#include "rows.h"

using namespace pallas::edsl;
using namespace pallas::edsl::rows;

namespace {

/// softmax or log_softmax, one kernel per row path (rows.h: RowPath), each
/// given y = out(x, m, l) from the row statistics m = max(row) and
/// l = sum(exp(row - m)):
///   kTile16, kTile4: a tile of short rows, read once;
///   kRow2048, kRow4096: a row in one program, read once, kept in registers;
///   kLongRow: a row in one program: an online pass, then a second pass;
///   kSplit: each statistics item folds its segment online, each apply item
///   combines the segments' (m, l) and writes its segment.
template <class Out>
void row_softmax(KernelSpec& spec, DType T, Out out) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", T, {rows, cols});
  Operand y = spec.output("y", T, {rows, cols});
  const int path = spec.variant("path", row_path_names(), row_path(rows, cols));
  spec.threads(row_path_threads(path, T));
  spec.run_elements(row_path_run_elements(path));
  // A half-precision 4096-element row fits 64 registers without spills (32
  // f32 values per thread); ptxas alone takes up to 72 for more overlap.
  if (path == kRow4096 && T != f32) spec.max_registers(64);
  spec.block(x, {full, full}, all_rows);
  spec.block(y, {full, full}, all_rows);
  if (path == kTile16 || path == kTile4) {
    const Tile t = kTiles[path == kTile16 ? 0 : 1];
    spec.grid({cdiv(rows, t.rows)});
    spec.body([=](Ref x, Ref y) {
      Value cols = x.extent(1), first_row = program_id(0) * t.rows;
      Value v = load_tile(x, t, first_row, kNegInf).cast(f32);  // -inf past each row
      Value m = max(v, 1, /*keepdims=*/true);
      store_tile(y, out(v, m, sum(exp_minus(v, m), 1, /*keepdims=*/true)).cast(T), first_row);
    });
    return;
  }
  if (path != kSplit) {
    spec.grid({rows});
    spec.body([=](Ref x, Ref y) {
      Value cols = x.extent(1);
      Row in{x, program_id(0)}, to{y, program_id(0)};
      if (path == kLongRow) {
        std::vector<Value> ml = segment_logsumexp(in, cols, Segment{index(0), num_chunks(cols)});
        for_chunks(cols,
                   [&](Value c) { to.store_chunk(out(in.chunk_f32(c), ml[0], ml[1]).cast(T), c); });
        return;
      }
      const int64_t chunks = path == kRow2048 ? 1 : kRowChunks;
      Value v = in.chunk_f32(index(0), chunks, kNegInf);  // -inf past the row end
      Value m = max(v);
      to.store_chunk(out(v, m, sum(exp_minus(v, m))).cast(T), index(0));
    });
    return;
  }
  // kSplit: Q = 2P items per row, with the segments' (max, sum of exp) in workspaces.
  DimExpr split = programs_per_row(rows, cols), items = items_per_row(rows, cols);
  spec.workspace("partial_max", f32, rows * split);
  spec.workspace("partial_sum", f32, rows * split);
  SplitRows sem = declare_split_rows(spec, rows);
  spec.grid({rows, items});
  spec.body([=](Ref x, Ref y, Ref pmax, Ref psum) {
    Value cols = x.extent(1);
    auto stats = [&](Value r, Segment seg, Value slot) {
      std::vector<Value> ml = segment_logsumexp(Row{x, r}, cols, seg);
      pmax.store_at(ml[0], {slot});
      psum.store_at(ml[1], {slot});
    };
    auto apply = [&](Value r, Segment seg, Value base, Value parts) {
      Value m = fold_slots(base, parts, {kNegInf}, [&](Value slot, std::vector<Value> acc) {
        return std::vector<Value>{maximum(acc[0], pmax.load_scalar({slot}))};
      })[0];
      Value l = fold_slots(base, parts, {0.0}, [&](Value slot, std::vector<Value> acc) {
        Value scale = exp_minus(pmax.load_scalar({slot}), m);
        return std::vector<Value>{acc[0] + psum.load_scalar({slot}) * scale};
      })[0];
      Row in{x, r}, to{y, r};
      for_segment(seg, [&](Value c) { to.store_chunk(out(in.chunk_f32(c), m, l).cast(T), c); });
    };
    split_row_items(sem, cols, stats, apply);
  });
}

}  // namespace

// y = exp(x - max) / sum(exp(x - max))
PALLAS_KERNEL(softmax) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  row_softmax(spec, T, [](Value v, Value m, Value l) { return exp_minus(v, m) * (1.0 / l); });
}

// y = x - max - log(sum(exp(x - max)))
PALLAS_KERNEL(log_softmax) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  row_softmax(spec, T, [](Value v, Value m, Value l) { return v - (m + log(l)); });
}

namespace {
/// [rows, cols] x -> [rows] out on a (cdiv(rows, R), P) grid (see rows.h),
/// with one f32 partial per program when P > 1 (a row of one program writes its
/// result: finish_with_row_partials); returns the semaphores the body arrives at.
/// Three kernel instances (KernelSpec::variant): tiles of 16 or 4 short rows,
/// or rows (a row's segments over P programs), whose chunks a TMA pipeline
/// stages in shared memory on sm_90 (fold_row_chunks; its direct twin elsewhere).
struct RowReduction {
  Semaphores arrived;
  int path;            // kTile16, kTile4, or kRow2048 standing for every row path
  ChunkSource source;  // how the rows path reads its chunks
};
RowReduction declare_row_reduction(KernelSpec& spec, DType T) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  Operand x = spec.input("x", T, {rows, cols});
  Operand out = spec.output("out", T, {rows});
  const int variant =
      spec.variant("path", {"tile16", "tile4", "rows"},
                   DimExpr(2) - le(cols, kTiles[1].cols) - le(cols, kTiles[0].cols));
  const int path = variant == 0 ? kTile16 : variant == 1 ? kTile4 : kRow2048;
  spec.run_elements(row_path_run_elements(path));
  const bool rows_path = path == kRow2048;
  DimExpr split = programs_per_row(rows, cols);
  spec.workspace("partials", f32, rows_path ? rows * split : DimExpr(0));
  Semaphores arrived = spec.semaphores("arrived", rows_path ? rows : DimExpr(0));
  if (rows_path)
    spec.grid({rows, split});
  else
    spec.grid(row_path_grid(path, rows, cols));
  spec.block(x, {full, full}, all_rows);
  spec.block(out, {full}, whole);
  return {arrived, path, chunk_source(spec)};
}

enum class Reduction { kSum, kMax };

/// out[r] = sum or max of row r in f32: a tile of short rows reduces along
/// its last axis; a longer row folds its segment's chunks in order into one
/// partial per element, reduces them once, and the row's last program folds
/// the segments' partials in order.
void row_reduction(Reduction kind, const RowReduction& decl, Ref x, Ref out, Ref partials,
                   DType T) {
  const Semaphores& arrived = decl.arrived;
  const bool is_sum = kind == Reduction::kSum;
  const double identity = is_sum ? 0.0 : kNegInf;  // also what masked elements become
  auto combine = [&](const Value& a, const Value& b) { return is_sum ? a + b : maximum(a, b); };
  Value cols = x.extent(1);
  auto tile = [&](Tile t, Value first_row) {
    Value v = load_tile(x, t, first_row, identity).cast(f32);  // identity past each row
    out.store_at((is_sum ? sum(v, 1) : max(v, 1)).cast(T), {first_row});
  };
  auto row = [&](Value r) {
    Row in{x, r};
    // Elements past the row end of the last, partial chunk read as the identity.
    Value parts = fold_row_chunks(decl.source, in, cols, segment_of_row(cols), identity, {identity},
                                  [&](Value, Value v, std::vector<Value> acc) {
                                    return std::vector<Value>{combine(acc[0], v)};
                                  })[0];
    Value part = is_sum ? sum(parts) : max(parts);
    finish_with_row_partials(
        arrived, {{partials, part}},
        [&] {
          return fold_partials({identity}, [&](Value s, std::vector<Value> acc) {
            return std::vector<Value>{combine(acc[0], partial_of_row(partials, s))};
          });
        },
        [&](std::vector<Value> total) { out.store_at(total[0].cast(T), {r}); });
  };
  by_rows_per_program(decl.path, tile, row);
}
}  // namespace

// out[r] = sum(x[r, :]), accumulated in f32 (segments in order, then their sums in order).
PALLAS_KERNEL(row_sum) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  RowReduction decl = declare_row_reduction(spec, T);
  spec.body([=](Ref x, Ref out, Ref partials) {
    row_reduction(Reduction::kSum, decl, x, out, partials, T);
  });
}

// out[r] = max(x[r, :]); NaN propagates; an empty row gives -inf.
PALLAS_KERNEL(row_max) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  RowReduction decl = declare_row_reduction(spec, T);
  spec.body([=](Ref x, Ref out, Ref partials) {
    row_reduction(Reduction::kMax, decl, x, out, partials, T);
  });
}

// rms_norm and layer_norm over the last axis of a [rows, cols] array, each
// optionally fused with a residual add: y = norm(x + r), also writing h = x + r.
// Statistics accumulate in f32; half-precision inputs are read as f32. Rows
// are done whole by one program, or split across programs when they are few
// and long (rows.h: split_rows).

#include "rows.h"

using namespace pallas::edsl;
using namespace pallas::edsl::rows;

namespace {

/// The operands shared by the four norm kernels: x (and r), the weight (and
/// bias), eps, y (and h), and the semaphores of split rows.
struct NormOperands {
  Operand x, r, w, b, y, h;
  Scalar eps;
  SplitRows sem;
  int path;  // this instance's RowPath
};

/// `partials` f32 workspaces hold each segment's statistics when rows are split.
NormOperands declare(KernelSpec& spec, DType T, bool residual, bool bias,
                     std::vector<std::string> partials) {
  DimExpr rows = spec.dim("rows"), cols = spec.dim("cols");
  NormOperands o;
  o.x = spec.input("x", T, {rows, cols});
  if (residual) o.r = spec.input("r", T, {rows, cols});
  o.w = spec.input("w", T, {cols});
  if (bias) o.b = spec.input("b", T, {cols});
  o.eps = spec.scalar("eps", f32, /*min=*/0.0);
  o.y = spec.output("y", T, {rows, cols});
  if (residual) o.h = spec.output("h", T, {rows, cols});
  o.path = spec.variant("path", row_path_names(), row_path(rows, cols));
  spec.threads(row_path_threads(o.path, T, /*operands=*/residual ? 3 : 2));
  spec.run_elements(row_path_run_elements(o.path));
  DimExpr split = programs_per_row(rows, cols), items = items_per_row(rows, cols);
  for (const std::string& name : partials)  // empty unless rows are split
    spec.workspace(name, f32, o.path == kSplit ? rows * split : DimExpr(0));
  o.sem = declare_split_rows(spec, o.path == kSplit ? rows : DimExpr(0));
  spec.grid(row_path_grid(o.path, rows, cols));
  for (Operand op : {o.x, o.r, o.y, o.h})
    if (op.index >= 0) spec.block(op, {full, full}, all_rows);
  for (Operand op : {o.w, o.b})
    if (op.index >= 0) spec.block(op, {full}, whole);
  return o;
}

/// Row r of the normalized input and where it goes: x (or x and the residual
/// r with h = x + r), y, and the weight (and bias).
struct NormRow {
  Row x;
  std::optional<Row> res, h;
  Row y;
  Ref w;
  std::optional<Ref> b;
  DType T;

  /// Chunks [c, c + chunks) of the normalized input: x, or h = x + r rounded
  /// to T; the first read of a chunk stores h, later reads load it back.
  Value input(const Value& c, bool first, int64_t chunks = 1) const {
    if (!res) return x.chunk_f32(c, chunks);
    if (!first) return h->chunk_f32(c, chunks);
    Value sum = (x.chunk_f32(c, chunks) + res->chunk_f32(c, chunks)).cast(T);
    h->store_chunk(sum, c);
    return sum.cast(f32);
  }
  /// y from chunk c = (v - shift) * scale * w (+ b), for v of one or more chunks.
  void store(const Value& c, const Value& v, const Value& shift, const Value& scale) const {
    const int64_t chunks = v.shape()[0] / kChunk;
    Value out = (v - shift) * scale * chunk_f32(w, c, chunks);
    if (b) out = out + chunk_f32(*b, c, chunks);
    y.store_chunk(out.cast(T), c);
  }
};

/// A tile of short rows (rows.h: by_rows_per_program), read once: the
/// normalized input as [R, C] f32 (x, or h = x + r rounded to T and stored)
/// and the store of y = (v - shift) * scale * w (+ b), one shift and scale
/// per row.
struct NormTile {
  Ref x;
  const Ref *r, *h;
  Ref w, y;
  const Ref* b;
  DType T;
  Tile t;
  Value first_row;

  Value input() const {
    Value v = load_tile(x, t, first_row).cast(f32);
    if (!r) return v;
    Value sum = (v + load_tile(*r, t, first_row).cast(f32)).cast(T);
    store_tile(*h, sum, first_row);
    return sum.cast(f32);
  }
  void store(const Value& v, const Value& shift, const Value& scale) const {
    Value out = (v - shift) * scale * w.load_at({index(0)}, {t.cols}).cast(f32);
    if (b) out = out + b->load_at({index(0)}, {t.cols}).cast(f32);
    store_tile(y, out.cast(T), first_row);
  }
};

/// fold_segment_elements over a whole row.
template <class F>
std::vector<Value> whole_row_elements(const Value& cols, std::vector<double> inits, F f) {
  return fold_segment_elements(Segment{index(0), num_chunks(cols)}, cols, std::move(inits), f);
}

/// Elements of chunks [seg.first, seg.end) inside a row of `cols`, as f32.
Value elements_in(const Segment& seg, const Value& cols) {
  Value end = minimum(seg.end * kChunk, cols), first = minimum(seg.first * kChunk, cols);
  return (end - first).cast(f32);
}

// ---- rms_norm: y = x * rsqrt(mean(x^2) + eps) * w ----

void rms_whole_row(const NormRow& n, const Value& cols, Scalar eps, int path) {
  auto scale_of = [&](const Value& squares) {
    return rsqrt(squares / cols.cast(f32) + Value(eps));
  };
  Value zero = constant(0.0, f32);
  by_row_length(
      path,
      [&](int64_t chunks) {
        Value v = n.input(index(0), /*first=*/true, chunks);
        n.store(index(0), v, zero, scale_of(sum(v * v)));
      },
      [&] {
        Value squares =
            sum(whole_row_elements(cols, {0.0}, [&](Value c, std::vector<Value> acc, bool) {
              Value v = n.input(c, /*first=*/true);  // 0 past the row end
              return std::vector<Value>{acc[0] + v * v};
            })[0]);
        Value scale = scale_of(squares);
        for_chunks(cols, [&](Value c) { n.store(c, n.input(c, /*first=*/false), zero, scale); });
      });
}

void rms_body(const NormOperands& o, Ref x, const Ref* r, Ref w, Ref y, const Ref* h, Ref squares,
              DType T) {
  Value cols = x.extent(1);
  auto row = [&](Value i) {
    NormRow n{Row{x, i}, {}, {}, Row{y, i}, w, {}, T};
    if (r) n.res = Row{*r, i}, n.h = Row{*h, i};
    return n;
  };
  auto tile = [&](Tile t, Value first_row) {
    NormTile n{x, r, h, w, y, nullptr, T, t, first_row};
    Value v = n.input();
    n.store(v, constant(0.0, f32),
            rsqrt(sum(v * v, 1, /*keepdims=*/true) / cols.cast(f32) + Value(o.eps)));
  };
  split_rows(
      o.path, o.sem, cols,
      [&](Value) {
        by_rows_per_program(o.path, tile,
                            [&](Value i) { rms_whole_row(row(i), cols, o.eps, o.path); });
      },
      [&](Value i, Segment seg, Value slot) {
        NormRow n = row(i);
        Value part =
            sum(fold_segment_elements(seg, cols, {0.0}, [&](Value c, std::vector<Value> acc, bool) {
              Value v = n.input(c, /*first=*/true);
              return std::vector<Value>{acc[0] + v * v};
            })[0]);
        squares.store_at(part, {slot});
      },
      [&](Value i, Segment seg, Value base, Value parts) {
        Value total = fold_slots(base, parts, {0.0}, [&](Value slot, std::vector<Value> acc) {
          return std::vector<Value>{acc[0] + squares.load_scalar({slot})};
        })[0];
        Value scale = rsqrt(total / cols.cast(f32) + Value(o.eps));
        NormRow n = row(i);
        for_segment(seg, [&](Value c) {
          n.store(c, n.input(c, /*first=*/false), constant(0.0, f32), scale);
        });
      });
}

// ---- layer_norm: y = (x - mean) * rsqrt(var + eps) * w + b ----

/// A whole row: the variance around the mean (a second pass) for accuracy.
void layer_whole_row(const NormRow& n, const Value& cols, Scalar eps, int path) {
  Value count = cols.cast(f32);
  by_row_length(
      path,
      [&](int64_t chunks) {  // one read, kept in registers
        Value v = n.input(index(0), /*first=*/true, chunks);
        Value mean = sum(v) / count;
        Value d = select(in_row(index(0), cols, chunks), v - mean, 0.0);  // v is dead from here
        n.store(index(0), d, constant(0.0, f32), rsqrt(sum(d * d) / count + Value(eps)));
      },
      [&] {
        Value mean =
            sum(whole_row_elements(cols, {0.0},
                                   [&](Value c, std::vector<Value> acc, bool) {
                                     return std::vector<Value>{acc[0] + n.input(c, /*first=*/true)};
                                   })[0]) /
            count;
        Value var = sum(whole_row_elements(cols, {0.0},
                                           [&](Value c, std::vector<Value> acc, bool masked) {
                                             Value d = n.input(c, false) - mean;
                                             if (masked) d = select(in_row(c, cols), d, 0.0);
                                             return std::vector<Value>{acc[0] + d * d};
                                           })[0]) /
                    count;
        Value scale = rsqrt(var + Value(eps));
        for_chunks(cols, [&](Value c) { n.store(c, n.input(c, /*first=*/false), mean, scale); });
      });
}

/// Chan et al.'s pairwise update: the (count, mean, M2) of two disjoint parts
/// combined, M2 being the sum of squared deviations from the mean. Exact in
/// exact arithmetic, and stable: no large sums of squares are subtracted.
/// Worked example: {1, 2} is (2, 1.5, 0.5) and {4} is (1, 4, 0); combined
/// delta = 2.5, (3, 1.5 + 2.5/3, 0.5 + 2.5^2 * 2/3) = (3, 2.333, 4.667).
std::vector<Value> chan_combine(const std::vector<Value>& a, const Value& nb, const Value& mb,
                                const Value& m2b) {
  Value n = a[0] + nb;
  Value frac = select(n > constant(0.0, f32), nb / n, 0.0);  // 0 when both are empty
  Value delta = mb - a[1];
  return {n, a[1] + delta * frac, a[2] + m2b + delta * delta * a[0] * frac};
}

void layer_body(const NormOperands& o, Ref x, const Ref* r, Ref w, Ref b, Ref y, const Ref* h,
                Ref pcount, Ref pmean, Ref pm2, DType T) {
  Value cols = x.extent(1);
  auto row = [&](Value i) {
    NormRow n{Row{x, i}, {}, {}, Row{y, i}, w, b, T};
    if (r) n.res = Row{*r, i}, n.h = Row{*h, i};
    return n;
  };
  auto tile = [&](Tile t, Value first_row) {
    NormTile n{x, r, h, w, y, &b, T, t, first_row};
    Value v = n.input(), count = cols.cast(f32);
    Value mean = sum(v, 1, /*keepdims=*/true) / count;
    Value d = select(in_tile_row(t, cols), v - mean, 0.0);  // v itself is dead from here
    n.store(d, constant(0.0, f32), rsqrt(sum(d * d, 1, /*keepdims=*/true) / count + Value(o.eps)));
  };
  split_rows(
      o.path, o.sem, cols,
      [&](Value) {
        by_rows_per_program(o.path, tile,
                            [&](Value i) { layer_whole_row(row(i), cols, o.eps, o.path); });
      },
      [&](Value i, Segment seg, Value slot) {  // one read: each chunk's own two-pass stats
        NormRow n = row(i);
        std::vector<Value> stats =
            fold_segment(seg, {0.0, 0.0, 0.0}, [&](Value c, std::vector<Value> acc) {
              Value v = n.input(c, /*first=*/true);
              Value count = elements_in(Segment{c, c + 1}, cols);
              Value mean = sum(v) / count;
              Value d = select(in_row(c, cols), v - mean, 0.0);
              return chan_combine(acc, count, mean, sum(d * d));
            });
        pcount.store_at(stats[0], {slot});
        pmean.store_at(stats[1], {slot});
        pm2.store_at(stats[2], {slot});
      },
      [&](Value i, Segment seg, Value base, Value parts) {
        std::vector<Value> stats =
            fold_slots(base, parts, {0.0, 0.0, 0.0}, [&](Value slot, std::vector<Value> acc) {
              return chan_combine(acc, pcount.load_scalar({slot}), pmean.load_scalar({slot}),
                                  pm2.load_scalar({slot}));
            });
        Value scale = rsqrt(stats[2] / cols.cast(f32) + Value(o.eps));
        NormRow n = row(i);
        for_segment(seg,
                    [&](Value c) { n.store(c, n.input(c, /*first=*/false), stats[1], scale); });
      });
}

}  // namespace

PALLAS_KERNEL(rms_norm) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  NormOperands o = declare(spec, T, /*residual=*/false, /*bias=*/false, {"partial_squares"});
  spec.body([o, T](Ref x, Ref w, Ref y, Ref squares) {
    rms_body(o, x, nullptr, w, y, nullptr, squares, T);
  });
}

PALLAS_KERNEL(rms_norm_residual) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  NormOperands o = declare(spec, T, /*residual=*/true, /*bias=*/false, {"partial_squares"});
  spec.body([o, T](Ref x, Ref r, Ref w, Ref y, Ref h, Ref squares) {
    rms_body(o, x, &r, w, y, &h, squares, T);
  });
}

PALLAS_KERNEL(layer_norm) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  NormOperands o = declare(spec, T, /*residual=*/false, /*bias=*/true,
                           {"partial_count", "partial_mean", "partial_m2"});
  spec.body([o, T](Ref x, Ref w, Ref b, Ref y, Ref pcount, Ref pmean, Ref pm2) {
    layer_body(o, x, nullptr, w, b, y, nullptr, pcount, pmean, pm2, T);
  });
}

PALLAS_KERNEL(layer_norm_residual) {
  DType T = spec.dtype_param("T", {f32, f16, bf16});
  NormOperands o = declare(spec, T, /*residual=*/true, /*bias=*/true,
                           {"partial_count", "partial_mean", "partial_m2"});
  spec.body([o, T](Ref x, Ref r, Ref w, Ref b, Ref y, Ref h, Ref pcount, Ref pmean, Ref pm2) {
    layer_body(o, x, &r, w, b, y, &h, pcount, pmean, pm2, T);
  });
}

//===- PallasLayouts.cpp - thread layouts of block values -----------------===//
//
// The layout attributes' verifiers and ownership functions; their meaning,
// with worked examples, is in PallasLayouts.td.
//
//===----------------------------------------------------------------------===//

#include "pallas/Dialect/PallasDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"

#include <numeric>

using namespace mlir;
using namespace mlir::pallas;

//===----------------------------------------------------------------------===//
// WarpgroupStridedLayoutAttr
//===----------------------------------------------------------------------===//

LogicalResult WarpgroupStridedLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                                 int64_t threads, int64_t vec) {
  if (threads <= 0 || threads % 32 != 0)
    return emitError() << "strided layout: threads (" << threads
                       << ") must be a positive multiple of 32";
  if (vec <= 0 || (vec & (vec - 1)) != 0)
    return emitError() << "strided layout: vec (" << vec << ") must be a power of two";
  return success();
}

int64_t WarpgroupStridedLayoutAttr::fragmentSize(VectorType block) const {
  return block.getNumElements() / getThreads();
}

bool WarpgroupStridedLayoutAttr::rowsInAWarp(VectorType block) const {
  int64_t runsPerRow = block.getShape().back() / getVec();
  return runsPerRow <= 32 && 32 % runsPerRow == 0;
}

//===----------------------------------------------------------------------===//
// StridedRowsLayoutAttr
//===----------------------------------------------------------------------===//

LogicalResult StridedRowsLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                            int64_t threads, int64_t vec, int64_t cols) {
  if (failed(WarpgroupStridedLayoutAttr::verify(emitError, threads, vec))) return failure();
  if (cols <= 0 || cols % vec != 0)
    return emitError() << "strided_rows layout: cols (" << cols << ") must be a multiple of vec ("
                       << vec << ")";
  int64_t lanes = cols / vec;
  if (lanes > 32 || 32 % lanes != 0)
    return emitError() << "strided_rows layout: a row of " << cols << " is " << lanes
                       << " runs; it must lie in one warp (a power of two of at most 32 runs)";
  return success();
}

//===----------------------------------------------------------------------===//
// TiledLayoutAttr
//===----------------------------------------------------------------------===//

namespace {

/// A tiled dim named by a negative index, as a position in a tiled shape of `rank`.
int64_t position(int64_t dim, int64_t rank) { return rank + dim; }

SmallVector<SmallVector<int64_t>> tiles(ArrayAttr tiling) {
  SmallVector<SmallVector<int64_t>> out;
  for (Attribute a : tiling)
    if (auto t = dyn_cast<DenseI64ArrayAttr>(a)) out.emplace_back(t.asArrayRef());
  return out;
}

}  // namespace

LogicalResult TiledLayoutAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                      ArrayAttr tiling, DenseI64ArrayAttr warpDims,
                                      DenseI64ArrayAttr laneDims, int64_t vectorDim) {
  if (tiling.empty()) return emitError() << "tiled layout: the tiling is empty";
  size_t previous = 0;
  for (auto [i, a] : llvm::enumerate(tiling)) {
    auto tile = dyn_cast<DenseI64ArrayAttr>(a);
    if (!tile || tile.empty())
      return emitError() << "tiled layout: tile " << i << " must be a non-empty array<i64>";
    if (i > 0 && tile.size() > previous)
      return emitError() << "tiled layout: tile " << i << " has rank " << tile.size()
                         << ", more than the tile it refines (" << previous << ")";
    for (int64_t e : tile.asArrayRef())
      if (e <= 0) return emitError() << "tiled layout: tile " << i << " has a non-positive extent";
    previous = tile.size();
  }
  for (int64_t d : warpDims.asArrayRef())
    if (d >= 0) return emitError() << "tiled layout: warp dim " << d << " must be negative";
  if (vectorDim >= 0) return emitError() << "tiled layout: vector_dim must be negative";
  SmallVector<int64_t> named(warpDims.asArrayRef());
  for (int64_t d : laneDims.asArrayRef())
    if (d < 0) named.push_back(d);
  named.push_back(vectorDim);
  llvm::sort(named);
  if (std::adjacent_find(named.begin(), named.end()) != named.end())
    return emitError()
           << "tiled layout: a tiled dim is named twice among warp, lane and vector dims";
  return success();
}

FailureOr<SmallVector<int64_t>> TiledLayoutAttr::tiledShape(ArrayRef<int64_t> shape,
                                                            std::string* error) const {
  SmallVector<int64_t> s(shape);
  for (const SmallVector<int64_t>& tile : tiles(getTiling())) {
    int64_t k = tile.size();
    if (static_cast<int64_t>(s.size()) < k) {
      if (error) *error = "a tile of rank " + std::to_string(k) + " applies to fewer dims";
      return failure();
    }
    int64_t base = s.size() - k;
    for (int64_t i = 0; i < k; ++i) {
      if (s[base + i] % tile[i] != 0) {
        if (error)
          *error = "tile extent " + std::to_string(tile[i]) + " does not divide dim extent " +
                   std::to_string(s[base + i]);
        return failure();
      }
      s[base + i] /= tile[i];
    }
    s.append(tile.begin(), tile.end());
  }
  return s;
}

/// The element's coordinates in the tiled shape: each tiling step splits a
/// coordinate c of a tiled dim into c / t (kept in place) and c % t (appended).
static SmallVector<int64_t> tiledCoords(TiledLayoutAttr layout, ArrayRef<int64_t> coords) {
  SmallVector<int64_t> c(coords);
  for (const SmallVector<int64_t>& tile : tiles(layout.getTiling())) {
    int64_t k = tile.size(), base = c.size() - k;
    for (int64_t i = 0; i < k; ++i) {
      c.push_back(c[base + i] % tile[i]);
      c[base + i] /= tile[i];
    }
  }
  return c;
}

TiledLayoutAttr::Owner TiledLayoutAttr::owner(ArrayRef<int64_t> shape,
                                              ArrayRef<int64_t> coords) const {
  SmallVector<int64_t> ts = *tiledShape(shape);
  SmallVector<int64_t> tc = tiledCoords(*this, coords);
  const int64_t rank = ts.size();
  Owner o{0, 0, 0};
  llvm::SmallDenseSet<int64_t> special;
  for (int64_t d : getWarpDims().asArrayRef()) {
    int64_t p = position(d, rank);
    o.warp = o.warp * ts[p] + tc[p];
    special.insert(p);
  }
  for (int64_t d : getLaneDims().asArrayRef()) {
    if (d > 0) {  // replicated over d lanes: the first of them
      o.lane *= d;
      continue;
    }
    int64_t p = position(d, rank);
    o.lane = o.lane * ts[p] + tc[p];
    special.insert(p);
  }
  int64_t v = position(getVectorDim(), rank);
  special.insert(v);
  for (int64_t p = 0; p < rank; ++p)
    if (!special.contains(p)) o.reg = o.reg * ts[p] + tc[p];
  o.reg = o.reg * ts[v] + tc[v];
  return o;
}

int64_t TiledLayoutAttr::registersPerThread(ArrayRef<int64_t> shape) const {
  SmallVector<int64_t> ts = *tiledShape(shape);
  int64_t n = std::accumulate(ts.begin(), ts.end(), int64_t{1}, std::multiplies<>());
  for (int64_t d : getWarpDims().asArrayRef()) n /= ts[position(d, ts.size())];
  for (int64_t d : getLaneDims().asArrayRef())
    if (d < 0) n /= ts[position(d, ts.size())];
  return n;
}

int64_t TiledLayoutAttr::threads(ArrayRef<int64_t> shape) const {
  SmallVector<int64_t> ts = *tiledShape(shape);
  int64_t warps = 1;
  for (int64_t d : getWarpDims().asArrayRef()) warps *= ts[position(d, ts.size())];
  return 32 * warps;
}

/// The element coordinates of tiled coordinates `tc` (the inverse of
/// tiledCoords): each tiling step, undone last first, folds the k appended
/// remainders back into the k dims they split.
static SmallVector<int64_t> untile(TiledLayoutAttr layout, ArrayRef<int64_t> tc) {
  SmallVector<int64_t> c(tc);
  SmallVector<SmallVector<int64_t>> steps = tiles(layout.getTiling());
  for (const SmallVector<int64_t>& tile : llvm::reverse(steps)) {
    int64_t k = tile.size(), rest = c.size() - k, base = rest - k;
    for (int64_t i = 0; i < k; ++i) c[base + i] = c[base + i] * tile[i] + c[rest + i];
    c.truncate(rest);
  }
  return c;
}

SmallVector<int64_t> TiledLayoutAttr::elementAt(ArrayRef<int64_t> shape, int64_t warp, int64_t lane,
                                                int64_t reg) const {
  SmallVector<int64_t> ts = *tiledShape(shape);
  const int64_t rank = ts.size();
  SmallVector<int64_t> tc(rank, 0);
  llvm::SmallDenseSet<int64_t> special;
  for (int64_t d : llvm::reverse(getWarpDims().asArrayRef())) {
    int64_t p = position(d, rank);
    tc[p] = warp % ts[p];
    warp /= ts[p];
    special.insert(p);
  }
  for (int64_t d : llvm::reverse(getLaneDims().asArrayRef())) {
    if (d > 0) {  // d lanes replicate: any of them
      lane /= d;
      continue;
    }
    int64_t p = position(d, rank);
    tc[p] = lane % ts[p];
    lane /= ts[p];
    special.insert(p);
  }
  int64_t v = position(getVectorDim(), rank);
  special.insert(v);
  tc[v] = reg % ts[v];
  reg /= ts[v];
  for (int64_t p = rank - 1; p >= 0; --p)
    if (!special.contains(p)) {
      tc[p] = reg % ts[p];
      reg /= ts[p];
    }
  return untile(*this, tc);
}

static SmallVector<TiledLayoutAttr::Digit> digits(TiledLayoutAttr layout, ArrayRef<int64_t> shape,
                                                  ArrayRef<int64_t> dims, bool lanes) {
  SmallVector<int64_t> ts = *layout.tiledShape(shape);
  SmallVector<TiledLayoutAttr::Digit> out;
  for (int64_t d : dims) {
    if (d > 0) {
      out.push_back({d, {}});
      continue;
    }
    out.push_back({ts[position(d, ts.size())], {}});
  }
  // One unit of digit i is the index whose only non-zero digit is i, 1.
  int64_t unit = 1;
  for (int64_t i = static_cast<int64_t>(out.size()) - 1; i >= 0; --i) {
    if (dims[i] < 0)
      out[i].step =
          lanes ? layout.elementAt(shape, 0, unit, 0) : layout.elementAt(shape, unit, 0, 0);
    unit *= out[i].extent;
  }
  return out;
}

SmallVector<TiledLayoutAttr::Digit> TiledLayoutAttr::warpDigits(ArrayRef<int64_t> shape) const {
  return digits(*this, shape, getWarpDims().asArrayRef(), /*lanes=*/false);
}

SmallVector<TiledLayoutAttr::Digit> TiledLayoutAttr::laneDigits(ArrayRef<int64_t> shape) const {
  return digits(*this, shape, getLaneDims().asArrayRef(), /*lanes=*/true);
}

static TiledLayoutAttr tiled(MLIRContext* ctx, ArrayRef<ArrayRef<int64_t>> tiling,
                             ArrayRef<int64_t> warps, ArrayRef<int64_t> lanes, int64_t vector) {
  SmallVector<Attribute> t;
  for (ArrayRef<int64_t> tile : tiling) t.push_back(DenseI64ArrayAttr::get(ctx, tile));
  return TiledLayoutAttr::get(ctx, ArrayAttr::get(ctx, t), DenseI64ArrayAttr::get(ctx, warps),
                              DenseI64ArrayAttr::get(ctx, lanes), vector);
}

// The named instances; PallasLayouts.td has the worked example of each.
// With W > 1 warpgroups the 64-row tile index (dim -10 of the accumulator,
// -5 of the rows) becomes the most significant warp digit, so warpgroup w
// holds rows [64 w, 64 w + 64): the layout then spans exactly [64 W, N].
TiledLayoutAttr TiledLayoutAttr::getWgmmaAccumulator(MLIRContext* ctx, int64_t warpgroups) {
  SmallVector<int64_t> warps =
      warpgroups > 1 ? SmallVector<int64_t>{-10, -8} : SmallVector<int64_t>{-8};
  return tiled(ctx, {{64, 8}, {16, 8}, {8, 8}, {1, 2}}, warps, {-4, -3}, -1);
}
TiledLayoutAttr TiledLayoutAttr::getWgmmaRow(MLIRContext* ctx, int64_t warpgroups) {
  SmallVector<int64_t> warps =
      warpgroups > 1 ? SmallVector<int64_t>{-5, -4} : SmallVector<int64_t>{-4};
  return tiled(ctx, {{64}, {16}, {8}, {1}}, warps, {-2, 4}, -1);
}
TiledLayoutAttr TiledLayoutAttr::getWgmmaRowKeepdims(MLIRContext* ctx, int64_t warpgroups) {
  SmallVector<int64_t> warps =
      warpgroups > 1 ? SmallVector<int64_t>{-10, -8} : SmallVector<int64_t>{-8};
  return tiled(ctx, {{64, 1}, {16, 1}, {8, 1}, {1, 1}}, warps, {-4, 4}, -1);
}
TiledLayoutAttr TiledLayoutAttr::getMmaSyncA(MLIRContext* ctx) {
  return tiled(ctx, {{16, 16}, {16, 8}, {8, 8}, {1, 2}}, {}, {-4, -3}, -1);
}
TiledLayoutAttr TiledLayoutAttr::getMmaSyncB(MLIRContext* ctx) {
  return tiled(ctx, {{8, 8}, {2, 1}}, {}, {-3, -4}, -2);
}
TiledLayoutAttr TiledLayoutAttr::getMmaSyncC(MLIRContext* ctx) {
  return tiled(ctx, {{16, 8}, {8, 8}, {1, 2}}, {}, {-4, -3}, -1);
}

// The named tiled layouts (PallasLayouts.td) against NVIDIA's fragment tables
// in the PTX ISA (wgmma m64nNk16 f32 accumulator; mma.sync m16n8k16 A, B, C),
// written out here as closed forms per (lane, register), and the strided
// layout's worked example. Every element of each fragment is checked.
#include "pallas/Dialect/PallasDialect.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <set>

namespace {

using mlir::pallas::TiledLayoutAttr;

struct Element {
  int64_t row, col;
};

class Layouts : public ::testing::Test {
 protected:
  Layouts() { ctx.loadDialect<mlir::pallas::PallasDialect>(); }

  /// Checks that `layout` on `shape` puts every element where `expected`
  /// (warp, lane, register -> element) says, and that no element is missed.
  void expectMatches(
      TiledLayoutAttr layout, std::vector<int64_t> shape, int64_t warps, int64_t registers,
      const std::function<Element(int64_t warp, int64_t lane, int64_t reg)>& expected) {
    std::string error;
    ASSERT_TRUE(mlir::succeeded(layout.tiledShape(shape, &error))) << error;
    EXPECT_EQ(layout.registersPerThread(shape), registers);
    EXPECT_EQ(layout.threads(shape), 32 * warps);
    std::set<std::pair<int64_t, int64_t>> seen;
    for (int64_t w = 0; w < warps; ++w)
      for (int64_t l = 0; l < 32; ++l)
        for (int64_t r = 0; r < registers; ++r) {
          Element e = expected(w, l, r);
          auto owner = layout.owner(shape, {e.row, e.col});
          EXPECT_EQ(owner.warp, w) << "element (" << e.row << ", " << e.col << ")";
          EXPECT_EQ(owner.lane, l) << "element (" << e.row << ", " << e.col << ")";
          EXPECT_EQ(owner.reg, r) << "element (" << e.row << ", " << e.col << ")";
          // The inverse, directly and as the lowering computes it (digits of
          // the warp and lane index plus the register's own coordinates).
          auto at = layout.elementAt(shape, w, l, r);
          EXPECT_EQ(at[0], e.row) << "warp " << w << " lane " << l << " reg " << r;
          EXPECT_EQ(at[1], e.col) << "warp " << w << " lane " << l << " reg " << r;
          auto sum = layout.elementAt(shape, 0, 0, r);
          auto addDigits = [&](const auto& digits, int64_t index) {
            for (int64_t i = static_cast<int64_t>(digits.size()) - 1; i >= 0; --i) {
              int64_t digit = index % digits[i].extent;
              index /= digits[i].extent;
              for (size_t d = 0; d < digits[i].step.size(); ++d)
                sum[d] += digit * digits[i].step[d];
            }
          };
          addDigits(layout.warpDigits(shape), w);
          addDigits(layout.laneDigits(shape), l);
          EXPECT_EQ(sum[0], e.row) << "digits: warp " << w << " lane " << l << " reg " << r;
          EXPECT_EQ(sum[1], e.col) << "digits: warp " << w << " lane " << l << " reg " << r;
          seen.insert({e.row, e.col});
        }
    EXPECT_EQ(static_cast<int64_t>(seen.size()), shape[0] * shape[1]);
  }

  mlir::MLIRContext ctx;
};

// PTX ISA, "Register fragment for accumulator D" of wgmma .m64nNk16 (f32):
// row = 16 * warp + lane / 4 + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * (lane % 4) + i % 2.
TEST_F(Layouts, WgmmaAccumulatorMatchesPtx) {
  for (int64_t n : {8, 64, 256})
    expectMatches(
        TiledLayoutAttr::getWgmmaAccumulator(&ctx), {64, n}, 4, n / 2,
        [](int64_t w, int64_t l, int64_t i) {
          return Element{16 * w + l / 4 + 8 * ((i / 2) % 2), 8 * (i / 4) + 2 * (l % 4) + i % 2};
        });
}

// A [128, N] accumulator (two m64 instructions' worth, one warpgroup): the
// second 64 rows follow the first in registers, each half in PTX's order.
TEST_F(Layouts, WgmmaAccumulatorOfTwoInstructionsStacksRegisters) {
  for (int64_t n : {8, 128})
    expectMatches(TiledLayoutAttr::getWgmmaAccumulator(&ctx), {128, n}, 4, n,
                  [n](int64_t w, int64_t l, int64_t i) {
                    int64_t half = i / (n / 2), j = i % (n / 2);
                    return Element{64 * half + 16 * w + l / 4 + 8 * ((j / 2) % 2),
                                   8 * (j / 4) + 2 * (l % 4) + j % 2};
                  });
}

// Two consumer warpgroups: warpgroup w (warps 4 w .. 4 w + 3) holds rows
// [64 w, 64 w + 64) in PTX's order, as if it were alone with a [64, N]
// accumulator; a [64, N] or [256, N] block does not fit it.
TEST_F(Layouts, WgmmaAccumulatorOfTwoWarpgroupsSplitsTheRows) {
  for (int64_t n : {8, 256})
    expectMatches(TiledLayoutAttr::getWgmmaAccumulator(&ctx, 2), {128, n}, 8, n / 2,
                  [](int64_t w, int64_t l, int64_t i) {
                    return Element{64 * (w / 4) + 16 * (w % 4) + l / 4 + 8 * ((i / 2) % 2),
                                   8 * (i / 4) + 2 * (l % 4) + i % 2};
                  });
  auto layout = TiledLayoutAttr::getWgmmaAccumulator(&ctx, 2);
  auto o = layout.owner({128, 256}, {81, 10});  // PallasLayouts.td's worked example
  EXPECT_EQ(o.warp, 5);
  EXPECT_EQ(o.lane, 5);
  EXPECT_EQ(o.reg, 4);
  EXPECT_EQ(layout.threads({64, 64}), 128);  // not the program's 256: rejected by the lowering
  EXPECT_EQ(layout.threads({256, 64}), 512);
  auto row = TiledLayoutAttr::getWgmmaRow(&ctx, 2);
  for (int64_t r = 0; r < 128; ++r) {
    auto a = layout.owner({128, 8}, {r, 0});
    auto ro = row.owner({128}, {r});
    EXPECT_EQ(ro.warp, a.warp) << "row " << r;
    EXPECT_EQ(ro.lane, a.lane & ~3) << "row " << r;
    EXPECT_EQ(ro.reg, (a.reg / 2) % 2) << "row " << r;
  }
}

// The worked example in PallasLayouts.td: thread 37 (warp 1, lane 5).
TEST_F(Layouts, WgmmaAccumulatorWorkedExample) {
  auto layout = TiledLayoutAttr::getWgmmaAccumulator(&ctx);
  auto o = layout.owner({64, 64}, {17, 10});
  EXPECT_EQ(o.warp, 1);
  EXPECT_EQ(o.lane, 5);
  EXPECT_EQ(o.reg, 4);
  o = layout.owner({64, 64}, {25, 3});
  EXPECT_EQ(o.reg, 3);
}

// One value per accumulator row, in the four lanes (and the register) that hold the row.
TEST_F(Layouts, WgmmaRowFollowsTheAccumulatorRows) {
  auto row = TiledLayoutAttr::getWgmmaRow(&ctx);
  auto acc = TiledLayoutAttr::getWgmmaAccumulator(&ctx);
  EXPECT_EQ(row.registersPerThread({64}), 2);
  for (int64_t r = 0; r < 64; ++r) {
    auto a = acc.owner({64, 8}, {r, 0});
    auto o = row.owner({64}, {r});
    EXPECT_EQ(o.warp, a.warp) << "row " << r;
    EXPECT_EQ(o.lane, a.lane & ~3) << "row " << r;  // the first of the row's 4 lanes
    EXPECT_EQ(o.reg, (a.reg / 2) % 2) << "row " << r;
  }
}

// The same values kept as [R, 1]: held exactly where wgmmaRow holds them,
// one and two warpgroups.
TEST_F(Layouts, WgmmaRowKeepdimsIsWgmmaRow) {
  for (int64_t w : {1, 2}) {
    auto kept = TiledLayoutAttr::getWgmmaRowKeepdims(&ctx, w);
    auto row = TiledLayoutAttr::getWgmmaRow(&ctx, w);
    EXPECT_EQ(kept.registersPerThread({64 * w, 1}), 2);
    EXPECT_EQ(kept.threads({64 * w, 1}), 128 * w);
    for (int64_t r = 0; r < 64 * w; ++r) {
      auto k = kept.owner({64 * w, 1}, {r, 0});
      auto o = row.owner({64 * w}, {r});
      EXPECT_EQ(k.warp, o.warp) << "row " << r;
      EXPECT_EQ(k.lane, o.lane) << "row " << r;
      EXPECT_EQ(k.reg, o.reg) << "row " << r;
    }
  }
}

// mma.m16n8k16 A (row-major 16x16 f16): a0..a7.
TEST_F(Layouts, MmaSyncAMatchesPtx) {
  expectMatches(TiledLayoutAttr::getMmaSyncA(&ctx), {16, 16}, 1, 8,
                [](int64_t, int64_t l, int64_t i) {
                  return Element{l / 4 + 8 * ((i / 2) % 2), 2 * (l % 4) + i % 2 + 8 * (i / 4)};
                });
}

// mma.m16n8k16 B (16x8, K x N): b0..b3.
TEST_F(Layouts, MmaSyncBMatchesPtx) {
  expectMatches(TiledLayoutAttr::getMmaSyncB(&ctx), {16, 8}, 1, 4,
                [](int64_t, int64_t l, int64_t i) {
                  return Element{2 * (l % 4) + i % 2 + 8 * (i / 2), l / 4};
                });
}

// mma.m16n8k16 C/D (16x8 f32): c0..c3.
TEST_F(Layouts, MmaSyncCMatchesPtx) {
  expectMatches(TiledLayoutAttr::getMmaSyncC(&ctx), {16, 8}, 1, 4,
                [](int64_t, int64_t l, int64_t i) {
                  return Element{l / 4 + 8 * (i / 2), 2 * (l % 4) + i % 2};
                });
}

TEST_F(Layouts, TilesThatDoNotDivideAreRejected) {
  std::string error;
  EXPECT_TRUE(
      mlir::failed(TiledLayoutAttr::getWgmmaAccumulator(&ctx).tiledShape({64, 12}, &error)));
  EXPECT_EQ(error, "tile extent 8 does not divide dim extent 12");
}

// Passes.td's worked example: 8x256 f32, threads 128, vec 4.
TEST_F(Layouts, StridedWorkedExample) {
  auto s = mlir::pallas::WarpgroupStridedLayoutAttr::get(&ctx, 128, 4);
  auto block = mlir::VectorType::get({8, 256}, mlir::Float32Type::get(&ctx));
  EXPECT_EQ(s.fragmentSize(block), 16);
  EXPECT_FALSE(s.rowsInAWarp(block));  // 64 runs per row: two warps
  EXPECT_TRUE(s.rowsInAWarp(mlir::VectorType::get({16, 128}, mlir::Float32Type::get(&ctx))));
}

}  // namespace

// The test-only kernels of features.cc on the host and CUDA backends against
// float64 (or exact integer) references on fresh random data.

#include "test_support.h"

#include <pallas/detail/kernel_image.h>
#include <functional>

#include <pallas/kernels/big_scratch.h>
#include <pallas/kernels/block_prefix_chain.h>
#include <pallas/kernels/block_prefix_tickets.h>
#include <pallas/kernels/block_stats.h>
#include <pallas/kernels/chunk_sum_inside.h>
#include <pallas/kernels/chunk_sum_overpromise.h>
#include <pallas/kernels/cluster_ring_sum.h>
#include <pallas/kernels/cluster_ring_sum_nolastbarrier.h>
#include <pallas/kernels/cluster_ring_sum_unordered.h>
#include <pallas/kernels/coordinates.h>
#include <pallas/kernels/dot_n_major_s64.h>
#include <pallas/kernels/dot_n_major_t64.h>
#include <pallas/kernels/dot_n_major_t8.h>
#include <pallas/kernels/explicit_row_blocks.h>
#include <pallas/kernels/explicit_row_blocks_noarrive.h>
#include <pallas/kernels/explicit_row_blocks_nostorewait.h>
#include <pallas/kernels/explicit_row_blocks_nowait.h>
#include <pallas/kernels/int_mix.h>
#include <pallas/kernels/math_zoo.h>
#include <pallas/kernels/persistent_wgmma.h>
#include <pallas/kernels/persistent_wgmma_cluster.h>
#include <pallas/kernels/persistent_wgmma_stream_k.h>
#include <pallas/kernels/pipelined_axpb_d1.h>
#include <pallas/kernels/pipelined_axpb_d2.h>
#include <pallas/kernels/pipelined_axpb_d3.h>
#include <pallas/kernels/pipelined_axpb_d4.h>
#include <pallas/kernels/pipelined_chunk_sum_d1.h>
#include <pallas/kernels/pipelined_chunk_sum_d2.h>
#include <pallas/kernels/pipelined_chunk_sum_d3.h>
#include <pallas/kernels/pipelined_chunk_sum_d4.h>
#include <pallas/kernels/pipelined_chunk_sum_d6.h>
#include <pallas/kernels/pipelined_even_chunks_d2.h>
#include <pallas/kernels/pipelined_even_chunks_ws.h>
#include <pallas/kernels/pipelined_row_dots.h>
#include <pallas/kernels/pipelined_row_scale.h>
#include <pallas/kernels/pipelined_wgmma.h>
#include <pallas/kernels/pipelined_wgmma_nodelay.h>
#include <pallas/kernels/pipelined_wgmma_ws.h>
#include <pallas/kernels/pipelined_wgmma_ws2.h>
#include <pallas/kernels/pipelined_wgmma_ws_nodelay.h>
#include <pallas/kernels/power.h>
#include <pallas/kernels/row_sums_sequential.h>
#include <pallas/kernels/scratch_and_while.h>
#include <pallas/kernels/stream_k_walk.h>
#include <pallas/kernels/swap_halves.h>
#include <pallas/kernels/tile_column_softmax_16x128.h>
#include <pallas/kernels/tile_column_softmax_8x256.h>
#include <pallas/kernels/tile_softmax_16x128.h>
#include <pallas/kernels/tile_softmax_2x4096.h>
#include <pallas/kernels/tile_softmax_64x32.h>
#include <pallas/kernels/transposed_views.h>
#include <pallas/kernels/wait_for_next.h>
#include <pallas/kernels/wgmma_m_major_a_t64.h>
#include <pallas/kernels/wgmma_m_major_a_t8.h>
#include <pallas/kernels/wgmma_register_a.h>

namespace pallas::testing {
namespace {

class FeaturesTest : public BackendTest {};

double math_zoo_ref(double v) {
  double a = std::exp(v * 0.5) + std::log(std::abs(v) + 1.0);
  double b = std::exp2(v * 0.25) - 1.0 / std::sqrt(std::abs(v) + 0.5);
  double s = v > 0 ? a : b;
  double t = std::sqrt(std::abs(v)) * std::erf(v) + std::tanh(v) / (1.0 + std::exp(-v));
  return s + t + std::max(v, -v * 0.5) * std::min(v, 1.0) - v / (std::abs(v) + 1.0);
}

TEST_P(FeaturesTest, MathFunctionsCompareAndSelect) {
  for (int64_t n : {1, 1023, 1024, 1025, 65537}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<float> x(GetParam(), n), out(GetParam(), n);
    x.fill_random(rng, -5, 5);
    out.poison();
    x.upload();
    out.upload();
    ASSERT_TRUE(kernels::math_zoo(TensorView<const float, 1>(x.data(), {n}),
                                  TensorView<float, 1>(out.data(), {n}), launch())
                    .ok());
    out.download();
    for (int64_t i = 0; i < n; ++i)
      if (!expect_close(out.host()[i], math_zoo_ref(x.host()[i]), "element " + std::to_string(i)))
        break;
  }
}

TEST_P(FeaturesTest, SqueezedRowsIotaAndProgramIds) {
  struct Shape {
    int64_t rows, cols, stride;
  };
  for (Shape sh : {Shape{1, 1, 1}, Shape{3, 511, 511}, Shape{5, 512, 512}, Shape{4, 1300, 1307}}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " stride " +
                 std::to_string(sh.stride) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<float> x(GetParam(), sh.rows * sh.stride), out(GetParam(), sh.rows * sh.stride);
    x.fill_random(rng, -1, 1);
    out.poison();
    x.upload();
    out.upload();
    ASSERT_TRUE(kernels::coordinates(
                    TensorView<const float, 2>(x.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
                    TensorView<float, 2>(out.data(), {sh.rows, sh.cols}, {sh.stride, 1}), launch())
                    .ok());
    out.download();
    bool ok = true;
    for (int64_t r = 0; r < sh.rows && ok; ++r)
      for (int64_t c = 0; c < sh.cols && ok; ++c)
        ok = expect_close(out.host()[r * sh.stride + c],
                          2.0 * x.host()[r * sh.stride + c] + c + double(r) * sh.rows,
                          "[" + std::to_string(r) + ", " + std::to_string(c) + "]");
  }
}

template <class T>
void check_swap_halves(Backend backend) {
  for (int64_t n : {1, 127, 128, 129, 255, 256, 257, 1000, 4096 + 200}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string(dtype_name<T>()) + " n=" + std::to_string(n) +
                 " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<T> x(backend, n), out(backend, n);
    x.fill_random(rng, -3, 3);
    out.poison();
    x.upload();
    out.upload();
    ASSERT_TRUE(kernels::swap_halves(TensorView<const T, 1>(x.data(), {n}),
                                     TensorView<T, 1>(out.data(), {n}), Launch{backend, nullptr})
                    .ok());
    out.download();
    for (int64_t i = 0; i < n; ++i) {
      int64_t block = i / 256 * 256, p = i % 256;
      int64_t src = block + (p < 128 ? p + 128 : p - 128);
      double want = src < n ? to_float(x.host()[src]) : 0.0;  // masked loads read 0
      if (!expect_close(out.host()[i], want, "element " + std::to_string(i))) break;
    }
  }
}

TEST_P(FeaturesTest, StaticSlicesWithEdgeMasking) {
  check_swap_halves<float>(GetParam());
  check_swap_halves<bfloat16>(GetParam());
}

TEST_P(FeaturesTest, ForiCarriesABlock) {
  for (int32_t k : {0, 1, 3, 7}) {
    const int64_t n = 3000;
    uint32_t seed = fresh_seed();
    SCOPED_TRACE("k=" + std::to_string(k) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<float> x(GetParam(), n), out(GetParam(), n);
    x.fill_random(rng, -1.5f, 1.5f);
    out.poison();
    x.upload();
    out.upload();
    ASSERT_TRUE(kernels::power(TensorView<const float, 1>(x.data(), {n}), k,
                               TensorView<float, 1>(out.data(), {n}), launch())
                    .ok());
    out.download();
    for (int64_t i = 0; i < n; ++i)
      if (!expect_close(out.host()[i], std::pow(double(x.host()[i]), k),
                        "element " + std::to_string(i)))
        break;
  }
}

TEST_P(FeaturesTest, Int32Arithmetic) {
  for (int64_t n : {1, 1023, 1025, 5000}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> dist(-100000, 100000);
    Array<int32_t> x(GetParam(), n), y(GetParam(), n), out(GetParam(), n);
    for (int64_t i = 0; i < n; ++i) {
      x.host()[i] = dist(rng);
      y.host()[i] = dist(rng);
      out.host()[i] = -123456789;
    }
    x.upload();
    y.upload();
    out.upload();
    ASSERT_TRUE(kernels::int_mix(TensorView<const int32_t, 1>(x.data(), {n}),
                                 TensorView<const int32_t, 1>(y.data(), {n}),
                                 TensorView<int32_t, 1>(out.data(), {n}), launch())
                    .ok());
    out.download();
    for (int64_t i = 0; i < n; ++i) {
      int32_t a = x.host()[i], b = y.host()[i];
      int32_t want = std::max(a, b) * 3 - std::min(a, b) / 2 + std::abs(a - b) + (a < b ? a : -b);
      ASSERT_EQ(out.host()[i], want) << "element " << i << " (" << a << ", " << b << ")";
    }
  }
}

template <class T>
void check_block_stats(Backend backend) {
  for (int64_t n : {1, 1000, 1024, 1025, 5000}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::string(dtype_name<T>()) + " n=" + std::to_string(n) +
                 " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<T> x(backend, n), out(backend, n);
    std::uniform_int_distribution<int> dist(-1000, 1000);
    for (T& v : x.host()) v = static_cast<T>(dist(rng)) / T(8);  // exact in f32 sums
    for (T& v : out.host()) v = T(-77777);
    x.upload();
    out.upload();
    ASSERT_TRUE(kernels::block_stats(TensorView<const T, 1>(x.data(), {n}),
                                     TensorView<T, 1>(out.data(), {n}), Launch{backend, nullptr})
                    .ok());
    out.download();
    for (int64_t b = 0; b < n; b += 1024) {
      int64_t e = std::min<int64_t>(n, b + 1024);
      // Masked elements past the array edge read as 0 and take part.
      T s = 0, hi = e - b < 1024 ? T(0) : x.host()[b], lo = hi;
      for (int64_t i = b; i < e; ++i) {
        s += x.host()[i];
        hi = std::max(hi, x.host()[i]);
        lo = std::min(lo, x.host()[i]);
      }
      for (int64_t i = b; i < e; ++i) ASSERT_EQ(out.host()[i], s + 2 * hi - lo) << "element " << i;
    }
  }
}

TEST_P(FeaturesTest, ReductionsToScalars) {
  check_block_stats<float>(GetParam());
  check_block_stats<int32_t>(GetParam());
}

// Both prefix kernels hand a running total from program to program through
// semaphores; integers / 8 keep every f32 sum exact.
template <class Kernel>
void check_block_prefix(Backend backend, Launch launch, Kernel kernel) {
  for (int64_t n : {1, 1024, 1025, 9000}) {
    for (uint64_t schedule : {0, 1, 2}) {
      uint32_t seed = fresh_seed();
      SCOPED_TRACE("n=" + std::to_string(n) + " schedule=" + std::to_string(schedule) +
                   " seed=" + std::to_string(seed));
      std::mt19937 rng(seed);
      Array<float> x(backend, n), out(backend, n);
      std::uniform_int_distribution<int> dist(-1000, 1000);
      for (float& v : x.host()) v = static_cast<float>(dist(rng)) / 8;
      out.poison();
      x.upload();
      out.upload();
      launch.emulator.schedule_seed = schedule;
      // Twice: the second launch finds the pool's semaphores back at zero.
      for (int round = 0; round < 2; ++round) {
        Status s = kernel(TensorView<const float, 1>(x.data(), {n}),
                          TensorView<float, 1>(out.data(), {n}), launch);
        ASSERT_TRUE(s.ok()) << s.message();
      }
      out.download();
      double before = 0, block = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (i % 1024 == 0) {
          before += block;
          block = 0;
        }
        block += x.host()[i];
        ASSERT_EQ(out.host()[i], static_cast<float>(x.host()[i] + before)) << "element " << i;
      }
      if (backend != Backend::kEmulator) break;  // schedules matter only there
    }
  }
}

TEST_P(FeaturesTest, SemaphoresHandOffInTicketOrder) {
  check_block_prefix(GetParam(), launch(), [](auto x, auto out, const Launch& l) {
    return kernels::block_prefix_tickets(x, out, l);
  });
}

TEST_P(FeaturesTest, ProgramScopedSemaphoresInGridOrder) {
  check_block_prefix(GetParam(), launch(), [](auto x, auto out, const Launch& l) {
    return kernels::block_prefix_chain(x, out, l);
  });
}

// Program p waits for program p + 1's signal.
TEST_P(FeaturesTest, WaitForALaterProgram) {
  const int64_t n = 5 * 128;
  Array<float> x(GetParam(), n), out(GetParam(), n);
  std::mt19937 rng(fresh_seed());
  x.fill_random(rng, -1, 1);
  out.poison();
  x.upload();
  out.upload();
  Launch l = launch();
  l.emulator.concurrent_programs = 5;  // every program resident, as on a GPU
  Status s = kernels::wait_for_next(TensorView<const float, 1>(x.data(), {n}),
                                    TensorView<float, 1>(out.data(), {n}), l);
  if (GetParam() == Backend::kHost) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(),
              "wait_for_next: a program waits for semaphore 'flags'[0] to reach 1 but it is 0; "
              "the host backend runs programs one after another in grid order, so only earlier "
              "programs can signal it");
    return;
  }
  ASSERT_TRUE(s.ok()) << s.message();
  out.download();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out.host()[i], x.host()[i] + 1.0f) << i;
  if (GetParam() != Backend::kEmulator) return;
  // With fewer resident programs than the chain needs, the emulator reports the deadlock.
  l.emulator.concurrent_programs = 2;
  Status stuck = kernels::wait_for_next(TensorView<const float, 1>(x.data(), {n}),
                                        TensorView<float, 1>(out.data(), {n}), l);
  EXPECT_EQ(stuck.code(), StatusCode::kEmulatorCheckFailed);
  EXPECT_NE(stuck.message().find("deadlock"), std::string::npos) << stuck.message();
}

TEST_P(FeaturesTest, ArbitraryAxisAccumulatesInScratch) {
  struct Shape {
    int64_t rows, cols, stride;
  };
  for (Shape sh : {Shape{1, 1, 1}, Shape{3, 512, 512}, Shape{2, 513, 515}, Shape{4, 3000, 3000}}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::to_string(sh.rows) + "x" + std::to_string(sh.cols) +
                 " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<float> x(GetParam(), sh.rows * sh.stride), out(GetParam(), sh.rows);
    std::uniform_int_distribution<int> dist(-1000, 1000);
    for (float& v : x.host()) v = static_cast<float>(dist(rng)) / 8;
    out.poison();
    x.upload();
    out.upload();
    Status s = kernels::row_sums_sequential(
        TensorView<const float, 2>(x.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
        TensorView<float, 1>(out.data(), {sh.rows}), launch());
    ASSERT_TRUE(s.ok()) << s.message();
    out.download();
    for (int64_t r = 0; r < sh.rows; ++r) {
      double want = 0;
      for (int64_t c = 0; c < sh.cols; ++c) want += x.host()[r * sh.stride + c];
      ASSERT_EQ(out.host()[r], static_cast<float>(want)) << "row " << r;
    }
  }
}

// Full chunks loaded with Ref::load_inside, the last one masked; a planted
// twin that calls the partial chunk inside too is caught by the emulator.
TEST_P(FeaturesTest, LoadInsideIsCheckedByTheEmulator) {
  for (int64_t n : {1, 2048, 5000, 6144}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<float> x(GetParam(), n), out(GetParam(), 1);
    std::uniform_int_distribution<int> dist(-1000, 1000);
    for (float& v : x.host()) v = static_cast<float>(dist(rng)) / 8;  // exact sums
    double want = 0;
    for (float v : x.host()) want += v;
    x.upload();
    for (bool planted : {false, true}) {
      if (planted && GetParam() == Backend::kCuda) continue;  // it would read past the end
      out.poison();
      out.upload();
      TensorView<const float, 1> in(x.data(), {n});
      TensorView<float, 1> to(out.data(), {1});
      Status s = planted ? kernels::chunk_sum_overpromise(in, to, launch())
                         : kernels::chunk_sum_inside(in, to, launch());
      if (planted && GetParam() == Backend::kEmulator && n % 2048 != 0) {
        EXPECT_EQ(s.code(), StatusCode::kEmulatorCheckFailed);
        EXPECT_NE(s.message().find("out-of-bounds load"), std::string::npos) << s.message();
        continue;
      }
      ASSERT_TRUE(s.ok()) << (planted ? "planted: " : "") << s.message();
      out.download();
      EXPECT_EQ(out.host()[0], static_cast<float>(want)) << (planted ? "planted" : "");
    }
  }
}

// 160 KiB of shared memory per program: the kernel's shared-memory plan is
// passed at launch (CUDA raises the program's limit; the emulator allocates it).
TEST_P(FeaturesTest, ScratchOf160KiB) {
  EXPECT_GE(kernels::big_scratch_metadata().targets[0].shared_bytes, 160 * 1024);
  for (int64_t n : {1, 2048, 3000}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<float> x(GetParam(), n), out(GetParam(), n);
    x.fill_random(rng, -1.0, 1.0);
    out.poison();
    x.upload();
    out.upload();
    Status s = kernels::big_scratch(TensorView<const float, 1>(x.data(), {n}),
                                    TensorView<float, 1>(out.data(), {n}), launch());
    ASSERT_TRUE(s.ok()) << s.message();
    out.download();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t b = i / 2048 * 2048, j = i % 2048;
      const int64_t from = b + (j < 1024 ? 1024 + j : j - 1024);
      const float xv = from < n ? x.host()[from] : 0.0f;
      const float want = 19.0f * xv + (j < 1024 ? 171.0f : 190.0f);
      ASSERT_NEAR(out.host()[i], want, 1e-4f * (1.0f + std::abs(want))) << "element " << i;
    }
  }
}

TEST_P(FeaturesTest, ScratchAcrossThreadsAndWhileLoop) {
  for (int64_t n : {1, 512, 700, 2048}) {
    uint32_t seed = fresh_seed();
    SCOPED_TRACE("n=" + std::to_string(n) + " seed=" + std::to_string(seed));
    std::mt19937 rng(seed);
    const int64_t blocks = (n + 511) / 512;
    Array<float> x(GetParam(), n), out(GetParam(), n);
    Array<int32_t> steps(GetParam(), blocks);
    x.fill_random(rng, -0.01, 0.01);
    if (n == 2048) std::fill(x.host().begin() + 512, x.host().begin() + 1024, 0.0f);  // 64 steps
    out.poison();
    for (int32_t& v : steps.host()) v = -1;
    x.upload();
    out.upload();
    steps.upload();
    Status s = kernels::scratch_and_while(TensorView<const float, 1>(x.data(), {n}),
                                          TensorView<float, 1>(out.data(), {n}),
                                          TensorView<int32_t, 1>(steps.data(), {blocks}), launch());
    ASSERT_TRUE(s.ok()) << s.message();
    out.download();
    steps.download();
    for (int64_t b = 0; b < blocks; ++b) {
      float hi = 0;
      for (int64_t i = b * 512; i < std::min(n, (b + 1) * 512); ++i)
        hi = std::max(hi, std::abs(x.host()[i]));
      int32_t k = 0;
      while (hi < 1 && k < 64) {
        hi *= 2;
        ++k;
      }
      ASSERT_EQ(steps.host()[b], k) << "block " << b;
      for (int64_t i = b * 512; i < std::min(n, (b + 1) * 512); ++i) {
        const int64_t from = b * 512 + (i - b * 512 + 256) % 512;
        const float want = from < n ? std::ldexp(x.host()[from], k) : 0.0f;
        ASSERT_EQ(out.host()[i], want) << "element " << i;
      }
    }
  }
}

// Reductions that keep the row axis (several rows per program).
template <class Kernel>
void check_tile_softmax(Backend backend, int64_t max_cols, Kernel kernel) {
  for (int64_t rows : {1, 5, 70, 131}) {
    for (int64_t cols : {int64_t{1}, max_cols / 2 + 1, max_cols}) {
      uint32_t seed = fresh_seed();
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) +
                   " seed=" + std::to_string(seed));
      std::mt19937 rng(seed);
      Array<float> x(backend, rows * cols), y(backend, rows * cols), m(backend, rows);
      x.fill_random(rng, -8, 8);
      y.poison();
      m.poison();
      x.upload();
      y.upload();
      m.upload();
      Status s = kernel(TensorView<const float, 2>(x.data(), {rows, cols}),
                        TensorView<float, 2>(y.data(), {rows, cols}),
                        TensorView<float, 1>(m.data(), {rows}), Launch{backend, nullptr});
      ASSERT_TRUE(s.ok()) << s.message();
      y.download();
      m.download();
      for (int64_t r = 0; r < rows; ++r) {
        const float* row = x.host().data() + r * cols;
        double hi = *std::max_element(row, row + cols), total = 0;
        for (int64_t c = 0; c < cols; ++c) total += std::exp(double(row[c]) - hi);
        ASSERT_EQ(m.host()[r], static_cast<float>(hi)) << "row " << r;
        for (int64_t c = 0; c < cols; ++c)
          if (!expect_close(y.host()[r * cols + c], std::exp(double(row[c]) - hi) / total,
                            "element " + std::to_string(r) + ", " + std::to_string(c)))
            return;
      }
    }
  }
}

TEST_P(FeaturesTest, RowReductionsKeepingDims) {
  check_tile_softmax(GetParam(), 128, [](auto... a) { return kernels::tile_softmax_16x128(a...); });
  check_tile_softmax(GetParam(), 32, [](auto... a) { return kernels::tile_softmax_64x32(a...); });
  check_tile_softmax(GetParam(), 4096,
                     [](auto... a) { return kernels::tile_softmax_2x4096(a...); });
}

// y = a softmax down each column of every R x C tile, over its rows inside the array.
template <class Kernel>
void check_column_softmax(Backend backend, int64_t tile_rows, int64_t tile_cols, Kernel kernel) {
  for (int64_t rows : {int64_t{1}, tile_rows / 2 + 1, int64_t{70}, int64_t{131}}) {
    for (int64_t cols : {int64_t{1}, tile_cols / 2 + 1, tile_cols, 2 * tile_cols + 3}) {
      uint32_t seed = fresh_seed();
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols) +
                   " seed=" + std::to_string(seed));
      std::mt19937 rng(seed);
      Array<float> x(backend, rows * cols), y(backend, rows * cols);
      x.fill_random(rng, -8, 8);
      y.poison();
      x.upload();
      y.upload();
      Status s = kernel(TensorView<const float, 2>(x.data(), {rows, cols}),
                        TensorView<float, 2>(y.data(), {rows, cols}), Launch{backend, nullptr});
      ASSERT_TRUE(s.ok()) << s.message();
      y.download();
      const std::vector<float>& in = x.host();
      for (int64_t first = 0; first < rows; first += tile_rows) {
        const int64_t last = std::min(rows, first + tile_rows);
        for (int64_t c = 0; c < cols; ++c) {
          double hi = -INFINITY, total = 0;
          for (int64_t r = first; r < last; ++r) hi = std::max<double>(hi, in[r * cols + c]);
          for (int64_t r = first; r < last; ++r) total += std::exp(in[r * cols + c] - hi);
          for (int64_t r = first; r < last; ++r)
            if (!expect_close(y.host()[r * cols + c], std::exp(in[r * cols + c] - hi) / total,
                              "element " + std::to_string(r) + ", " + std::to_string(c)))
              return;
        }
      }
    }
  }
}

TEST_P(FeaturesTest, LeadingAxisReductions) {
  check_column_softmax(GetParam(), 16, 128,
                       [](auto... a) { return kernels::tile_column_softmax_16x128(a...); });
  check_column_softmax(GetParam(), 8, 256,
                       [](auto... a) { return kernels::tile_column_softmax_8x256(a...); });
}

// A pipelined arbitrary axis (TMA stage buffers, mbarrier phases) at depths
// 1 to 4: out = 2 x + j for 32 x 32 tile (i, j), exact, on shapes that are
// not multiples of the tile, shorter and longer than the pipeline, with row
// strides TMA can copy (the TMA instance runs on the emulator) and strides
// it cannot (the direct twin). Outputs are poisoned, their padding guarded.
template <class Kernel>
void check_pipelined_axpb(Backend backend, int depth, Kernel kernel, int compute_capability = 90) {
  struct Shape {
    int64_t rows, cols, stride;
  };
  for (Shape sh :
       {Shape{1, 1, 4}, Shape{32, 32, 32}, Shape{33, 95, 96}, Shape{33, 96, 100},
        Shape{64, 256, 256}, Shape{70, 161, 164}, Shape{70, 160, 164}, Shape{5, 33, 33}}) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("depth " + std::to_string(depth) + " " + std::to_string(sh.rows) + "x" +
                 std::to_string(sh.cols) + " stride " + std::to_string(sh.stride) + " seed " +
                 std::to_string(seed));
    std::mt19937 rng(seed);
    Array<float> x(backend, sh.rows * sh.stride), out(backend, sh.rows * sh.stride);
    x.fill_random(rng, -4, 4);
    for (float& v : out.host()) v = 12345.0f;  // poison, and the padding's guard
    x.upload();
    out.upload();
    const uint64_t before = detail::tma_descriptors_handed_out();
    Status st = kernel(TensorView<const float, 2>(x.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
                       TensorView<float, 2>(out.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
                       Launch{backend, nullptr, {.compute_capability = compute_capability}});
    ASSERT_TRUE(st.ok()) << st.message();
    out.download();
    // TMA where its rules hold: strides, and out's rows, multiples of 16 bytes (a TMA store
    // writes the 16-byte piece that ends a row whole).
    const bool tma = tma_instance_runs(backend) && sh.stride % 4 == 0 && sh.cols % 4 == 0;
    EXPECT_EQ(detail::tma_descriptors_handed_out() - before, tma ? 2u : 0u);
    int misses = 0;
    for (int64_t r = 0; r < sh.rows; ++r)
      for (int64_t c = 0; c < sh.stride && misses < 5; ++c) {
        const float got = out.host()[r * sh.stride + c];
        const float want = c < sh.cols ? 2.0f * x.host()[r * sh.stride + c] + float(c / 32)
                                       : 12345.0f;  // padding untouched
        if (got != want) {
          ADD_FAILURE() << "out[" << r << ", " << c << "] = " << got << ", want " << want;
          ++misses;
        }
      }
  }
}

// explicit_row_blocks (features.cc): out = 2x + 1 through hand-written
// double buffering, and total += the sum of x's [32, 32] row blocks through
// copies with add; shapes not multiples of the box in either dim, strides
// TMA can copy (the TMA instance, or its sm_80 cp.async form, on the
// emulator) and strides it cannot (the direct twin). `total` starts random.
struct ExplicitShape {
  int64_t rows, cols, stride;
};
Status run_explicit(Backend backend, int compute_capability, ExplicitShape sh, Array<float>& x,
                    Array<float>& out, Array<float>& total,
                    Status (*kernel)(TensorView<const float, 2>, TensorView<float, 2>,
                                     TensorView<float, 2>, const Launch&),
                    uint64_t schedule = 0) {
  Launch launch{backend, nullptr, {.compute_capability = compute_capability}};
  launch.emulator.schedule_seed = schedule;
  return kernel(TensorView<const float, 2>(x.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
                TensorView<float, 2>(out.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
                TensorView<float, 2>(total.data(), {32, sh.cols}, {sh.stride, 1}), launch);
}

/// Checks out[r, c] = want(x[r, c], c) inside [rows, cols) and the poison
/// 12345 in the padding up to the stride; reports at most 5 misses.
void expect_rows(Array<float>& out, Array<float>& x, ExplicitShape sh,
                 const std::function<float(float x, int64_t c)>& want) {
  int misses = 0;
  for (int64_t r = 0; r < sh.rows; ++r)
    for (int64_t c = 0; c < sh.stride && misses < 5; ++c) {
      const float got = out.host()[r * sh.stride + c];
      const float expected = c < sh.cols ? want(x.host()[r * sh.stride + c], c) : 12345.0f;
      if (got != expected) {
        ADD_FAILURE() << "out[" << r << ", " << c << "] = " << got << ", want " << expected;
        ++misses;
      }
    }
}

TEST_P(FeaturesTest, ExplicitCopiesBarriersAndAddReductions) {
  // The emulator also runs the threads in random orders (race-free: same results).
  const std::vector<uint64_t> schedules =
      GetParam() == Backend::kEmulator ? std::vector<uint64_t>{0, 1, 2} : std::vector<uint64_t>{0};
  for (int cc : {90, 80}) {
    if (cc == 80 && GetParam() != Backend::kEmulator) continue;
    for (uint64_t schedule : schedules)
      for (ExplicitShape sh :
           {ExplicitShape{1, 1, 4}, ExplicitShape{32, 32, 32}, ExplicitShape{33, 95, 96},
            ExplicitShape{33, 96, 100}, ExplicitShape{100, 64, 64}, ExplicitShape{70, 161, 164},
            ExplicitShape{70, 160, 164}, ExplicitShape{5, 33, 33}}) {
        const uint32_t seed = fresh_seed();
        SCOPED_TRACE("sm_" + std::to_string(cc) + " schedule " + std::to_string(schedule) + " " +
                     std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " stride " +
                     std::to_string(sh.stride) + " seed " + std::to_string(seed));
        std::mt19937 rng(seed);
        Array<float> x(GetParam(), sh.rows * sh.stride), out(GetParam(), sh.rows * sh.stride),
            total(GetParam(), 32 * sh.stride);
        x.fill_random(rng, -4, 4);
        total.fill_random(rng, -1, 1);
        for (float& v : out.host()) v = 12345.0f;  // poison, and the padding's guard
        const std::vector<float> before_total = total.host();
        x.upload();
        out.upload();
        total.upload();
        const uint64_t before = detail::tma_descriptors_handed_out();
        Status st =
            run_explicit(GetParam(), cc, sh, x, out, total, kernels::explicit_row_blocks, schedule);
        ASSERT_TRUE(st.ok()) << st.message();
        out.download();
        total.download();
        // TMA where strides, and the rows of out and total, are multiples of 16 bytes.
        const bool tma = tma_instance_runs(GetParam()) && sh.stride % 4 == 0 && sh.cols % 4 == 0;
        EXPECT_EQ(detail::tma_descriptors_handed_out() - before, tma ? 3u : 0u);
        expect_rows(out, x, sh, [](float v, int64_t) { return 2.0f * v + 1.0f; });
        int misses = 0;
        // Block by block, in order (the GPU's reductions of successive blocks
        // may land in another order: a float tolerance there).
        for (int64_t r = 0; r < 32; ++r)
          for (int64_t c = 0; c < sh.stride && misses < 10; ++c) {
            float want = before_total[r * sh.stride + c];
            if (c < sh.cols)
              for (int64_t row = r; row < sh.rows; row += 32) want += x.host()[row * sh.stride + c];
            const float got = total.host()[r * sh.stride + c];
            const bool ok =
                GetParam() == Backend::kCuda ? std::abs(got - want) <= 1e-4f : got == want;
            if (!ok) {
              ADD_FAILURE() << "total[" << r << ", " << c << "] = " << got << ", want " << want;
              ++misses;
            }
          }
      }
  }
}

// Each planted twin of explicit_row_blocks fails its named emulator check
// on the TMA path (its sm_80 form for the missing wait); the correct kernel
// passes the same runs above.
TEST_P(FeaturesTest, ExplicitCopiesPlantedBugsFailTheirChecks) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the emulator's checks";
  struct Plant {
    const char* name;
    Status (*kernel)(TensorView<const float, 2>, TensorView<float, 2>, TensorView<float, 2>,
                     const Launch&);
    int compute_capability;
    const char* message;
  };
  for (Plant p :
       {Plant{"nowait", kernels::explicit_row_blocks_nowait, 90, "before its TMA copy completed"},
        Plant{"nowait", kernels::explicit_row_blocks_nowait, 80, "before its TMA copy completed"},
        Plant{"nostorewait", kernels::explicit_row_blocks_nostorewait, 90,
              "while a TMA store still reads it"},
        Plant{"noarrive", kernels::explicit_row_blocks_noarrive, 90, "deadlock"}}) {
    SCOPED_TRACE(std::string(p.name) + " sm_" + std::to_string(p.compute_capability));
    const ExplicitShape sh{100, 64, 64};
    std::mt19937 rng(fresh_seed());
    Array<float> x(GetParam(), sh.rows * sh.stride), out(GetParam(), sh.rows * sh.stride),
        total(GetParam(), 32 * sh.stride);
    x.fill_random(rng, -4, 4);
    total.fill_random(rng, -1, 1);
    x.upload();
    out.upload();
    total.upload();
    Status st = run_explicit(GetParam(), p.compute_capability, sh, x, out, total, p.kernel);
    EXPECT_EQ(st.code(), StatusCode::kEmulatorCheckFailed) << st.message();
    EXPECT_NE(st.message().find(p.message), std::string::npos) << st.message();
  }
}

// Clusters along grid axis 0 (cluster_ring_sum, features.cc): each program adds the scratch of
// the next rank of its cluster (distributed shared memory) to its row. The emulator runs
// clusters of 4 where it holds 4 programs at once and clusters of one with 3 (out = 2x, as
// on the host); a row count that leaves the last cluster's programs past the array. Planted
// twins: a peer read with no cluster barrier between it and the store (the cluster meets
// before the store), and a program that exits while
// its peer may still read its scratch (random schedules, so that one exits first).
template <class Kernel>
Status run_ring_sum(Backend backend, int concurrent, uint64_t schedule, int64_t rows,
                    Array<float>& x, Array<float>& out, Kernel kernel, LaunchRecord* record) {
  Launch launch{backend, nullptr, {.concurrent_programs = concurrent, .schedule_seed = schedule}};
  launch.record = record;
  return kernel(TensorView<const float, 2>(x.data(), {rows, 256}),
                TensorView<float, 2>(out.data(), {rows, 256}), launch);
}

TEST_P(FeaturesTest, ClusterPeersReadEachOthersScratch) {
  const Backend backend = GetParam();
  for (int concurrent : {4, 3}) {
    for (int64_t rows : {int64_t{8}, int64_t{6}}) {
      if (backend != Backend::kEmulator && concurrent == 3) continue;
      SCOPED_TRACE("rows " + std::to_string(rows) + ", " + std::to_string(concurrent) +
                   " resident programs");
      std::mt19937 rng(fresh_seed());
      Array<float> x(backend, rows * 256), out(backend, rows * 256);
      x.fill_random(rng, -4, 4);
      out.poison();
      x.upload();
      out.upload();
      LaunchRecord record;
      Status st =
          run_ring_sum(backend, concurrent, 11, rows, x, out, kernels::cluster_ring_sum, &record);
      ASSERT_TRUE(st.ok()) << st.message();
      // The emulator runs clusters of 4 where it holds 4 programs at once, the host none, a
      // device where it places every cluster of the grid (sm_90; else clusters of one).
      const int cluster = record.launched_cluster;
      EXPECT_EQ(record.cluster, 4);
      if (backend != Backend::kCuda)
        EXPECT_EQ(cluster, backend == Backend::kEmulator && concurrent >= 4 ? 4 : 1);
      ASSERT_TRUE(cluster == 1 || cluster == 4) << cluster;
      out.download();
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t peer = r - r % cluster + (r % cluster + 1) % cluster;
        for (int64_t c = 0; c < 256; ++c) {
          // A peer past the array (the last cluster's) stored zeros: its block's padding.
          const float theirs = peer < rows ? x.host()[peer * 256 + c] : 0.0f;
          ASSERT_EQ(out.host()[r * 256 + c], x.host()[r * 256 + c] + theirs)
              << "row " << r << " column " << c;
        }
      }
    }
  }
  if (backend != Backend::kEmulator) return;
  struct Plant {
    const char* name;
    Status (*kernel)(TensorView<const float, 2>, TensorView<float, 2>, const Launch&);
    const char* message;
  };
  for (Plant p :
       {Plant{"unordered", kernels::cluster_ring_sum_unordered, "distributed shared-memory race"},
        Plant{"nolastbarrier", kernels::cluster_ring_sum_nolastbarrier, "which has exited"}}) {
    SCOPED_TRACE(p.name);
    bool caught = false;
    std::string messages;
    for (uint64_t schedule = 1; schedule <= 8 && !caught; ++schedule) {
      Array<float> x(backend, 8 * 256), out(backend, 8 * 256);
      x.upload();
      out.upload();
      Status st = run_ring_sum(backend, 4, schedule, 8, x, out, p.kernel, nullptr);
      caught = st.code() == StatusCode::kEmulatorCheckFailed &&
               st.message().find(p.message) != std::string::npos;
      messages += st.message() + "\n";
    }
    EXPECT_TRUE(caught) << messages;
  }
}

// emit_pipeline with a staged output (pipelined_row_scale): out = 2x + chunk
// index in chunks of 512 along each row; rows not multiples of the chunk or
// the box, strides TMA can copy and one it cannot (the direct twin).
TEST_P(FeaturesTest, EmitPipelineStagesOutputs) {
  using Shape = ExplicitShape;
  for (int cc : {90, 80}) {
    if (cc == 80 && GetParam() != Backend::kEmulator) continue;
    for (Shape sh : {Shape{1, 1, 4}, Shape{3, 512, 512}, Shape{5, 700, 704}, Shape{5, 701, 704},
                     Shape{2, 1500, 1500}, Shape{4, 33, 33}}) {
      const uint32_t seed = fresh_seed();
      SCOPED_TRACE("sm_" + std::to_string(cc) + " " + std::to_string(sh.rows) + "x" +
                   std::to_string(sh.cols) + " stride " + std::to_string(sh.stride) + " seed " +
                   std::to_string(seed));
      std::mt19937 rng(seed);
      Array<float> x(GetParam(), sh.rows * sh.stride), out(GetParam(), sh.rows * sh.stride);
      x.fill_random(rng, -4, 4);
      for (float& v : out.host()) v = 12345.0f;  // poison, and the padding's guard
      x.upload();
      out.upload();
      const uint64_t before = detail::tma_descriptors_handed_out();
      Status st = kernels::pipelined_row_scale(
          TensorView<const float, 2>(x.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
          TensorView<float, 2>(out.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
          Launch{GetParam(), nullptr, {.compute_capability = cc}});
      ASSERT_TRUE(st.ok()) << st.message();
      out.download();
      // TMA where the stride and out's rows are multiples of 16 bytes.
      const bool tma = tma_instance_runs(GetParam()) && sh.stride % 4 == 0 && sh.cols % 4 == 0;
      EXPECT_EQ(detail::tma_descriptors_handed_out() - before, tma ? 2u : 0u);
      expect_rows(out, x, sh, [](float v, int64_t c) { return 2.0f * v + float(c / 512); });
    }
  }
}

TEST_P(FeaturesTest, PipelinedArbitraryAxisDepths1To4) {
  check_pipelined_axpb(GetParam(), 1, [](auto... a) { return kernels::pipelined_axpb_d1(a...); });
  check_pipelined_axpb(GetParam(), 2, [](auto... a) { return kernels::pipelined_axpb_d2(a...); });
  check_pipelined_axpb(GetParam(), 3, [](auto... a) { return kernels::pipelined_axpb_d3(a...); });
  check_pipelined_axpb(GetParam(), 4, [](auto... a) { return kernels::pipelined_axpb_d4(a...); });
}

// emit_pipeline at depths 1 to 4 and 6 over chunks of 2048 (8 TMA boxes each):
// sum(x) and sum(i * x[i]) against float64, f32 and bf16, for lengths around
// the chunk and box sizes; a misaligned start takes the direct twin.
template <class T, class Kernel>
void check_pipelined_chunk_sum(Backend backend, int depth, Kernel kernel,
                               int compute_capability = 90) {
  for (int64_t n : {1, 255, 2047, 2048, 2049, 5000, 16385}) {
    for (int64_t offset : {0, 1}) {
      const uint32_t seed = fresh_seed();
      SCOPED_TRACE(std::string(dtype_name<T>()) + " depth " + std::to_string(depth) + " n " +
                   std::to_string(n) + " offset " + std::to_string(offset) + " seed " +
                   std::to_string(seed));
      std::mt19937 rng(seed);
      Array<T> x(backend, n + offset);
      Array<float> out(backend, 2);
      x.fill_random(rng, -1, 1);
      out.poison();
      x.upload();
      out.upload();
      const uint64_t before = detail::tma_descriptors_handed_out();
      Status st = kernel(TensorView<const T, 1>(x.data() + offset, {n}),
                         TensorView<float, 1>(out.data(), {2}),
                         Launch{backend, nullptr, {.compute_capability = compute_capability}});
      ASSERT_TRUE(st.ok()) << st.message();
      out.download();
      const bool tma = tma_instance_runs(backend) && offset == 0;
      EXPECT_EQ(detail::tma_descriptors_handed_out() - before, tma ? 1u : 0u);
      double total = 0, weighted = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double v = to_float(x.host()[offset + i]);
        total += v;
        weighted += static_cast<double>(i) * v;
        scale += static_cast<double>(i) * std::abs(v);
      }
      EXPECT_NEAR(out.host()[0], total, 1e-5 * static_cast<double>(n) + 1e-6);
      EXPECT_NEAR(out.host()[1], weighted, 1e-5 * scale + 1e-6);
    }
  }
}

TEST_P(FeaturesTest, EmitPipelineDepths1To4) {
  auto both = [&](int depth, auto kernel) {
    check_pipelined_chunk_sum<float>(GetParam(), depth, kernel);
    check_pipelined_chunk_sum<bfloat16>(GetParam(), depth, kernel);
  };
  both(1, [](auto... a) { return kernels::pipelined_chunk_sum_d1(a...); });
  both(2, [](auto... a) { return kernels::pipelined_chunk_sum_d2(a...); });
  both(3, [](auto... a) { return kernels::pipelined_chunk_sum_d3(a...); });
  both(4, [](auto... a) { return kernels::pipelined_chunk_sum_d4(a...); });
  both(6, [](auto... a) { return kernels::pipelined_chunk_sum_d6(a...); });
}

// A pipeline whose body reads its stage on even steps only (under `when`):
// y's even chunks of 512 are x's, the odd ones keep their poison. The
// skipped steps' copies land before their buffers are refilled: the
// emulator fails a refill that arms the barrier before anyone waited for
// the copy before it ("mbarrier.arrive.expect_tx ... before any thread
// waited"), as these kernels did before PipelineRules' step-end wait. On the
// emulator also the sm_80 forms (cp.async, no producer warpgroup): a
// functional run only, since the emulator lands cp.async copies at once and
// tracks no unawaited ones.
TEST_P(FeaturesTest, PipelineStepsThatSkipTheirStage) {
  std::vector<int> capabilities = {90};
  if (GetParam() == Backend::kEmulator) capabilities.push_back(80);
  for (int cc : capabilities)
    for (auto kernel : {kernels::pipelined_even_chunks_ws, kernels::pipelined_even_chunks_d2})
      for (int64_t n : {6000, 4097, 1536, 1000, 512, 1}) {
        const uint32_t seed = fresh_seed();
        SCOPED_TRACE(std::string(kernel == kernels::pipelined_even_chunks_ws ? "ws" : "d2") +
                     " sm_" + std::to_string(cc) + " n " + std::to_string(n) + " seed " +
                     std::to_string(seed));
        std::mt19937 rng(seed);
        Array<float> x(GetParam(), n), y(GetParam(), n);
        x.fill_random(rng, -1, 1);
        y.poison();
        x.upload();
        y.upload();
        const uint64_t before = detail::tma_descriptors_handed_out();
        Status st =
            kernel(TensorView<const float, 1>(x.data(), {n}), TensorView<float, 1>(y.data(), {n}),
                   Launch{GetParam(), nullptr, {.compute_capability = cc}});
        ASSERT_TRUE(st.ok()) << st.message();
        // The staged instance ran (its sm_80 form's cp.async is handed the descriptor too).
        EXPECT_EQ(detail::tma_descriptors_handed_out() - before,
                  tma_instance_runs(GetParam()) ? 1u : 0u);
        y.download();
        for (int64_t i = 0; i < n; ++i) {
          const bool copied = (i / 512) % 2 == 0;
          if (copied)
            ASSERT_EQ(y.host()[i], x.host()[i]) << "element " << i;
          else
            ASSERT_TRUE(std::isnan(y.host()[i]))
                << "element " << i << " of an odd chunk was written";
        }
      }
}

// A pipeline run once per row in one program (its barriers invalidated and
// initialised again each time), with two staged inputs of different depths.
TEST_P(FeaturesTest, PipelineRunAgainWithMixedDepths) {
  struct Shape {
    int64_t rows, cols, stride;
  };
  for (Shape sh : {Shape{1, 1, 1}, Shape{3, 512, 512}, Shape{4, 1500, 1500}, Shape{5, 2049, 2052},
                   Shape{2, 700, 701}}) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE(std::to_string(sh.rows) + "x" + std::to_string(sh.cols) + " stride " +
                 std::to_string(sh.stride) + " seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    Array<float> x(GetParam(), sh.rows * sh.stride), y(GetParam(), sh.rows * sh.stride),
        out(GetParam(), sh.rows);
    x.fill_random(rng, -1, 1);
    y.fill_random(rng, -1, 1);
    out.poison();
    x.upload();
    y.upload();
    out.upload();
    const uint64_t before = detail::tma_descriptors_handed_out();
    Status st = kernels::pipelined_row_dots(
        TensorView<const float, 2>(x.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
        TensorView<const float, 2>(y.data(), {sh.rows, sh.cols}, {sh.stride, 1}),
        TensorView<float, 1>(out.data(), {sh.rows}), launch());
    ASSERT_TRUE(st.ok()) << st.message();
    out.download();
    const bool tma = tma_instance_runs(GetParam()) && (sh.rows == 1 || sh.stride % 4 == 0);
    EXPECT_EQ(detail::tma_descriptors_handed_out() - before, tma ? 2u : 0u);
    for (int64_t r = 0; r < sh.rows; ++r) {
      double dot = 0, scale = 0;
      for (int64_t c = 0; c < sh.cols; ++c) {
        const double p = double(x.host()[r * sh.stride + c]) * y.host()[r * sh.stride + c];
        dot += p;
        scale += std::abs(p);
      }
      EXPECT_NEAR(out.host()[r], dot, 1e-5 * scale + 1e-6) << "row " << r;
    }
  }
}

// The sm_80 forms of the same kernels (cp.async copies by every thread, the
// stage's mbarrier counting one arrival per thread, outputs stored from
// registers), run by the emulator standing for an sm_80 device.
TEST_P(FeaturesTest, CpAsyncFormsOfThePipelines) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the sm_80 form is checked on the emulator";
  const Backend e = Backend::kEmulator;
  check_pipelined_axpb(
      e, 1, [](auto... a) { return kernels::pipelined_axpb_d1(a...); }, 80);
  check_pipelined_axpb(
      e, 3, [](auto... a) { return kernels::pipelined_axpb_d3(a...); }, 80);
  check_pipelined_axpb(
      e, 4, [](auto... a) { return kernels::pipelined_axpb_d4(a...); }, 80);
  check_pipelined_chunk_sum<float>(
      e, 2, [](auto... a) { return kernels::pipelined_chunk_sum_d2(a...); }, 80);
  check_pipelined_chunk_sum<bfloat16>(
      e, 3, [](auto... a) { return kernels::pipelined_chunk_sum_d3(a...); }, 80);
  check_pipelined_chunk_sum<float>(
      e, 6, [](auto... a) { return kernels::pipelined_chunk_sum_d6(a...); }, 80);
}

// Ref::transposed (Pallas' TransposeTransform): stores through a view of
// y1's block and loads (whole, a static slice, load_at/store_at) through a
// view of x's both give x^T exactly, edges in both dims.
TEST_P(FeaturesTest, TransposedViewsLoadAndStoreTheTransposedBlock) {
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{32, 32}, {45, 70}, {1, 33}, {100, 7}}) {
    const uint32_t seed = fresh_seed();
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols) + " seed " +
                 std::to_string(seed));
    std::mt19937 rng(seed);
    Array<float> x(GetParam(), rows * cols), y1(GetParam(), rows * cols),
        y2(GetParam(), rows * cols);
    x.fill_random(rng, -2, 2);
    y1.poison();
    y2.poison();
    x.upload();
    y1.upload();
    y2.upload();
    Status st = kernels::transposed_views(TensorView<const float, 2>(x.data(), {rows, cols}),
                                          TensorView<float, 2>(y1.data(), {cols, rows}),
                                          TensorView<float, 2>(y2.data(), {cols, rows}),
                                          Launch{GetParam(), nullptr});
    ASSERT_TRUE(st.ok()) << st.message();
    y1.download();
    y2.download();
    int misses = 0;
    for (int64_t i = 0; i < rows && misses < 5; ++i)
      for (int64_t j = 0; j < cols && misses < 5; ++j) {
        const float want = x.host()[i * cols + j];
        for (Array<float>* y : {&y1, &y2})
          if (y->host()[j * rows + i] != want) {
            ADD_FAILURE() << (y == &y1 ? "y1[" : "y2[") << j << ", " << i
                          << "] = " << y->host()[j * rows + i] << ", want " << want;
            ++misses;
          }
      }
  }
}

/// Checks d ([m, n] f32, row stride n) against c(i, j) + sum_k a(i, k) b(k, j)
/// in float64 (a and b return bf16 elements; c, when given, d's values before
/// an in-place product): f32 sums of K exact products lose at most ~K ulps
/// of sum |a b|. Reports the first five misses.
template <class A, class B>
void expect_product(Array<float>& d, int64_t m, int64_t n, int64_t k, A a, B b,
                    const std::vector<float>* c = nullptr) {
  int misses = 0;
  for (int64_t i = 0; i < m && misses < 5; ++i)
    for (int64_t j = 0; j < n && misses < 5; ++j) {
      double want = c ? (*c)[static_cast<size_t>(i * n + j)] : 0.0, magnitude = std::abs(want);
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = static_cast<double>(to_float(a(i, kk))) * to_float(b(kk, j));
        want += p;
        magnitude += std::abs(p);
      }
      const double got = d.host()[i * n + j];
      if (!(std::abs(got - want) <= 1e-6 * static_cast<double>(k) * magnitude + 1e-6)) {
        ADD_FAILURE() << "d[" << i << ", " << j << "] = " << got << ", want " << want;
        ++misses;
      }
    }
}

// A product kernel d = a @ b with bf16 a and b, f32 d: a as [M, K] or (a_transposed) [K, M],
// b as [K, N] or (b_transposed) [N, K].
using OrientedProduct = Status (*)(TensorView<const bfloat16, 2>, TensorView<const bfloat16, 2>,
                                   TensorView<float, 2>, const Launch&);
struct OrientedShape {
  int64_t m, n, k, a_stride, b_stride;  // row strides of a and b as stored
};

/// Runs `kernel` on fresh random a and b of shape `sh` in the given orientations and compares
/// its poisoned d with a float64 reference.
void check_oriented_product(Backend backend, OrientedProduct kernel, const char* form, int cc,
                            OrientedShape sh, bool a_transposed, bool b_transposed,
                            uint64_t schedule) {
  const uint32_t seed = fresh_seed();
  SCOPED_TRACE(std::string(form) + " sm_" + std::to_string(cc) + " m " + std::to_string(sh.m) +
               " n " + std::to_string(sh.n) + " k " + std::to_string(sh.k) + " a stride " +
               std::to_string(sh.a_stride) + " b stride " + std::to_string(sh.b_stride) +
               " schedule " + std::to_string(schedule) + " seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  const int64_t a_rows = a_transposed ? sh.k : sh.m, a_cols = a_transposed ? sh.m : sh.k;
  const int64_t b_rows = b_transposed ? sh.n : sh.k, b_cols = b_transposed ? sh.k : sh.n;
  Array<bfloat16> a(backend, a_rows * sh.a_stride), b(backend, b_rows * sh.b_stride);
  Array<float> d(backend, sh.m * sh.n);
  a.fill_random(rng, -2, 2);
  b.fill_random(rng, -2, 2);
  d.poison();
  a.upload();
  b.upload();
  d.upload();
  TensorView<const bfloat16, 2> av(a.data(), {a_rows, a_cols}, {sh.a_stride, 1});
  TensorView<const bfloat16, 2> bv(b.data(), {b_rows, b_cols}, {sh.b_stride, 1});
  TensorView<float, 2> dv(d.data(), {sh.m, sh.n}, {sh.n, 1});
  Status st = kernel(
      av, bv, dv, Launch{backend, nullptr, {.schedule_seed = schedule, .compute_capability = cc}});
  ASSERT_TRUE(st.ok()) << st.message();
  d.download();
  expect_product(
      d, sh.m, sh.n, sh.k,
      [&](int64_t i, int64_t kk) {
        return a.host()[a_transposed ? kk * sh.a_stride + i : i * sh.a_stride + kk];
      },
      [&](int64_t kk, int64_t j) {
        return b.host()[b_transposed ? j * sh.b_stride + kk : kk * sh.b_stride + j];
      });
}

/// check_oriented_product for every kernel and shape, on sm_90 and (the emulator) sm_80, the
/// emulator's threads in round-robin and in a random order.
void check_oriented_products(Backend backend,
                             std::initializer_list<std::pair<OrientedProduct, const char*>> kernels,
                             std::initializer_list<OrientedShape> shapes, bool a_transposed,
                             bool b_transposed) {
  for (auto [kernel, form] : kernels)
    for (int cc : {90, 80})
      for (uint64_t schedule : {0, 7}) {
        if ((cc == 80 || schedule != 0) && backend != Backend::kEmulator) continue;
        for (OrientedShape sh : shapes)
          check_oriented_product(backend, kernel, form, cc, sh, a_transposed, b_transposed,
                                 schedule);
      }
}

// b as [K, N] read in place N-major from tiled stages (dot_n_major_*):
// d = a @ b against a float64 reference, K from one step to five, edges in
// every dim, row strides wider than the arrays, a B row stride TMA cannot
// copy (the direct twin), and the sm_80 form (ldmatrix.trans through the
// tiles) on the emulator.
TEST_P(FeaturesTest, DotReadsTiledNMajorStagesInPlace) {
  check_oriented_products(GetParam(),
                          {{kernels::dot_n_major_t64, "tiling {64, 64}, swizzle 128"},
                           {kernels::dot_n_major_t8, "tiling {8, 64}, swizzle 128"},
                           {kernels::dot_n_major_s64, "tiling {64, 32}, swizzle 64"}},
                          {{64, 128, 64, 64, 128},
                           {65, 130, 320, 320, 136},
                           {7, 9, 200, 200, 16},
                           {128, 257, 72, 80, 257}},
                          false, false);
}

// a as [K, M] read in place M-major through a transposed view
// (wgmma_m_major_a_*): d = a^T @ b^T against a float64 reference, two
// consumer warpgroups (the second reading a's second tile of 64 columns), K
// from one step to five, edges in every dim, row strides wider than the
// arrays, an a row stride TMA cannot copy (the direct twin, dot's
// transpose_a), and the sm_80 form (ldmatrix.trans of a) on the emulator.
TEST_P(FeaturesTest, WgmmaReadsTransposedAInPlace) {
  check_oriented_products(GetParam(),
                          {{kernels::wgmma_m_major_a_t64, "tiling {64, 64}"},
                           {kernels::wgmma_m_major_a_t8, "tiling {8, 64}"}},
                          {{128, 64, 64, 128, 64},
                           {130, 65, 320, 136, 320},
                           {9, 7, 200, 16, 200},
                           {257, 128, 72, 257, 80}},
                          true, true);
}

// wgmma with operand a in registers (wgmma_register_a): d = sum over chunks c
// of bf16(silu(x @ w1[c]^T)) @ w2[c], against a float64 reference that rounds
// p to bf16 as the kernel does. Edges in every dim, one to three hidden
// chunks, a row stride TMA cannot copy (the direct twin), and the sm_80
// form (multiplies on the spot) on the emulator. A p that differs from the
// reference's by its last bit (the kernel sums s in f32) moves d by at most
// 2^-8 |p w2|; a misplaced register moves it by about |p w2|.
TEST_P(FeaturesTest, WgmmaTakesOperandAFromRegisters) {
  struct Shape {
    int64_t m, h, n, x_stride;
  };
  for (int cc : {90, 80}) {
    if (cc == 80 && GetParam() != Backend::kEmulator) continue;
    for (Shape sh : {Shape{64, 64, 64, 64}, Shape{65, 130, 72, 64}, Shape{7, 33, 200, 72},
                     Shape{128, 64, 64, 67}}) {
      const uint32_t seed = fresh_seed();
      SCOPED_TRACE("sm_" + std::to_string(cc) + " m " + std::to_string(sh.m) + " h " +
                   std::to_string(sh.h) + " n " + std::to_string(sh.n) + " x stride " +
                   std::to_string(sh.x_stride) + " seed " + std::to_string(seed));
      std::mt19937 rng(seed);
      Array<bfloat16> x(GetParam(), sh.m * sh.x_stride), w1(GetParam(), sh.h * 64),
          w2(GetParam(), sh.h * sh.n);
      Array<float> d(GetParam(), sh.m * sh.n);
      x.fill_random(rng, -1, 1);
      w1.fill_random(rng, -1, 1);
      w2.fill_random(rng, -1, 1);
      d.poison();
      x.upload();
      w1.upload();
      w2.upload();
      d.upload();
      Status st = kernels::wgmma_register_a(
          TensorView<const bfloat16, 2>(x.data(), {sh.m, 64}, {sh.x_stride, 1}),
          TensorView<const bfloat16, 2>(w1.data(), {sh.h, 64}),
          TensorView<const bfloat16, 2>(w2.data(), {sh.h, sh.n}),
          TensorView<float, 2>(d.data(), {sh.m, sh.n}),
          Launch{GetParam(), nullptr, {.compute_capability = cc}});
      ASSERT_TRUE(st.ok()) << st.message();
      d.download();
      std::vector<double> p(static_cast<size_t>(sh.m * sh.h));
      for (int64_t i = 0; i < sh.m; ++i)
        for (int64_t c = 0; c < sh.h; ++c) {
          double v = 0;
          for (int64_t k = 0; k < 64; ++k)
            v += static_cast<double>(to_float(x.host()[i * sh.x_stride + k])) *
                 to_float(w1.host()[c * 64 + k]);
          v /= 1.0 + std::exp(-v);
          p[static_cast<size_t>(i * sh.h + c)] = to_float(bfloat16(static_cast<float>(v)));
        }
      int misses = 0;
      for (int64_t i = 0; i < sh.m && misses < 5; ++i)
        for (int64_t j = 0; j < sh.n && misses < 5; ++j) {
          double want = 0, magnitude = 0, largest = 0;
          for (int64_t c = 0; c < sh.h; ++c) {
            const double term = p[static_cast<size_t>(i * sh.h + c)] *
                                static_cast<double>(to_float(w2.host()[c * sh.n + j]));
            want += term;
            magnitude += std::abs(term);
            largest = std::max(largest, std::abs(term));
          }
          const double got = d.host()[i * sh.n + j];
          if (!(std::abs(got - want) <= 2.0 * std::ldexp(largest, -8) + 1e-5 * magnitude)) {
            ADD_FAILURE() << "d[" << i << ", " << j << "] = " << got << ", want " << want;
            ++misses;
          }
        }
    }
  }
}

// Pallas' pipelined wgmma (pipelined_wgmma, and its warp-specialized forms
// pipelined_wgmma_ws and _ws2, two consumer warpgroups): d = a @ b^T against a float64
// reference, K from one step to five (the refills of delay_release), edges
// in every dim, a row stride TMA cannot copy (the direct twin), and the
// sm_80 form (multiplies on the spot) on the emulator.
using WgmmaMatmul = Status (*)(TensorView<const bfloat16, 2>, TensorView<const bfloat16, 2>,
                               TensorView<float, 2>, const Launch&);

Status run_pipelined_wgmma(Backend backend, int cc, WgmmaMatmul kernel, int64_t m, int64_t n,
                           int64_t k, int64_t stride, Array<bfloat16>& a, Array<bfloat16>& b,
                           Array<float>& d, uint64_t schedule = 0) {
  TensorView<const bfloat16, 2> av(a.data(), {m, k}, {stride, 1});
  TensorView<const bfloat16, 2> bv(b.data(), {n, k}, {stride, 1});
  TensorView<float, 2> dv(d.data(), {m, n}, {n, 1});
  return kernel(av, bv, dv,
                Launch{backend, nullptr, {.schedule_seed = schedule, .compute_capability = cc}});
}

TEST_P(FeaturesTest, PipelinedWgmmaMatchesTheReference) {
  struct Shape {
    int64_t m, n, k, stride;
  };
  for (WgmmaMatmul kernel :
       {kernels::pipelined_wgmma, kernels::pipelined_wgmma_ws, kernels::pipelined_wgmma_ws2})
    for (int cc : {90, 80}) {
      if (cc == 80 && GetParam() != Backend::kEmulator) continue;
      for (Shape sh : {Shape{64, 64, 64, 64}, Shape{65, 130, 320, 320}, Shape{7, 9, 200, 200},
                       Shape{128, 64, 136, 139}, Shape{193, 70, 72, 72}}) {
        for (uint64_t schedule : {0, 7}) {  // the emulator's thread order: round-robin, random
          const uint32_t seed = fresh_seed();
          SCOPED_TRACE(std::string(kernel == kernels::pipelined_wgmma      ? ""
                                   : kernel == kernels::pipelined_wgmma_ws ? "warp-specialized "
                                                                           : "two consumers ") +
                       "sm_" + std::to_string(cc) + " m " + std::to_string(sh.m) + " n " +
                       std::to_string(sh.n) + " k " + std::to_string(sh.k) + " stride " +
                       std::to_string(sh.stride) + " schedule " + std::to_string(schedule) +
                       " seed " + std::to_string(seed));
          std::mt19937 rng(seed);
          Array<bfloat16> a(GetParam(), sh.m * sh.stride), b(GetParam(), sh.n * sh.stride);
          Array<float> d(GetParam(), sh.m * sh.n);
          a.fill_random(rng, -2, 2);
          b.fill_random(rng, -2, 2);
          d.poison();
          a.upload();
          b.upload();
          d.upload();
          Status st = run_pipelined_wgmma(GetParam(), cc, kernel, sh.m, sh.n, sh.k, sh.stride, a, b,
                                          d, schedule);
          ASSERT_TRUE(st.ok()) << st.message();
          d.download();
          expect_product(
              d, sh.m, sh.n, sh.k,
              [&](int64_t i, int64_t kk) { return a.host()[i * sh.stride + kk]; },
              [&](int64_t kk, int64_t j) { return b.host()[j * sh.stride + kk]; });
        }
      }
    }
}

// d += a @ b^T in place (d is also c) by a persistent wgmma kernel `run` (a, b [rows, k], row
// stride `stride`) on fresh random data from `seed`, against the reference.
struct PersistentShape {
  int64_t m, n, k, stride;
};
template <class Run>
void check_persistent_wgmma(Backend backend, PersistentShape sh, uint32_t seed,
                            const Launch& launch, Run run) {
  std::mt19937 rng(seed);
  Array<bfloat16> a(backend, sh.m * sh.stride), b(backend, sh.n * sh.stride);
  Array<float> d(backend, sh.m * sh.n);
  a.fill_random(rng, -2, 2);
  b.fill_random(rng, -2, 2);
  d.fill_random(rng, -4, 4);
  const std::vector<float> c(d.host().begin(), d.host().end());
  a.upload();
  b.upload();
  d.upload();
  const TensorView<const bfloat16, 2> av(a.data(), {sh.m, sh.k}, {sh.stride, 1});
  const TensorView<const bfloat16, 2> bv(b.data(), {sh.n, sh.k}, {sh.stride, 1});
  const TensorView<float, 2> dv(d.data(), {sh.m, sh.n}, {sh.n, 1});
  const Status st = run(av, bv, dv, launch);
  ASSERT_TRUE(st.ok()) << st.message();
  d.download();
  expect_product(
      d, sh.m, sh.n, sh.k, [&](int64_t i, int64_t kk) { return a.host()[i * sh.stride + kk]; },
      [&](int64_t kk, int64_t j) { return b.host()[j * sh.stride + kk]; }, &c);
}

// A persistent grid (persistent_wgmma: d += a @ b^T in place, two consumer
// warpgroups, tiles in bands of 2 rows): on the emulator 3 programs walk up
// to 18 tiles (uneven shares, a partial last band), one pipeline across each
// program's tiles, under round-robin and random thread orders; on the host
// one program walks them all. A tile done twice
// adds its product twice, one skipped keeps d's old value. sm_80: the
// cp.async form (no producer); stride 139: the direct twin, persistent too.
//
// In clusters of 2 (persistent_wgmma_cluster, on tile rows 2 and 4 of 128;
// 3 and 1 run clusters of 1): 3 resident programs make one cluster, 4 two
// (the programs of a cluster walk together), 5 two; each CTA copies half of
// b multicast to both. A CTA that read its peer's tile rows, or a b block
// that missed a CTA, shows in d; a release that did not wait for the peer's
// consumers fails the emulator's overwrite checks.
TEST_P(FeaturesTest, PersistentWgmmaWalksEveryTileOnce) {
  using Shape = PersistentShape;
  for (int cluster : {1, 2})
    for (int cc : {90, 80}) {
      if (cc == 80 && GetParam() != Backend::kEmulator) continue;
      for (Shape sh : {Shape{300, 330, 130, 130}, Shape{129, 200, 72, 72}, Shape{70, 60, 64, 64},
                       Shape{200, 130, 64, 139}, Shape{400, 70, 192, 192}})
        for (uint64_t schedule : {0, 7}) {  // the emulator's thread order: round-robin, random
          if (schedule != 0 && GetParam() != Backend::kEmulator) continue;
          const int programs = cluster == 1 ? 3 : schedule == 0 ? 4 : 5;
          const uint32_t seed = fresh_seed();
          SCOPED_TRACE("cluster " + std::to_string(cluster) + " programs " +
                       std::to_string(programs) + " sm_" + std::to_string(cc) + " m " +
                       std::to_string(sh.m) + " n " + std::to_string(sh.n) + " k " +
                       std::to_string(sh.k) + " stride " + std::to_string(sh.stride) +
                       " schedule " + std::to_string(schedule) + " seed " + std::to_string(seed));
          const Launch launch{GetParam(),
                              nullptr,
                              {.concurrent_programs = programs,
                               .schedule_seed = schedule,
                               .compute_capability = cc}};
          check_persistent_wgmma(GetParam(), sh, seed, launch, [&](auto... args) {
            return cluster == 1 ? kernels::persistent_wgmma(args...)
                                : kernels::persistent_wgmma_cluster(args...);
          });
        }
    }
}

// The stream-K walk step by step (stream_k_walk): every (tile, k) step is run
// (out starts at -1) and says what Spec.h's Persistent describes: T tiles, K
// steps, W = min(3 T, programs) programs, P = 3; D = max(T / W - 1, 0) rounds of
// whole tiles, then the last T' = T - D W tiles as a line of h = min(3, K) units
// a tile (unit i: steps [i K / h, (i + 1) K / h)) in runs of U = cdiv(T' h, W)
// units, where that saves at least an eighth of cdiv(T', W) K steps (the longest
// run: cdiv(U K, h)); a tile's parts are the runs holding its steps. Emulator:
// W = 1..7 on 1..23 tiles of 1..10 steps (W == T, W dividing T, fewer tiles
// than programs: three parts, one or two steps (units of a step), more rounds,
// cuts that save too little); the host: one program.
TEST_P(FeaturesTest, StreamKWalkCutsTheLastRoundsEvenly) {
  if (GetParam() == Backend::kCuda) GTEST_SKIP() << "the program count is the device's";
  struct Case {
    int64_t rows, cols, steps;
  };
  for (Case c :
       {Case{1, 1, 1}, Case{3, 5, 4}, Case{2, 3, 5}, Case{4, 5, 3}, Case{1, 23, 2}, Case{3, 4, 1},
        Case{1, 3, 10}, Case{2, 1, 7}, Case{1, 5, 16}, Case{1, 13, 16}, Case{1, 1, 10}})
    for (int programs : {1, 2, 3, 4, 5, 7}) {
      if (GetParam() == Backend::kHost && programs != 1) continue;
      const int64_t tiles = c.rows * c.cols, k = c.steps;
      SCOPED_TRACE("tiles " + std::to_string(c.rows) + " x " + std::to_string(c.cols) + " steps " +
                   std::to_string(k) + " programs " + std::to_string(programs));
      Array<int32_t> out(GetParam(), tiles * k);
      for (int32_t& v : out.host()) v = -1;
      out.upload();
      const Launch launch{GetParam(), nullptr, {.concurrent_programs = programs}};
      Status st =
          kernels::stream_k_walk(TensorView<int32_t, 3>(out.data(), {c.rows, c.cols, k}), launch);
      ASSERT_TRUE(st.ok()) << st.message();
      out.download();
      const int64_t w_count = std::min<int64_t>(3 * tiles, programs);
      const int64_t rounds = std::max<int64_t>(tiles / w_count - 1, 0);
      const int64_t last = tiles - rounds * w_count;
      const int64_t h = std::min<int64_t>(k, 3), units = last * h;
      const int64_t run_units = std::max<int64_t>((units + w_count - 1) / w_count, 1);
      const int64_t plain = (last + w_count - 1) / w_count * k;
      const bool cutting = 8 * (plain - (run_units * k + h - 1) / h) >= plain;
      auto cut = [&](int64_t w) {  // run w's first line step
        const int64_t unit = std::min(w * run_units, units);
        return unit / h * k + unit % h * k / h;
      };
      auto run_holding = [&](int64_t v) {  // the w with cut(w) <= v < cut(w + 1)
        int64_t w = 0;
        while (cut(w + 1) <= v) ++w;
        return w;
      };
      for (int64_t t = 0; t < tiles; ++t)
        for (int64_t s = 0; s < k; ++s) {
          int64_t want = s == k - 1 ? 1 : 0;       // a whole tile's step
          if (cutting && t >= rounds * w_count) {  // on the line
            const int64_t begin = (t - rounds * w_count) * k, v = begin + s;
            const int64_t w = run_holding(v), first = run_holding(begin),
                          parts = run_holding(begin + k - 1) - first + 1;
            const bool last_step = s == k - 1 || v == cut(w + 1) - 1;
            want = (last_step ? 1 : 0) + 2 * (parts - 1) + 8 * (w - first) +
                   (parts > 1 ? 32 * (first + 1) : 0);
          }
          EXPECT_EQ(out.host()[t * k + s], want) << "tile " << t << " step " << s;
        }
    }
}

// persistent_wgmma in a stream-K walk (persistent_wgmma_stream_k, three parts a
// tile at most: runs of thirds of a tile, up to three programs a tile): on the
// emulator W = 2..5 programs cut the last tiles' K steps between them, so tiles
// run in two or three parts meet at a semaphore and the last sums the parts'
// partial tiles. E.g. [300, 330] in 128 x 64 tiles with K = 130 (3 steps, so a
// third is a step): 18 tiles; W = 4 runs 3 rounds of whole tiles, then 18 steps
// in runs of 5 (cuts at 5, 10 and 15: tiles 1, 3 and 5 of the line in two parts);
// W = 5: 2 rounds, then 24 steps cut at 5, 10, 15, 20. [129, 200] with K = 640
// (10 steps, thirds of 3, 3 and 4), W = 3: 8 tiles, one round, then 50 steps cut
// at 16 and 33. One K step (K = 64): no cut saves an eighth. [128, 192] with K =
// 640: 3 tiles of 10 steps, W = 5: runs of two thirds, cut at 6, 13, 20, 26;
// [128, 64], one tile: W = 2 cuts it at 6, W >= 3 (three programs) in thirds at
// 3 and 6, three parts. The host runs one program (whole tiles). A part summed
// twice or never, or a tile done twice, shows in d (d += a @ b^T in place); a
// semaphore left non-zero fails the emulator's check. sm_80: the cp.async form;
// stride 139: the direct twin, stream-K too. On CUDA the device's program count
// rules: [1408, 832] (143 tiles of 3 steps) on 132 SMs in runs of 4 steps (6 for
// the plain walk); [1024, 320] (40 tiles of 10 steps) on 120 programs, a third
// of a tile each: every tile in three parts (on 114 SMs, runs of two thirds).
TEST_P(FeaturesTest, PersistentStreamKSumsEachTilesPartsOnce) {
  using Shape = PersistentShape;
  for (int cc : {90, 80}) {
    if (cc == 80 && GetParam() != Backend::kEmulator) continue;
    for (Shape sh : {Shape{300, 330, 130, 130}, Shape{129, 200, 640, 640}, Shape{400, 70, 64, 64},
                     Shape{200, 130, 130, 139}, Shape{128, 192, 640, 640}, Shape{128, 64, 640, 640},
                     Shape{1408, 832, 192, 192}, Shape{1024, 320, 640, 640}})
      for (int programs : {2, 3, 4, 5}) {
        if (GetParam() != Backend::kEmulator && programs != 2) continue;
        // Sized for a GPU of 132 (or 114) SMs: 143 tiles, one program each, most of the line
        // cut; 40 tiles, 120 (114) programs, tiles in three (two) parts. Too many for the
        // emulator and the host to be quick.
        if ((GetParam() == Backend::kCuda) != (sh.m >= 1024)) continue;
        const uint64_t schedule = programs == 4 ? 7 : 0;  // one random thread order
        const uint32_t seed = fresh_seed();
        SCOPED_TRACE("programs " + std::to_string(programs) + " sm_" + std::to_string(cc) + " m " +
                     std::to_string(sh.m) + " n " + std::to_string(sh.n) + " k " +
                     std::to_string(sh.k) + " stride " + std::to_string(sh.stride) + " seed " +
                     std::to_string(seed));
        const Launch launch{
            GetParam(),
            nullptr,
            {.concurrent_programs = programs, .schedule_seed = schedule, .compute_capability = cc}};
        check_persistent_wgmma(GetParam(), sh, seed, launch, [](auto... args) {
          return kernels::persistent_wgmma_stream_k(args...);
        });
      }
  }
}

// The planted twins without delay_release refill a stage while the wgmma of
// its step may still read it (in the warp-specialized one the consumer
// releases the stage too early and the producer refills it): the emulator
// names it.
TEST_P(FeaturesTest, PipelinedWgmmaWithoutDelayedReleaseFailsItsCheck) {
  if (GetParam() != Backend::kEmulator) GTEST_SKIP() << "the emulator's checks";
  const int64_t m = 64, n = 64, k = 320;
  std::mt19937 rng(fresh_seed());
  Array<bfloat16> a(GetParam(), m * k), b(GetParam(), n * k);
  Array<float> d(GetParam(), m * n);
  a.fill_random(rng, -2, 2);
  b.fill_random(rng, -2, 2);
  a.upload();
  b.upload();
  d.upload();
  for (WgmmaMatmul kernel :
       {kernels::pipelined_wgmma_nodelay, kernels::pipelined_wgmma_ws_nodelay}) {
    Status st = run_pipelined_wgmma(GetParam(), 90, kernel, m, n, k, k, a, b, d);
    EXPECT_EQ(st.code(), StatusCode::kEmulatorCheckFailed) << st.message();
    EXPECT_NE(st.message().find("overwrites shared offset"), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("while a wgmma still reads it"), std::string::npos) << st.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, FeaturesTest,
                         ::testing::Values(Backend::kHost, Backend::kEmulator, Backend::kCuda),
                         backend_name);

}  // namespace
}  // namespace pallas::testing

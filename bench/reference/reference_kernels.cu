// Hand-written reference kernels for the row-wise bf16 ops (see
// reference_kernels.h): what a careful CUDA programmer would write without a
// code generator, used as a static yardstick (bench/sass_report.py counts their
// SASS next to ours) and as timing peers on a GPU.
//
// Shape of every kernel:
// - CTAs of 128 threads, like pallaskernels' programs, so instruction and
//   register counts compare like for like;
// - 16-byte global accesses (8 x bf16 in a uint4) on the main path; a row is
//   split into 16-byte vectors and only the last, partial round of vectors is
//   predicated (and, for row_sum/cross_entropy, an unaligned head and tail of
//   under 8 elements per row);
// - f32 statistics, bf16 widened by a shift (bf16 is the top half of an f32)
//   and narrowed two at a time (F2FP.BF16.F32.PACK_AB);
// - rows of at most 1024 elements get a warp each (4 rows per CTA): the
//   reductions are shuffles only, no barrier; rows of at most 4096 get the
//   CTA, held in registers between statistics and output (at most 32 f32 per
//   thread), one barrier per reduction; longer rows, or rows that are not
//   16-byte aligned, loop over the row twice (statistics, then output).
#include "reference_kernels.h"

#include <cfloat>
#include <cstdint>
#include <cstring>

namespace pallas_ref::kernels {

constexpr int kCtaThreads = 128;
constexpr int kWarps = kCtaThreads / 32;
constexpr int kVec = 8;  // bf16 elements per 16-byte access
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

using bf16 = __nv_bfloat16;

//===----------------------------------------------------------------------===//
// Element access
//===----------------------------------------------------------------------===//

// bf16 is the upper half of an f32, so widening is a shift or a mask: cheaper
// than the generic cvt, and exact.
__device__ __forceinline__ void unpack2(uint32_t w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

// Round-to-nearest-even narrowing of two values in one instruction on sm_80+.
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  uint32_t w;
  memcpy(&w, &h, sizeof w);
  return w;
}

// N elements at p as f32: one 16-byte load for N == 8 (p 16-byte aligned),
// a 2-byte load for N == 1 (the unaligned fallbacks).
template <int N>
__device__ __forceinline__ void load(const bf16* p, float (&f)[N]) {
  static_assert(N == kVec || N == 1);
  if constexpr (N == kVec) {
    const uint4 u = *reinterpret_cast<const uint4*>(p);
    unpack2(u.x, f[0], f[1]);
    unpack2(u.y, f[2], f[3]);
    unpack2(u.z, f[4], f[5]);
    unpack2(u.w, f[6], f[7]);
  } else {
    f[0] = __bfloat162float(*p);
  }
}

template <int N>
__device__ __forceinline__ void store(bf16* p, const float (&f)[N]) {
  static_assert(N == kVec || N == 1);
  if constexpr (N == kVec) {
    *reinterpret_cast<uint4*>(p) =
        uint4{pack2(f[0], f[1]), pack2(f[2], f[3]), pack2(f[4], f[5]), pack2(f[6], f[7])};
  } else {
    *p = __float2bfloat16_rn(f[0]);
  }
}

// 2^x in one MUFU.EX2. The libm exp2f adds a denormal-range fix-up per call;
// the outputs are rounded to bf16 (8 bits), far above ex2.approx's 2 ulp, and
// flushing results below 2^-126 to zero changes no bf16 softmax output.
__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

//===----------------------------------------------------------------------===//
// Reductions over the threads that share a row
//===----------------------------------------------------------------------===//

struct Sum {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Max {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

/// A running softmax denominator in base 2: sum = s * 2^m over the elements
/// seen, m the largest x * log2(e) so far. m starts at -FLT_MAX rather than
/// -inf so that combining with an empty partial (a thread past the row end)
/// never computes -inf - -inf; a row of only -inf then ends with s == 0 and
/// gives NaN outputs, as PyTorch does.
struct Online {
  float m = -FLT_MAX;
  float s = 0.0f;

  /// Folds N elements: one rescale of s per N elements, not per element.
  template <int N>
  __device__ __forceinline__ void add(const float (&f)[N]) {
    float mx = f[0];
#pragma unroll
    for (int k = 1; k < N; ++k) mx = fmaxf(mx, f[k]);
    const float mn = fmaxf(m, mx * kLog2e);
    float acc = s * ex2(m - mn);
#pragma unroll
    for (int k = 0; k < N; ++k) acc += ex2(fmaf(f[k], kLog2e, -mn));
    m = mn;
    s = acc;
  }
  __device__ __forceinline__ void merge(float m2, float s2) {
    const float mn = fmaxf(m, m2);
    s = s * ex2(m - mn) + s2 * ex2(m2 - mn);
    m = mn;
  }
};

__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

/// The threads that share a row: a warp (kThreads == 32, four rows per CTA)
/// or the CTA (kThreads == 128). All-reductions leave the result in every
/// thread of the group. Each reduction of a kernel gets its own shared slot,
/// so the CTA form needs one barrier per reduction and none between them
/// (a CTA does one row, so no slot is reused).
template <int kThreads>
struct RowGroup {
  static_assert(kThreads == 32 || kThreads == kCtaThreads);
  static constexpr int kRowsPerCta = kCtaThreads / kThreads;
  static constexpr bool kCta = kThreads == kCtaThreads;

  struct Shared {
    // float4-aligned so the four partials come back in one LDS.128.
    alignas(16) float slot[kCta ? 2 : 1][kWarps];
    alignas(16) float2 pair[kWarps];
  };

  __device__ static int row() { return blockIdx.x * kRowsPerCta + threadIdx.x / kThreads; }
  __device__ static int rank() { return threadIdx.x % kThreads; }

  template <class Op>
  __device__ static float all_reduce(float v, Op op, float* slot) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) v = op(v, shfl_xor(v, o));
    if constexpr (kCta) {
      if (threadIdx.x % 32 == 0) slot[threadIdx.x / 32] = v;
      __syncthreads();
      v = slot[0];
#pragma unroll
      for (int w = 1; w < kWarps; ++w) v = op(v, slot[w]);
    }
    return v;
  }

  /// Combines every thread's Online partial (one exchange of (m, s) pairs).
  __device__ static Online all_reduce(Online p, float2* pair) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) p.merge(shfl_xor(p.m, o), shfl_xor(p.s, o));
    if constexpr (kCta) {
      if (threadIdx.x % 32 == 0) pair[threadIdx.x / 32] = make_float2(p.m, p.s);
      __syncthreads();
      p = Online{pair[0].x, pair[0].y};
#pragma unroll
      for (int w = 1; w < kWarps; ++w) p.merge(pair[w].x, pair[w].y);
    }
    return p;
  }
};

/// A row split for 16-byte loads whatever its alignment: `head` elements up to
/// the first 16-byte boundary, `nvec` vectors of 8, `tail` elements after.
struct Aligned {
  int head, nvec, tail;
  __device__ explicit Aligned(const bf16* row, int cols) {
    const int misalign = static_cast<int>(reinterpret_cast<uintptr_t>(row) & 15);  // even
    head = min(cols, ((16 - misalign) & 15) / 2);
    nvec = (cols - head) / kVec;
    tail = cols - head - nvec * kVec;
  }
};

//===----------------------------------------------------------------------===//
// softmax / log_softmax
//===----------------------------------------------------------------------===//

/// Rows of at most kThreads * kIters * 8 elements, cols % 8 == 0: each thread
/// holds kIters vectors, read once, between the max, the sum and the output.
template <int kThreads, int kIters, bool kLog>
__global__ void __launch_bounds__(kCtaThreads)
    softmax_held(const bf16* __restrict__ x, bf16* __restrict__ y, int rows, int cols) {
  using G = RowGroup<kThreads>;
  __shared__ typename G::Shared sh;
  const int row = G::row();
  if (row >= rows) return;  // whole warps only (the CTA form has grid == rows)
  const int nvec = cols / kVec;
  const bf16* xr = x + static_cast<size_t>(row) * cols;

  // All loads first so that they are in flight together. Vectors past the
  // row end (only in the last round) are skipped by a predicate per vector,
  // not filled with an identity: filling costs a move per element.
  float v[kIters][kVec];
  bool in_row[kIters];
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    in_row[i] = G::rank() + i * kThreads < nvec;
    if (in_row[i]) load(xr + (G::rank() + i * kThreads) * kVec, v[i]);
  }
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kIters; ++i)
    if (in_row[i])
#pragma unroll
      for (int k = 0; k < kVec; ++k) m = fmaxf(m, v[i][k]);
  m = G::all_reduce(m, Max{}, sh.slot[0]);

  // exp(x - m) = 2^(x log2e - m log2e): one FFMA and one MUFU.EX2 per element.
  const float ms = m * kLog2e;
  float s = 0.0f;
#pragma unroll
  for (int i = 0; i < kIters; ++i)
    if (in_row[i])
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float e = ex2(fmaf(v[i][k], kLog2e, -ms));
        s += e;
        if constexpr (!kLog) v[i][k] = e;
      }
  s = G::all_reduce(s, Sum{}, sh.slot[G::kCta ? 1 : 0]);

  // One division per row; MUFU.RCP's 1 ulp is invisible after rounding to bf16.
  const float scale = kLog ? 0.0f : __fdividef(1.0f, s);
  const float shift = kLog ? m + __logf(s) : 0.0f;
  bf16* yr = y + static_cast<size_t>(row) * cols;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int j = G::rank() + i * kThreads;
    if (in_row[i]) {
      float o[kVec];
#pragma unroll
      for (int k = 0; k < kVec; ++k) o[k] = kLog ? v[i][k] - shift : v[i][k] * scale;
      store(yr + j * kVec, o);
    }
  }
}

/// Any row: a CTA per row reads it twice, first folding (max, sum) online in
/// one pass, then writing the outputs. N == 8 when cols % 8 == 0 and the
/// pointers are 16-byte aligned, else N == 1.
template <int N, bool kLog>
__global__ void __launch_bounds__(kCtaThreads)
    softmax_loop(const bf16* __restrict__ x, bf16* __restrict__ y, int rows, int cols) {
  using G = RowGroup<kCtaThreads>;
  __shared__ typename G::Shared sh;
  const int row = blockIdx.x;
  const int n = cols / N;
  const bf16* xr = x + static_cast<size_t>(row) * cols;
  Online p;
  // Unrolled so that four loads are in flight per thread.
#pragma unroll 4
  for (int j = threadIdx.x; j < n; j += kCtaThreads) {
    float f[N];
    load(xr + j * N, f);
    p.add(f);
  }
  p = G::all_reduce(p, sh.pair);
  const float scale = kLog ? 0.0f : __fdividef(1.0f, p.s);
  const float shift = kLog ? (p.m + __log2f(p.s)) * kLn2 : 0.0f;
  bf16* yr = y + static_cast<size_t>(row) * cols;
#pragma unroll 4
  for (int j = threadIdx.x; j < n; j += kCtaThreads) {
    float f[N];
    load(xr + j * N, f);
#pragma unroll
    for (int k = 0; k < N; ++k) f[k] = kLog ? f[k] - shift : ex2(fmaf(f[k], kLog2e, -p.m)) * scale;
    store(yr + j * N, f);
  }
}

//===----------------------------------------------------------------------===//
// rms_norm / layer_norm
//===----------------------------------------------------------------------===//

/// Rows held in registers (as softmax_held); w and b are read in the output
/// loop, where every row reads the same vectors (L1/L2 hits), rather than
/// held, which would triple the registers.
template <int kThreads, int kIters, bool kLayer>
__global__ void __launch_bounds__(kCtaThreads)
    norm_held(const bf16* __restrict__ x, const bf16* __restrict__ w, const bf16* __restrict__ b,
              bf16* __restrict__ y, int rows, int cols, float eps) {
  using G = RowGroup<kThreads>;
  __shared__ typename G::Shared sh;
  const int row = G::row();
  if (row >= rows) return;
  const int nvec = cols / kVec;
  const bf16* xr = x + static_cast<size_t>(row) * cols;

  float v[kIters][kVec];
  bool in_row[kIters];  // as in softmax_held
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    in_row[i] = G::rank() + i * kThreads < nvec;
    if (in_row[i]) load(xr + (G::rank() + i * kThreads) * kVec, v[i]);
  }
  const float inv_n = 1.0f / static_cast<float>(cols);
  float mean = 0.0f;
  if constexpr (kLayer) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < kIters; ++i)
      if (in_row[i])
#pragma unroll
        for (int k = 0; k < kVec; ++k) s += v[i][k];
    mean = G::all_reduce(s, Sum{}, sh.slot[0]) * inv_n;
  }
  // Two passes over the registers for layer_norm: the variance of (x - mean)
  // does not cancel the way E[x^2] - mean^2 does, and costs one more barrier.
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kIters; ++i)
    if (in_row[i])
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float d = v[i][k] - mean;
        ss = fmaf(d, d, ss);
      }
  const float rstd = rsqrtf(G::all_reduce(ss, Sum{}, sh.slot[G::kCta ? 1 : 0]) * inv_n + eps);

  bf16* yr = y + static_cast<size_t>(row) * cols;
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int j = G::rank() + i * kThreads;
    if (in_row[i]) {
      float wf[kVec], o[kVec];
      load(w + j * kVec, wf);
      if constexpr (kLayer) {
        float bf[kVec];
        load(b + j * kVec, bf);
#pragma unroll
        for (int k = 0; k < kVec; ++k) o[k] = fmaf((v[i][k] - mean) * rstd, wf[k], bf[k]);
      } else {
#pragma unroll
        for (int k = 0; k < kVec; ++k) o[k] = v[i][k] * rstd * wf[k];
      }
      store(yr + j * kVec, o);
    }
  }
}

/// Any row, read twice. layer_norm's statistics come from one pass of sums
/// shifted by the row's first element K: var = E[(x-K)^2] - E[x-K]^2, which
/// does not cancel catastrophically when |mean| >> stddev, as long as K is
/// a value of the row.
template <int N, bool kLayer>
__global__ void __launch_bounds__(kCtaThreads)
    norm_loop(const bf16* __restrict__ x, const bf16* __restrict__ w, const bf16* __restrict__ b,
              bf16* __restrict__ y, int rows, int cols, float eps) {
  using G = RowGroup<kCtaThreads>;
  __shared__ typename G::Shared sh;
  const int row = blockIdx.x;
  const int n = cols / N;
  const bf16* xr = x + static_cast<size_t>(row) * cols;
  const float shift = kLayer ? __bfloat162float(xr[0]) : 0.0f;
  float s1 = 0.0f, s2 = 0.0f;
#pragma unroll 4
  for (int j = threadIdx.x; j < n; j += kCtaThreads) {
    float f[N];
    load(xr + j * N, f);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float d = f[k] - shift;
      s1 += d;
      s2 = fmaf(d, d, s2);
    }
  }
  const float inv_n = 1.0f / static_cast<float>(cols);
  float mean = 0.0f, var;
  if constexpr (kLayer) {
    // Both sums in one exchange: the pair slot holds (s1, s2).
#pragma unroll
    for (int o = 16; o > 0; o /= 2) {
      s1 += shfl_xor(s1, o);
      s2 += shfl_xor(s2, o);
    }
    if (threadIdx.x % 32 == 0) sh.pair[threadIdx.x / 32] = make_float2(s1, s2);
    __syncthreads();
    s1 = s2 = 0.0f;
#pragma unroll
    for (int i = 0; i < kWarps; ++i) {
      s1 += sh.pair[i].x;
      s2 += sh.pair[i].y;
    }
    const float d = s1 * inv_n;
    mean = shift + d;
    var = fmaxf(s2 * inv_n - d * d, 0.0f);
  } else {
    var = G::all_reduce(s2, Sum{}, sh.slot[0]) * inv_n;
  }
  const float rstd = rsqrtf(var + eps);
  bf16* yr = y + static_cast<size_t>(row) * cols;
#pragma unroll 2
  for (int j = threadIdx.x; j < n; j += kCtaThreads) {
    float f[N], wf[N];
    load(xr + j * N, f);
    load(w + j * N, wf);
    if constexpr (kLayer) {
      float bf[N];
      load(b + j * N, bf);
#pragma unroll
      for (int k = 0; k < N; ++k) f[k] = fmaf((f[k] - mean) * rstd, wf[k], bf[k]);
    } else {
#pragma unroll
      for (int k = 0; k < N; ++k) f[k] = f[k] * rstd * wf[k];
    }
    store(yr + j * N, f);
  }
}

//===----------------------------------------------------------------------===//
// row_sum / cross_entropy: one read of a row of any length and alignment
//===----------------------------------------------------------------------===//

/// Per-thread partials over 16-byte vectors (four loads in flight), the
/// unaligned head and tail (under 8 elements each) by the first threads, then
/// one all-reduce per row.
template <int kThreads>
__global__ void __launch_bounds__(kCtaThreads)
    row_sum(const bf16* __restrict__ x, float* __restrict__ y, int rows, int cols) {
  using G = RowGroup<kThreads>;
  __shared__ typename G::Shared sh;
  const int row = G::row();
  if (row >= rows) return;
  const bf16* xr = x + static_cast<size_t>(row) * cols;
  const Aligned a(xr, cols);
  const int t = G::rank();
  float acc = t < a.head ? __bfloat162float(xr[t]) : 0.0f;
  const bf16* body = xr + a.head;
#pragma unroll 4
  for (int j = t; j < a.nvec; j += kThreads) {
    float f[kVec];
    load(body + j * kVec, f);
    // A tree per vector keeps the dependent chain on acc to one add.
    acc += ((f[0] + f[1]) + (f[2] + f[3])) + ((f[4] + f[5]) + (f[6] + f[7]));
  }
  if (t < a.tail) acc += __bfloat162float(body[a.nvec * kVec + t]);
  acc = G::all_reduce(acc, Sum{}, sh.slot[0]);
  if (t == 0) y[row] = acc;
}

/// loss = log(sum(exp(x))) - x[label], with the max and the sum of
/// exponentials folded online (Online) in the single read of the row.
template <int kThreads>
__global__ void __launch_bounds__(kCtaThreads)
    cross_entropy(const bf16* __restrict__ logits, const int32_t* __restrict__ labels,
                  float* __restrict__ loss, int rows, int vocab) {
  using G = RowGroup<kThreads>;
  __shared__ typename G::Shared sh;
  const int row = G::row();
  if (row >= rows) return;
  const int t = G::rank();
  const int label = t == 0 ? labels[row] : 0;  // issued early; only thread 0 needs it
  const bf16* xr = logits + static_cast<size_t>(row) * vocab;
  const Aligned a(xr, vocab);
  Online p;
  if (t < a.head) {
    const float f[1] = {__bfloat162float(xr[t])};
    p.add(f);
  }
  const bf16* body = xr + a.head;
#pragma unroll 4
  for (int j = t; j < a.nvec; j += kThreads) {
    float f[kVec];
    load(body + j * kVec, f);
    p.add(f);
  }
  if (t < a.tail) {
    const float f[1] = {__bfloat162float(body[a.nvec * kVec + t])};
    p.add(f);
  }
  p = G::all_reduce(p, sh.pair);
  if (t == 0) {
    const bool ok = label >= 0 && label < vocab;
    // The row was just read: x[label] is an L2 hit.
    const float x_label = ok ? __bfloat162float(xr[label]) : __int_as_float(0x7fc00000);
    loss[row] = (p.m + __log2f(p.s)) * kLn2 - x_label;
  }
}

}  // namespace pallas_ref::kernels

//===----------------------------------------------------------------------===//
// Host entry points
//===----------------------------------------------------------------------===//

namespace pallas_ref {
namespace {

using kernels::kCtaThreads;

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
int cdiv(int a, int b) { return (a + b - 1) / b; }

template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), int grid, cudaStream_t stream, Args... args) {
  kernel<<<grid, kCtaThreads, 0, stream>>>(args...);
  return cudaGetLastError();
}

/// Which kernel shape a row of `cols` gets (see the top of the file).
enum class Shape { kWarp1, kWarp2, kWarp4, kCta2, kCta4, kLoop8, kLoop1 };
Shape shape_for(int cols, bool vec) {
  if (!vec) return Shape::kLoop1;
  if (cols <= 32 * 8 * 1) return Shape::kWarp1;
  if (cols <= 32 * 8 * 2) return Shape::kWarp2;
  if (cols <= 32 * 8 * 4) return Shape::kWarp4;
  if (cols <= kCtaThreads * 8 * 2) return Shape::kCta2;
  if (cols <= kCtaThreads * 8 * 4) return Shape::kCta4;
  return Shape::kLoop8;
}

bool bad_sizes(int rows, int cols) { return rows < 0 || cols < 0; }

template <bool kLog>
cudaError_t softmax_any(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols,
                        cudaStream_t s) {
  using namespace kernels;
  if (bad_sizes(rows, cols)) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool vec = cols % 8 == 0 && aligned16(x) && aligned16(y);
  const int warp_grid = cdiv(rows, kCtaThreads / 32);
  switch (shape_for(cols, vec)) {
    case Shape::kWarp1:
      return launch(softmax_held<32, 1, kLog>, warp_grid, s, x, y, rows, cols);
    case Shape::kWarp2:
      return launch(softmax_held<32, 2, kLog>, warp_grid, s, x, y, rows, cols);
    case Shape::kWarp4:
      return launch(softmax_held<32, 4, kLog>, warp_grid, s, x, y, rows, cols);
    case Shape::kCta2:
      return launch(softmax_held<128, 2, kLog>, rows, s, x, y, rows, cols);
    case Shape::kCta4:
      return launch(softmax_held<128, 4, kLog>, rows, s, x, y, rows, cols);
    case Shape::kLoop8:
      return launch(softmax_loop<8, kLog>, rows, s, x, y, rows, cols);
    case Shape::kLoop1:
      return launch(softmax_loop<1, kLog>, rows, s, x, y, rows, cols);
  }
  return cudaErrorInvalidValue;
}

template <bool kLayer>
cudaError_t norm_any(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                     __nv_bfloat16* y, int rows, int cols, float eps, cudaStream_t s) {
  using namespace kernels;
  if (bad_sizes(rows, cols)) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  const bool vec =
      cols % 8 == 0 && aligned16(x) && aligned16(w) && aligned16(y) && (!kLayer || aligned16(b));
  const int warp_grid = cdiv(rows, kCtaThreads / 32);
  switch (shape_for(cols, vec)) {
    case Shape::kWarp1:
      return launch(norm_held<32, 1, kLayer>, warp_grid, s, x, w, b, y, rows, cols, eps);
    case Shape::kWarp2:
      return launch(norm_held<32, 2, kLayer>, warp_grid, s, x, w, b, y, rows, cols, eps);
    case Shape::kWarp4:
      return launch(norm_held<32, 4, kLayer>, warp_grid, s, x, w, b, y, rows, cols, eps);
    case Shape::kCta2:
      return launch(norm_held<128, 2, kLayer>, rows, s, x, w, b, y, rows, cols, eps);
    case Shape::kCta4:
      return launch(norm_held<128, 4, kLayer>, rows, s, x, w, b, y, rows, cols, eps);
    case Shape::kLoop8:
      return launch(norm_loop<8, kLayer>, rows, s, x, w, b, y, rows, cols, eps);
    case Shape::kLoop1:
      return launch(norm_loop<1, kLayer>, rows, s, x, w, b, y, rows, cols, eps);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

cudaError_t softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols,
                         cudaStream_t stream) {
  return softmax_any<false>(x, y, rows, cols, stream);
}

cudaError_t log_softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols,
                             cudaStream_t stream) {
  return softmax_any<true>(x, y, rows, cols, stream);
}

cudaError_t rms_norm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                          int rows, int cols, float eps, cudaStream_t stream) {
  return norm_any<false>(x, w, nullptr, y, rows, cols, eps, stream);
}

cudaError_t layer_norm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                            __nv_bfloat16* y, int rows, int cols, float eps, cudaStream_t stream) {
  return norm_any<true>(x, w, b, y, rows, cols, eps, stream);
}

cudaError_t row_sum_bf16(const __nv_bfloat16* x, float* y, int rows, int cols,
                         cudaStream_t stream) {
  using namespace kernels;
  if (bad_sizes(rows, cols)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  // Short rows: a warp each, no barrier; the zero-length row sums to 0.
  if (cols <= 1024)
    return launch(row_sum<32>, cdiv(rows, kCtaThreads / 32), stream, x, y, rows, cols);
  return launch(row_sum<kCtaThreads>, rows, stream, x, y, rows, cols);
}

cudaError_t cross_entropy_bf16(const __nv_bfloat16* logits, const int32_t* labels, float* loss,
                               int rows, int vocab, cudaStream_t stream) {
  using namespace kernels;
  if (bad_sizes(rows, vocab)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (vocab <= 1024)
    return launch(cross_entropy<32>, cdiv(rows, kCtaThreads / 32), stream, logits, labels, loss,
                  rows, vocab);
  return launch(cross_entropy<kCtaThreads>, rows, stream, logits, labels, loss, rows, vocab);
}

}  // namespace pallas_ref

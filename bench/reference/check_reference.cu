// check_reference: runs every reference kernel (reference_kernels.h) on a GPU
// against a float64 CPU reference, over shapes that reach each of its paths
// (a warp per row, a CTA holding the row, the loop; aligned and unaligned
// rows). Prints the worst error per op and exits 1 on a failure; without a
// device it says so and exits 0. Run it before timing the kernels.
#include "../cuda_check.h"
#include "reference_kernels.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

using bf16 = __nv_bfloat16;

template <class T>
struct Device {
  T* base = nullptr;
  T* p = nullptr;
  size_t n = 0;
  // `offset` elements past a 256-byte aligned allocation: unaligned rows.
  explicit Device(size_t count, size_t offset = 0) : n(count) {
    CHECK_CUDA(cudaMalloc(&base, (count + offset + 1) * sizeof(T)));
    p = base + offset;
  }
  ~Device() { cudaFree(base); }
  void put(const std::vector<T>& h) {
    CHECK_CUDA(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  std::vector<T> get() const {
    std::vector<T> h(n);
    CHECK_CUDA(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
};

std::mt19937 rng(1234);

std::vector<bf16> random_bf16(size_t n, float lo = -2.0f, float hi = 2.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<bf16> v(n);
  for (auto& x : v) x = __float2bfloat16(d(rng));
  return v;
}

double f(bf16 x) { return static_cast<double>(__bfloat162float(x)); }

/// Worst |got - want| / scale over an op, scale = max(|want|, floor) unless
/// given; NaN counts as infinite.
struct Worst {
  double err = 0.0;
  void add(double got, double want, double floor) {
    add_scaled(got, want, std::max(std::fabs(want), floor));
  }
  void add_scaled(double got, double want, double scale) {
    double e = std::fabs(got - want) / scale;
    if (std::isnan(got) || std::isnan(e)) e = INFINITY;
    err = std::max(err, e);
  }
};

int failures = 0;

void report(const std::string& what, const Worst& w, double tol) {
  bool ok = w.err <= tol;
  failures += !ok;
  std::printf("%-44s worst error %.3g (tolerance %.0e): %s\n", what.c_str(), w.err, tol,
              ok ? "OK" : "FAIL");
}

// Shapes: (rows, cols) reaching every kernel shape of reference_kernels.cu.
const std::vector<std::pair<int, int>> kRowShapes = {{37, 8},    {33, 256}, {9, 512},  {7, 1000},
                                                     {5, 1024},  {6, 2048}, {3, 4096}, {3, 4000},
                                                     {2, 12288}, {4, 1001}, {3, 5003}, {1, 1}};

void check_softmax(bool log) {
  Worst w;
  for (auto [rows, cols] : kRowShapes) {
    size_t n = size_t(rows) * cols;
    auto hx = random_bf16(n, -4.0f, 4.0f);
    Device<bf16> x(n), y(n);
    x.put(hx);
    CHECK_CUDA((log ? pallas_ref::log_softmax_bf16 : pallas_ref::softmax_bf16)(x.p, y.p, rows, cols,
                                                                               nullptr));
    auto hy = y.get();
    for (int r = 0; r < rows; ++r) {
      double m = -INFINITY, s = 0.0;
      for (int c = 0; c < cols; ++c) m = std::max(m, f(hx[size_t(r) * cols + c]));
      for (int c = 0; c < cols; ++c) s += std::exp(f(hx[size_t(r) * cols + c]) - m);
      for (int c = 0; c < cols; ++c) {
        double xv = f(hx[size_t(r) * cols + c]);
        double want = log ? xv - m - std::log(s) : std::exp(xv - m) / s;
        w.add(f(hy[size_t(r) * cols + c]), want, log ? 1e-2 : 1e-30);
      }
    }
  }
  report(log ? "log_softmax_bf16" : "softmax_bf16", w, 1e-2);
}

void check_norm(bool layer) {
  Worst w;
  const float eps = 1e-5f;
  for (auto [rows, cols] : kRowShapes) {
    size_t n = size_t(rows) * cols;
    auto hx = random_bf16(n, -1.0f, 3.0f), hw = random_bf16(cols), hb = random_bf16(cols);
    Device<bf16> x(n), y(n), dw(cols), db(cols);
    x.put(hx);
    dw.put(hw);
    db.put(hb);
    CHECK_CUDA(layer ? pallas_ref::layer_norm_bf16(x.p, dw.p, db.p, y.p, rows, cols, eps, nullptr)
                     : pallas_ref::rms_norm_bf16(x.p, dw.p, y.p, rows, cols, eps, nullptr));
    auto hy = y.get();
    for (int r = 0; r < rows; ++r) {
      const bf16* xr = &hx[size_t(r) * cols];
      double mean = 0.0, var = 0.0;
      if (layer) {
        for (int c = 0; c < cols; ++c) mean += f(xr[c]);
        mean /= cols;
      }
      for (int c = 0; c < cols; ++c) var += (f(xr[c]) - mean) * (f(xr[c]) - mean);
      double rstd = 1.0 / std::sqrt(var / cols + eps);
      for (int c = 0; c < cols; ++c) {
        double want = (f(xr[c]) - mean) * rstd * f(hw[c]) + (layer ? f(hb[c]) : 0.0);
        w.add(f(hy[size_t(r) * cols + c]), want, 1e-2);
      }
    }
  }
  report(layer ? "layer_norm_bf16" : "rms_norm_bf16", w, 1e-2);
}

void check_row_sum() {
  Worst w;
  for (auto [rows, cols] : std::vector<std::pair<int, int>>{
           {41, 0}, {41, 1}, {33, 7}, {17, 100}, {9, 1024}, {5, 1025}, {3, 65536}, {2, 100003}}) {
    for (int offset : {0, 3}) {  // offset 3: every row starts off a 16-byte boundary
      size_t n = size_t(rows) * cols;
      auto hx = random_bf16(n);
      Device<bf16> x(n, offset);
      Device<float> y(rows);
      x.put(hx);
      CHECK_CUDA(pallas_ref::row_sum_bf16(x.p, y.p, rows, cols, nullptr));
      auto hy = y.get();
      for (int r = 0; r < rows; ++r) {
        double want = 0.0, mag = 0.0;
        for (int c = 0; c < cols; ++c) {
          want += f(hx[size_t(r) * cols + c]);
          mag += std::fabs(f(hx[size_t(r) * cols + c]));
        }
        // f32 accumulation: error relative to the sum of magnitudes.
        w.add_scaled(hy[r], want, std::max(mag, 1.0));
      }
    }
  }
  report("row_sum_bf16 (error / sum |x|)", w, 1e-5);
}

void check_cross_entropy() {
  Worst w;
  for (auto [rows, vocab] : std::vector<std::pair<int, int>>{
           {37, 8}, {9, 1000}, {5, 1024}, {4, 1031}, {3, 32000}, {2, 128257}}) {
    for (int offset : {0, 1}) {
      size_t n = size_t(rows) * vocab;
      auto hx = random_bf16(n, -8.0f, 8.0f);
      std::vector<int32_t> hl(rows);
      for (int r = 0; r < rows; ++r) hl[r] = int32_t(rng() % vocab);
      hl[0] = vocab;  // out of range: NaN
      Device<bf16> x(n, offset);
      Device<int32_t> labels(rows);
      Device<float> loss(rows);
      x.put(hx);
      labels.put(hl);
      CHECK_CUDA(pallas_ref::cross_entropy_bf16(x.p, labels.p, loss.p, rows, vocab, nullptr));
      auto got = loss.get();
      if (!std::isnan(got[0])) w.err = INFINITY;
      for (int r = 1; r < rows; ++r) {
        const bf16* xr = &hx[size_t(r) * vocab];
        double m = -INFINITY, s = 0.0;
        for (int c = 0; c < vocab; ++c) m = std::max(m, f(xr[c]));
        for (int c = 0; c < vocab; ++c) s += std::exp(f(xr[c]) - m);
        w.add(got[r], m + std::log(s) - f(xr[hl[r]]), 1.0);
      }
    }
  }
  report("cross_entropy_bf16 (and NaN for a bad label)", w, 1e-4);
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("check_reference: no CUDA device, nothing checked\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("check_reference on %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
  check_softmax(false);
  check_softmax(true);
  check_norm(false);
  check_norm(true);
  check_row_sum();
  check_cross_entropy();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("%s\n", failures ? "FAILED" : "all OK");
  return failures ? 1 : 0;
}

// custom_kernel: run the SwiGLU kernel declared in swiglu.cc on the host and
// emulator backends, and on the GPU when there is one (buffers in
// thrust::device_vector), compare it with a float64 reference, and show the
// status a bad call gets.

#include <pallas/kernels.h>         // the prebuilt ops
#include <pallas/kernels/swiglu.h>  // generated from swiglu.cc at build time
#include <pallas/thrust.h>          // views of thrust::device_vector

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  // gate and up are the halves of one [rows, 2 d] projection: views with row stride 2 d.
  const int64_t rows = 37, d = 300;  // not multiples of the 8 x 256 tile
  std::vector<float> proj(rows * 2 * d), y(rows * d);
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-4, 4);
  for (float& v : proj) v = dist(rng);
  using pallas::TensorView;
  TensorView<const float, 2> gate(proj.data(), {rows, d}, {2 * d, 1});
  TensorView<const float, 2> up(proj.data() + d, {rows, d}, {2 * d, 1});

  int failures = 0;
  std::vector<pallas::Backend> backends{pallas::Backend::kHost, pallas::Backend::kEmulator};
  if (pallas::cuda_device_available()) backends.push_back(pallas::Backend::kCuda);
  for (pallas::Backend backend : backends) {
    std::fill(y.begin(), y.end(), std::nanf(""));  // poisoned: every element must be written
    pallas::Status s;
    if (backend == pallas::Backend::kCuda) {
      // Device buffers as a C++ CUDA program usually holds them; the views keep their sizes.
      thrust::device_vector<float> proj_d(proj.begin(), proj.end()), y_d(y.begin(), y.end());
      // up starts d elements in: a view from a pointer (not checked against the vector's size).
      const float* up_d = thrust::raw_pointer_cast(proj_d.data()) + d;
      s = pallas::kernels::swiglu(TensorView<const float, 2>(proj_d, {rows, d}, {2 * d, 1}),
                                  TensorView<const float, 2>(up_d, {rows, d}, {2 * d, 1}),
                                  TensorView<float, 2>(y_d, {rows, d}), {backend});
      thrust::copy(y_d.begin(), y_d.end(), y.begin());  // waits for the kernel
    } else {
      s = pallas::kernels::swiglu(gate, up, TensorView<float, 2>(y.data(), {rows, d}), {backend});
    }
    if (!s.ok()) {
      std::printf("%s: error: %s\n", pallas::to_string(backend), s.message().c_str());
      ++failures;
      continue;
    }
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < d; ++c) {
        const double g = proj[r * 2 * d + c], u = proj[r * 2 * d + d + c];
        const double want = g / (1 + std::exp(-g)) * u;
        const double got = y[r * d + c];
        const double err = std::abs(got - want) / (1e-3 + std::abs(want));
        worst = std::isnan(got) ? INFINITY : std::max(worst, err);
      }
    const bool ok = worst < 1e-5;
    failures += !ok;
    std::printf("swiglu on %s: worst relative error %.2e: %s\n", pallas::to_string(backend), worst,
                ok ? "OK" : "WRONG");
  }

  // The same as two prebuilt ops, silu then mul, in two passes (row 0: contiguous 1-D views);
  // a user's kernels and the prebuilt ones share one runtime in one program.
  std::vector<float> silu_gate(d), two_pass(d);
  pallas::Status s =
      pallas::kernels::silu(TensorView<const float, 1>(proj.data(), {d}),
                            TensorView<float, 1>(silu_gate.data(), {d}), {pallas::Backend::kHost});
  if (s.ok())
    s = pallas::kernels::mul(TensorView<const float, 1>(silu_gate.data(), {d}),
                             TensorView<const float, 1>(proj.data() + d, {d}),
                             TensorView<float, 1>(two_pass.data(), {d}), {pallas::Backend::kHost});
  double worst_two_pass = s.ok() ? 0 : INFINITY;
  for (int64_t c = 0; s.ok() && c < d; ++c)
    worst_two_pass = std::max(worst_two_pass, std::abs(two_pass[c] - y[c]) /
                                                  (1e-3 + std::abs(static_cast<double>(y[c]))));
  std::printf("silu then mul (prebuilt ops) vs swiglu, row 0: worst relative error %.2e: %s\n",
              worst_two_pass, worst_two_pass < 1e-5 ? "OK" : "WRONG");
  failures += !(worst_two_pass < 1e-5);

  // A bad call: up has one column too few. The entry point names the operand and the dim.
  pallas::Status bad = pallas::kernels::swiglu(
      gate, TensorView<const float, 2>(proj.data() + d, {rows, d - 1}, {2 * d, 1}),
      TensorView<float, 2>(y.data(), {rows, d}), {pallas::Backend::kHost});
  std::printf("a bad call: %s\n", bad.message().c_str());
  failures += bad.ok();
  return failures == 0 ? 0 : 1;
}

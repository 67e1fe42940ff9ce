// quickstart: call two prebuilt ops, out = gelu(x + y), and check the result.
//
// Runs on the CUDA backend when a device is present, otherwise on the host
// backend, and says which. The backend is always chosen explicitly per call.

#include <pallas/kernels.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

int main() {
  const int64_t n = 1000003;  // any size: edge blocks are masked
  std::vector<float> x(n), y(n), out(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::sin(0.001f * i);
    y[i] = 0.5f * std::cos(0.003f * i);
  }

  const bool gpu = pallas::cuda_device_available();
  const pallas::Launch launch{gpu ? pallas::Backend::kCuda : pallas::Backend::kHost, nullptr};
  std::cout << "backend: " << pallas::to_string(launch.backend)
            << (gpu ? "" : " (no CUDA device found)") << "\n";

  // Device buffers on the CUDA backend; the host backend works on host memory.
  float *dx = x.data(), *dy = y.data(), *dsum = nullptr, *dout = out.data();
  std::vector<float> sum_host(gpu ? 0 : n);
  if (gpu) {
    cudaMalloc(&dx, n * sizeof(float));
    cudaMalloc(&dy, n * sizeof(float));
    cudaMalloc(&dsum, n * sizeof(float));
    cudaMalloc(&dout, n * sizeof(float));
    cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  } else {
    dsum = sum_host.data();
  }

  using pallas::TensorView;
  pallas::Status s =
      pallas::kernels::add(TensorView<const float, 1>(dx, {n}), TensorView<const float, 1>(dy, {n}),
                           TensorView<float, 1>(dsum, {n}), launch);
  if (s.ok())
    s = pallas::kernels::gelu(TensorView<const float, 1>(dsum, {n}),
                              TensorView<float, 1>(dout, {n}), launch);
  if (!s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  if (gpu) {
    cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost);  // synchronizes
    for (float* p : {dx, dy, dsum, dout}) cudaFree(p);
  }

  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    double v = double(x[i]) + y[i];
    double want = 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
    worst = std::max(worst, std::abs(out[i] - want) / (1e-6 + std::abs(want)));
  }
  std::printf("gelu(x + y)[0..3] = %.6f %.6f %.6f %.6f\n", out[0], out[1], out[2], out[3]);
  std::printf("%lld elements, worst relative error %.2e: %s\n", static_cast<long long>(n), worst,
              worst < 1e-5 ? "OK" : "WRONG");
  return worst < 1e-5 ? 0 : 1;
}

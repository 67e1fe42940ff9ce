// pallas_bench: times every prebuilt op on the CUDA backend against the
// device-to-device copy bandwidth measured in the same run (DESIGN.md section 7).
//
//   pallas_bench [--csv FILE] [--max-mib N] [--reps N]
//
// For each op, dtype and size: CUDA-event time per launch (median over
// repetitions, after warm-up), rotating over enough input sets that their
// footprint exceeds the L2 cache; the bytes every launch must move, counted by
// hand (each input read once, each output written once); achieved GB/s; and
// that as a fraction of the copy bandwidth. A table is printed last; --csv
// writes the same rows for bench/compare.py. Without a device it says so and
// exits 0.

#include <pallas/kernels.h>
#include "cuda_check.h"
#include "launch_text.h"
#include "timing.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace {

void check(const pallas::Status& s, const std::string& what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what.c_str(), s.message().c_str());
    std::exit(1);
  }
}

/// Device memory filled with uniform random values in [-2, 2) of element type T.
template <class T>
struct DeviceArray {
  T* data = nullptr;
  int64_t count = 0;
  DeviceArray(int64_t n, std::mt19937& rng) : count(n) {
    CHECK_CUDA(cudaMalloc(&data, std::max<int64_t>(n, 1) * sizeof(T)));
    std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
    std::vector<T> host(static_cast<size_t>(n));
    for (T& v : host) v = T(dist(rng));
    CHECK_CUDA(cudaMemcpy(data, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  explicit DeviceArray(const std::vector<T>& host) : count(static_cast<int64_t>(host.size())) {
    CHECK_CUDA(cudaMalloc(&data, std::max<int64_t>(count, 1) * sizeof(T)));
    CHECK_CUDA(cudaMemcpy(data, host.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : data(o.data), count(o.count) { o.data = nullptr; }
  ~DeviceArray() {
    if (data) cudaFree(data);
  }
};

struct Row {
  std::string op, dtype, shape;
  double bytes, ms;
  std::string instance = {};  // the kernel that ran (Launch::record), e.g. a split-row path
};

/// Where every launch of the benchmark records the kernel it ran.
pallas::LaunchRecord g_record;

/// A launch on the default stream that records what it ran in g_record.
pallas::Launch bench_launch() {
  pallas::Launch launch{pallas::Backend::kCuda, nullptr};
  launch.record = &g_record;
  return launch;
}

/// Adds `row` (timed: its launches ran) with the kernel its last launch ran.
void add_row(std::vector<Row>& rows, Row row) {
  row.instance = g_record.instance ? g_record.instance : "?";
  row.instance += fallback_text(g_record);  // a direct twin ran: say why
  rows.push_back(std::move(row));
}

/// Input sets to rotate over so that their footprint exceeds the L2 cache.
int rotation(double bytes_per_set, int64_t l2_bytes) {
  return static_cast<int>(std::clamp<double>(3.0 * l2_bytes / bytes_per_set + 1, 1, 8));
}

template <class T>
const char* dtype_name() {
  return pallas::to_string(pallas::dtype_of_v<T>);
}

template <class T>
void bench_1d(std::vector<Row>& rows, int64_t n, int reps, int64_t l2, std::mt19937& rng) {
  using pallas::TensorView;
  const double set_bytes = 3.0 * n * sizeof(T);
  const int sets = rotation(set_bytes, l2);
  std::vector<DeviceArray<T>> x, y, out;
  for (int s = 0; s < sets; ++s) {
    x.emplace_back(n, rng);
    y.emplace_back(n, rng);
    out.emplace_back(n, rng);
  }
  const pallas::Launch launch = bench_launch();
  auto cx = [&](int i) { return TensorView<const T, 1>(x[i % sets].data, {n}); };
  auto cy = [&](int i) { return TensorView<const T, 1>(y[i % sets].data, {n}); };
  auto mo = [&](int i) { return TensorView<T, 1>(out[i % sets].data, {n}); };
  auto my = [&](int i) { return TensorView<T, 1>(y[i % sets].data, {n}); };
  const std::string shape = std::to_string(n);
  const double e = sizeof(T);
  add_row(
      rows,
      {"add", dtype_name<T>(), shape, 3 * e * n,
       median_ms([&](int i) { check(pallas::kernels::add(cx(i), cy(i), mo(i), launch), "add"); },
                 reps)});
  add_row(
      rows,
      {"mul", dtype_name<T>(), shape, 3 * e * n,
       median_ms([&](int i) { check(pallas::kernels::mul(cx(i), cy(i), mo(i), launch), "mul"); },
                 reps)});
  add_row(
      rows,
      {"axpy", dtype_name<T>(), shape, 3 * e * n,
       median_ms([&](int i) { check(pallas::kernels::axpy(1e-3f, cx(i), my(i), launch), "axpy"); },
                 reps)});
  add_row(rows,
          {"gelu", dtype_name<T>(), shape, 2 * e * n,
           median_ms([&](int i) { check(pallas::kernels::gelu(cx(i), mo(i), launch), "gelu"); },
                     reps)});
  add_row(rows,
          {"silu", dtype_name<T>(), shape, 2 * e * n,
           median_ms([&](int i) { check(pallas::kernels::silu(cx(i), mo(i), launch), "silu"); },
                     reps)});
  // Whole-array reductions: one launch, programs combine through a grid semaphore.
  DeviceArray<T> result(1, rng);
  TensorView<T, 1> one(result.data, {1});
  add_row(rows,
          {"sum_all", dtype_name<T>(), shape, e * n,
           median_ms([&](int i) { check(pallas::kernels::sum_all(cx(i), one, launch), "sum_all"); },
                     reps)});
  add_row(rows,
          {"max_all", dtype_name<T>(), shape, e * n,
           median_ms([&](int i) { check(pallas::kernels::max_all(cx(i), one, launch), "max_all"); },
                     reps)});
}

template <class T>
void bench_bias_gelu(std::vector<Row>& rows, int64_t r, int64_t c, int reps, int64_t l2,
                     std::mt19937& rng) {
  using pallas::TensorView;
  const int sets = rotation(2.0 * r * c * sizeof(T), l2);
  std::vector<DeviceArray<T>> x, b, out;
  for (int s = 0; s < sets; ++s) {
    x.emplace_back(r * c, rng);
    b.emplace_back(c, rng);
    out.emplace_back(r * c, rng);
  }
  const pallas::Launch launch = bench_launch();
  add_row(rows, {"bias_gelu", dtype_name<T>(), std::to_string(r) + "x" + std::to_string(c),
                 double(sizeof(T)) * (2.0 * r * c + c),
                 median_ms(
                     [&](int i) {
                       check(pallas::kernels::bias_gelu(
                                 TensorView<const T, 2>(x[i % sets].data, {r, c}),
                                 TensorView<const T, 1>(b[i % sets].data, {c}),
                                 TensorView<T, 2>(out[i % sets].data, {r, c}), launch),
                             "bias_gelu");
                     },
                     reps)});
}

template <class From, class To>
void bench_cast(std::vector<Row>& rows, int64_t n, int reps, int64_t l2, std::mt19937& rng) {
  using pallas::TensorView;
  const int sets = rotation(double(n) * (sizeof(From) + sizeof(To)), l2);
  std::vector<DeviceArray<From>> x;
  std::vector<DeviceArray<To>> out;
  for (int s = 0; s < sets; ++s) {
    x.emplace_back(n, rng);
    out.emplace_back(n, rng);
  }
  const pallas::Launch launch = bench_launch();
  add_row(rows,
          {"cast", std::string(dtype_name<From>()) + "->" + dtype_name<To>(), std::to_string(n),
           double(n) * (sizeof(From) + sizeof(To)),
           median_ms(
               [&](int i) {
                 check(pallas::kernels::cast(TensorView<const From, 1>(x[i % sets].data, {n}),
                                             TensorView<To, 1>(out[i % sets].data, {n}), launch),
                       "cast");
               },
               reps)});
}

/// Row ops over [rows, cols]: the fewest bytes are x read once and y written
/// once (plus the weights, once per launch).
template <class T>
void bench_rows(std::vector<Row>& rows, int64_t r, int64_t c, int reps, int64_t l2,
                std::mt19937& rng) {
  using pallas::TensorView;
  const double e = sizeof(T), mat = double(r) * c;
  const int sets = rotation(2.0 * e * mat, l2);
  std::vector<DeviceArray<T>> x, y, res, h, w, b;
  std::vector<DeviceArray<T>> sums;
  for (int s = 0; s < sets; ++s) {
    x.emplace_back(r * c, rng);
    y.emplace_back(r * c, rng);
    res.emplace_back(r * c, rng);
    h.emplace_back(r * c, rng);
    w.emplace_back(c, rng);
    b.emplace_back(c, rng);
    sums.emplace_back(r, rng);
  }
  const pallas::Launch launch = bench_launch();
  auto cx = [&](int i) { return TensorView<const T, 2>(x[i % sets].data, {r, c}); };
  auto my = [&](int i) { return TensorView<T, 2>(y[i % sets].data, {r, c}); };
  auto cr = [&](int i) { return TensorView<const T, 2>(res[i % sets].data, {r, c}); };
  auto mh = [&](int i) { return TensorView<T, 2>(h[i % sets].data, {r, c}); };
  auto ms = [&](int i) { return TensorView<T, 1>(sums[i % sets].data, {r}); };
  auto cw = [&](int i) { return TensorView<const T, 1>(w[i % sets].data, {c}); };
  auto cb = [&](int i) { return TensorView<const T, 1>(b[i % sets].data, {c}); };
  const std::string shape = std::to_string(r) + "x" + std::to_string(c);
  const char* t = dtype_name<T>();
  add_row(rows, {"rms_norm", t, shape, e * (2 * mat + c),
                 median_ms(
                     [&](int i) {
                       check(pallas::kernels::rms_norm(cx(i), cw(i), 1e-5f, my(i), launch),
                             "rms_norm");
                     },
                     reps)});
  add_row(rows, {"layer_norm", t, shape, e * (2 * mat + 2 * c),
                 median_ms(
                     [&](int i) {
                       check(pallas::kernels::layer_norm(cx(i), cw(i), cb(i), 1e-5f, my(i), launch),
                             "layer_norm");
                     },
                     reps)});
  // Fused residual: reads x and r, writes y and h = x + r.
  add_row(rows, {"rms_norm_residual", t, shape, e * (4 * mat + c),
                 median_ms(
                     [&](int i) {
                       check(pallas::kernels::rms_norm_residual(cx(i), cr(i), cw(i), 1e-5f, my(i),
                                                                mh(i), launch),
                             "rms_norm_residual");
                     },
                     reps)});
  add_row(rows, {"layer_norm_residual", t, shape, e * (4 * mat + 2 * c),
                 median_ms(
                     [&](int i) {
                       check(pallas::kernels::layer_norm_residual(cx(i), cr(i), cw(i), cb(i), 1e-5f,
                                                                  my(i), mh(i), launch),
                             "layer_norm_residual");
                     },
                     reps)});
  add_row(
      rows,
      {"softmax", t, shape, e * 2 * mat,
       median_ms([&](int i) { check(pallas::kernels::softmax(cx(i), my(i), launch), "softmax"); },
                 reps)});
  add_row(
      rows,
      {"log_softmax", t, shape, e * 2 * mat,
       median_ms(
           [&](int i) { check(pallas::kernels::log_softmax(cx(i), my(i), launch), "log_softmax"); },
           reps)});
  add_row(
      rows,
      {"row_sum", t, shape, e * (mat + r),
       median_ms([&](int i) { check(pallas::kernels::row_sum(cx(i), ms(i), launch), "row_sum"); },
                 reps)});
  add_row(
      rows,
      {"row_max", t, shape, e * (mat + r),
       median_ms([&](int i) { check(pallas::kernels::row_max(cx(i), ms(i), launch), "row_max"); },
                 reps)});
  // Rows past 512 elements: the rows path stages its chunks with a TMA pipeline on
  // sm_90a; rows of c - 1 elements (a row stride TMA cannot copy) take its direct twin.
  if (c > 512) {
    auto odd = [&](int i) { return TensorView<const T, 2>(x[i % sets].data, {r, c - 1}); };
    add_row(rows,
            {"row_sum", t, std::to_string(r) + "x" + std::to_string(c - 1) + " (direct)",
             e * (double(r) * (c - 1) + r),
             median_ms(
                 [&](int i) { check(pallas::kernels::row_sum(odd(i), ms(i), launch), "row_sum"); },
                 reps)});
  }
}

/// cross_entropy over [rows, vocab] logits: reads the logits once, the labels, writes the loss.
template <class T>
void bench_cross_entropy(std::vector<Row>& rows, int64_t r, int64_t v, int reps, int64_t l2,
                         std::mt19937& rng) {
  using pallas::TensorView;
  const double e = sizeof(T), mat = double(r) * v;
  const int sets = rotation(e * mat, l2);
  // Labels below v - 1: valid for the direct rows of v - 1 too.
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(v - 2));
  std::vector<int32_t> host_labels(static_cast<size_t>(r));
  for (int32_t& l : host_labels) l = pick(rng);
  std::vector<DeviceArray<T>> logits;
  for (int s = 0; s < sets; ++s) logits.emplace_back(r * v, rng);
  DeviceArray<int32_t> labels(host_labels);
  DeviceArray<float> loss(r, rng);
  const pallas::Launch launch = bench_launch();
  // A vocabulary of v - 1 (a row stride TMA cannot copy) takes the direct twin.
  for (int64_t cols : {v, v - 1})
    add_row(rows, {"cross_entropy", dtype_name<T>(),
                   std::to_string(r) + "x" + std::to_string(cols) + (cols == v ? "" : " (direct)"),
                   e * double(r) * cols + 8.0 * r,
                   median_ms(
                       [&](int i) {
                         check(pallas::kernels::cross_entropy(
                                   TensorView<const T, 2>(logits[i % sets].data, {r, cols}),
                                   TensorView<const int32_t, 1>(labels.data, {r}),
                                   TensorView<float, 1>(loss.data, {r}), launch),
                               "cross_entropy");
                       },
                       reps)});
}

/// transpose of [r, c]: reads x once and writes y once. Shapes that are multiples of 16 bytes
/// per row take the TMA instance on sm_90a; `odd` (c - 1 columns) its direct twin.
template <class T>
void bench_transpose(std::vector<Row>& rows, int64_t r, int64_t c, int reps, int64_t l2,
                     std::mt19937& rng) {
  using pallas::TensorView;
  const double e = sizeof(T), mat = double(r) * c;
  const int sets = rotation(2.0 * e * mat, l2);
  std::vector<DeviceArray<T>> x, y;
  for (int s = 0; s < sets; ++s) {
    x.emplace_back(r * c, rng);
    y.emplace_back(r * c, rng);
  }
  const pallas::Launch launch = bench_launch();
  for (int64_t cols : {c, c - 1}) {
    add_row(rows, {"transpose", dtype_name<T>(),
                   std::to_string(r) + "x" + std::to_string(cols) + (cols == c ? "" : " (direct)"),
                   2.0 * e * double(r) * cols,
                   median_ms(
                       [&](int i) {
                         check(pallas::kernels::transpose(
                                   TensorView<const T, 2>(x[i % sets].data, {r, cols}),
                                   TensorView<T, 2>(y[i % sets].data, {cols, r}), launch),
                               "transpose");
                       },
                       reps)});
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv;
  int64_t max_mib = 2048;
  int reps = 50;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--csv" && i + 1 < argc)
      csv = argv[++i];
    else if (a == "--max-mib" && i + 1 < argc)
      max_mib = std::atoll(argv[++i]);
    else if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: pallas_bench [--csv FILE] [--max-mib N] [--reps N]\n");
      return 2;
    }
  }
  if (!pallas::cuda_device_available()) {
    std::printf("pallas_bench: no CUDA device; nothing measured\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  const int64_t l2 = prop.l2CacheSize;
  std::printf("device: %s, sm_%d%d, %d SMs, L2 %lld MiB\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount, static_cast<long long>(l2 >> 20));

  // The ceiling: a large device-to-device copy, counting bytes read and written.
  const int64_t copy_bytes = std::min<int64_t>(max_mib, 1024) << 20;
  void *src = nullptr, *dst = nullptr;
  CHECK_CUDA(cudaMalloc(&src, copy_bytes));
  CHECK_CUDA(cudaMalloc(&dst, copy_bytes));
  CHECK_CUDA(cudaMemset(src, 1, copy_bytes));
  const double copy_ms = median_ms(
      [&](int) { CHECK_CUDA(cudaMemcpyAsync(dst, src, copy_bytes, cudaMemcpyDeviceToDevice)); },
      20);
  const double copy_gbs = 2.0 * copy_bytes / (copy_ms * 1e6);
  CHECK_CUDA(cudaFree(src));
  CHECK_CUDA(cudaFree(dst));
  std::printf("device-to-device copy: %.1f GB/s (%.1f MiB, read + write)\n", copy_gbs,
              copy_bytes / 1048576.0);

  std::mt19937 rng(12345);
  std::vector<Row> rows;
  // Sizes from latency-bound to a few GB of traffic (largest: 3 f32 arrays <= max_mib).
  for (int64_t n = int64_t{1} << 12; 12 * n <= (max_mib << 20); n <<= 4) {
    bench_1d<float>(rows, n, reps, l2, rng);
    bench_1d<pallas::half>(rows, n, reps, l2, rng);
    bench_1d<pallas::bfloat16>(rows, n, reps, l2, rng);
    bench_cast<float, pallas::bfloat16>(rows, n, reps, l2, rng);
    bench_cast<pallas::bfloat16, float>(rows, n, reps, l2, rng);
    bench_cast<float, pallas::half>(rows, n, reps, l2, rng);
  }
  for (int64_t r : {int64_t{64}, int64_t{4096}, int64_t{32768}}) {
    if (8 * r * 4096 > (max_mib << 20)) break;
    bench_bias_gelu<float>(rows, r, 4096, reps, l2, rng);
    bench_bias_gelu<pallas::bfloat16>(rows, r, 4096, reps, l2, rng);
  }
  // Transpose (the TMA path and its direct twin): square and skinny.
  for (auto [r, c] : {std::pair<int64_t, int64_t>{8192, 8192}, {1024, 65536}, {65536, 1024}}) {
    if (8 * r * c > (max_mib << 20)) continue;
    bench_transpose<float>(rows, r, c, reps, l2, rng);
    bench_transpose<pallas::bfloat16>(rows, r, c, reps, l2, rng);
  }
  // Row ops: short rows (many programs), the 4K rows of the target, long rows.
  for (auto [r, c] : {std::pair<int64_t, int64_t>{65536, 128}, {16384, 4096}, {64, 262144}}) {
    if (16 * r * c > (max_mib << 20)) continue;  // x, y, r, h in f32
    bench_rows<float>(rows, r, c, reps, l2, rng);
    bench_rows<pallas::bfloat16>(rows, r, c, reps, l2, rng);
  }
  // Vocabularies: an LLM batch, and a few rows of the largest (split across programs).
  for (auto [r, v] : {std::pair<int64_t, int64_t>{4096, 32000}, {8, 262144}}) {
    if (4 * r * v > (max_mib << 20)) continue;
    bench_cross_entropy<float>(rows, r, v, reps, l2, rng);
    bench_cross_entropy<pallas::bfloat16>(rows, r, v, reps, l2, rng);
  }
  // Every launch above had valid labels: no device-side check may have failed.
  check(pallas::take_device_errors(), "device-side checks");

  FILE* out = csv.empty() ? nullptr : std::fopen(csv.c_str(), "w");
  if (out) std::fprintf(out, "op,dtype,shape,bytes,us,gbs,copy_fraction,instance\n");
  std::printf("\n%-20s %-10s %-12s %12s %10s %10s %8s  %s\n", "op", "dtype", "shape", "bytes", "us",
              "GB/s", "of copy", "instance");
  for (const Row& r : rows) {
    const double gbs = r.bytes / (r.ms * 1e6);
    std::printf("%-20s %-10s %-12s %12.0f %10.2f %10.1f %7.1f%%  %s\n", r.op.c_str(),
                r.dtype.c_str(), r.shape.c_str(), r.bytes, r.ms * 1e3, gbs, 100.0 * gbs / copy_gbs,
                r.instance.c_str());
    if (out)
      std::fprintf(out, "%s,%s,%s,%.0f,%.3f,%.2f,%.4f,%s\n", r.op.c_str(), r.dtype.c_str(),
                   r.shape.c_str(), r.bytes, r.ms * 1e3, gbs, gbs / copy_gbs, r.instance.c_str());
  }
  if (out) std::fclose(out);
  return 0;
}

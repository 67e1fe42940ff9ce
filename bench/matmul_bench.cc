// pallas_matmul_bench: the matrix products against cuBLASLt (the toolkit's library) in the
// same run: TFLOP/s of each, and our time over cuBLASLt's (issue 11's benchmark).
//
//   pallas_matmul_bench [--csv FILE] [--reps N] [--quick] [--pdl] [--max-cluster N]
//                       [--only OP,M,N,K]...
//
// --pdl launches ours with Launch::programmatic_dependent_launch (each kernel may start while
// the one before it on the stream finishes; cuBLASLt's launches are unchanged): the back to
// back and graph times are where it shows.
// --max-cluster N bounds our launches' clusters (Launch::max_cluster): 1 runs the tiles schedule
// without clusters and sums the deep split-K instances' splits through the workspace, not in a
// cluster: the same binary's A/B of the cluster sum (each row says "splits summed in clusters
// of S" where they were).
// --only runs the rows it names (repeat it for several; e.g. `--only matmul_bt,1,11008,4096`;
// attention rows: `attention,B*H,SEQ,D`): a profiler (ncu) sees one kernel among few, and a
// tuning run times a handful of shapes in seconds. A comparison row (`matmul_bt/tiles128`,
// `matmul_bt/splitk`) runs only beside its base row (`matmul_bt` of the same shape, whose
// instance decides it): name both.
//
// Shapes: squares 512..8192 and LLM shapes (M in 1, 16, 64, 128, 256, 1024, 4096 with (N, K) in
// (4096, 4096), (11008, 4096), (4096, 11008), (14336, 4096), and 1024 x N x 4096 whose 128 x 256
// tiles are whole rounds of the SMs, N = 8448 on 132); products: `matmul_bt` (D = A B^T,
// B [N, K], bf16 -> bf16; `matmul_bt/tiles128`: its 128 x 128 instance; `matmul_bt/splitk`:
// its four-stage split-K instance where a deep one ran), `matmul` (B [K, N]) on the
// squares and decode shapes, `linear_bias_gelu` against
// cuBLASLt's GELU_BIAS epilogue, `gemm_bt` as a residual add (D = A B^T + C, beta 1,
// against cuBLASLt's beta = 1) and `batched_matmul_bt/xB` (B products, against cuBLASLt's
// strided batch); then
// `attention` and `causal_attention` (16K tokens, 2048 wide: head dims 64 and 128), against the
// run's best cuBLASLt GEMM rate (timed only: no peer computes them; tests/ops/attention_test.cc
// checks them). Each product pair is first compared element by element
// (the same inputs: a wrong kernel is reported, not timed). Weights rotate over enough copies that
// they are read from HBM, not L2, as in a model. cuBLASLt is loaded at run time (dlopen), so the
// program runs where the library is missing and says so. Without a device it exits 0.
// Each product is timed three ways: each launch waited for (median_ms: the launch's whole cost, the
// host's part included, as a caller that synchronizes sees it) and launches back to back
// (back_to_back_ms: the device's time, as a model's stream of launches sees it); a row prints
// our time over cuBLASLt's for both, the CSV has both times (ours_b2b_ms, cublaslt_b2b_ms),
// and the host's microseconds a waited launch's call took (ours_host_us, cublaslt_host_us:
// median_ms's, the call's own cost on the caller's thread). Where the two ratios differ, the
// difference is in the launch's host path or the gap between kernels. A third time captures
// `reps` launches into one CUDA graph and replays it (graph_ms: ours_graph_ms,
// cublaslt_graph_ms; "graph" in the row): the device's time with no host path at all, as a
// decode loop that replays a captured step sees it (and a check that our ops capture).
// A persistent row (the tiles schedule) also says how many programs walked its tiles (in
// clusters of how many), their K steps and the time of a step (walk_steps): the rate of the
// main loop, whatever the shape's last round costs.

#include <pallas/kernels.h>
#include "cuda_check.h"
#include "launch_text.h"
#include "timing.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using pallas::bfloat16;
using pallas::TensorView;

/// The cuBLASLt entry points this program uses, resolved from the shared library.
struct CublasLt {
#define PALLAS_LT_FN(name) decltype(&::name) name = nullptr;
  PALLAS_LT_FN(cublasLtCreate)
  PALLAS_LT_FN(cublasLtDestroy)
  PALLAS_LT_FN(cublasLtMatmulDescCreate)
  PALLAS_LT_FN(cublasLtMatmulDescDestroy)
  PALLAS_LT_FN(cublasLtMatmulDescSetAttribute)
  PALLAS_LT_FN(cublasLtMatrixLayoutCreate)
  PALLAS_LT_FN(cublasLtMatrixLayoutDestroy)
  PALLAS_LT_FN(cublasLtMatrixLayoutSetAttribute)
  PALLAS_LT_FN(cublasLtMatmulPreferenceCreate)
  PALLAS_LT_FN(cublasLtMatmulPreferenceDestroy)
  PALLAS_LT_FN(cublasLtMatmulPreferenceSetAttribute)
  PALLAS_LT_FN(cublasLtMatmulAlgoGetHeuristic)
  PALLAS_LT_FN(cublasLtMatmul)
#undef PALLAS_LT_FN
  cublasLtHandle_t handle = nullptr;

  /// Loads the library; false (with the reason printed) where it is missing.
  bool load() {
    void* lib = nullptr;
    for (const char* name : {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so",
                             "/usr/local/cuda/lib64/libcublasLt.so"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib) {
      std::printf("cuBLASLt not found (%s): no peer\n", dlerror());
      return false;
    }
    bool ok = true;
    auto get = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      ok = ok && fn != nullptr;
    };
#define PALLAS_LT_GET(name) get(name, #name);
    PALLAS_LT_GET(cublasLtCreate)
    PALLAS_LT_GET(cublasLtDestroy)
    PALLAS_LT_GET(cublasLtMatmulDescCreate)
    PALLAS_LT_GET(cublasLtMatmulDescDestroy)
    PALLAS_LT_GET(cublasLtMatmulDescSetAttribute)
    PALLAS_LT_GET(cublasLtMatrixLayoutCreate)
    PALLAS_LT_GET(cublasLtMatrixLayoutDestroy)
    PALLAS_LT_GET(cublasLtMatrixLayoutSetAttribute)
    PALLAS_LT_GET(cublasLtMatmulPreferenceCreate)
    PALLAS_LT_GET(cublasLtMatmulPreferenceDestroy)
    PALLAS_LT_GET(cublasLtMatmulPreferenceSetAttribute)
    PALLAS_LT_GET(cublasLtMatmulAlgoGetHeuristic)
    PALLAS_LT_GET(cublasLtMatmul)
#undef PALLAS_LT_GET
    if (!ok || cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
      std::printf("cuBLASLt could not be initialized: no peer\n");
      return false;
    }
    return true;
  }
};

#define CHECK_LT(call)                                                                 \
  do {                                                                                 \
    cublasStatus_t st = (call);                                                        \
    if (st != CUBLAS_STATUS_SUCCESS) {                                                 \
      std::fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, #call, \
                   static_cast<int>(st));                                              \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

/// One row-major product D[M, N] = A[M, K] @ op(B) (+ bias, gelu) by cuBLASLt, which is
/// column-major: it computes D^T[N, M] = op(B)^T A^T, i.e. with B's and A's buffers read as
/// column-major [K, N] (b_transposed: B [N, K] is col-major [K, N], op T) and [K, M]. With
/// `batch` > 1, `batch` such products of contiguous matrices (cuBLASLt's strided batch).
class LtProduct {
 public:
  LtProduct(CublasLt& lt, int64_t m, int64_t n, int64_t k, bool b_transposed, bool bias_gelu,
            void* workspace, size_t workspace_bytes, int64_t batch = 1)
      : lt_(lt), workspace_(workspace), workspace_bytes_(workspace_bytes) {
    CHECK_LT(lt.cublasLtMatmulDescCreate(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_b = b_transposed ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = CUBLAS_OP_N;
    CHECK_LT(
        lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_b, sizeof(op_b)));
    CHECK_LT(
        lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_a, sizeof(op_a)));
    if (bias_gelu) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
      CHECK_LT(lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                                 sizeof(epilogue)));
      const cudaDataType_t bias_type = CUDA_R_16BF;
      CHECK_LT(lt.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                                 &bias_type, sizeof(bias_type)));
    }
    // "A" of cuBLAS is our B: [K, N] column-major (ld K when B is [N, K], else ld N).
    CHECK_LT(b_transposed ? lt.cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, k, n, k)
                          : lt.cublasLtMatrixLayoutCreate(&b_, CUDA_R_16BF, n, k, n));
    CHECK_LT(lt.cublasLtMatrixLayoutCreate(&a_, CUDA_R_16BF, k, m, k));
    CHECK_LT(lt.cublasLtMatrixLayoutCreate(&d_, CUDA_R_16BF, n, m, n));
    if (batch > 1) {
      const int32_t count = static_cast<int32_t>(batch);
      for (auto [layout, stride] : {std::pair{b_, n * k}, {a_, m * k}, {d_, m * n}}) {
        CHECK_LT(lt.cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                                     &count, sizeof(count)));
        CHECK_LT(lt.cublasLtMatrixLayoutSetAttribute(
            layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
      }
    }
    cublasLtMatmulPreference_t pref = nullptr;
    CHECK_LT(lt.cublasLtMatmulPreferenceCreate(&pref));
    CHECK_LT(lt.cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &workspace_bytes, sizeof(workspace_bytes)));
    int found = 0;
    CHECK_LT(lt.cublasLtMatmulAlgoGetHeuristic(lt.handle, desc_, b_, a_, d_, d_, pref, 1, &algo_,
                                               &found));
    lt.cublasLtMatmulPreferenceDestroy(pref);
    if (found == 0) {
      std::fprintf(stderr, "cuBLASLt has no algorithm for %lldx%lldx%lld\n",
                   static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k));
      std::exit(1);
    }
  }
  ~LtProduct() {
    lt_.cublasLtMatrixLayoutDestroy(a_);
    lt_.cublasLtMatrixLayoutDestroy(b_);
    lt_.cublasLtMatrixLayoutDestroy(d_);
    lt_.cublasLtMatmulDescDestroy(desc_);
  }
  /// D = A op(B) (+ bias, gelu) (+ C when `c` is given: beta 1).
  void run(const void* a, const void* b, const void* bias, void* d, const void* c = nullptr,
           cudaStream_t stream = nullptr) {
    if (bias)
      CHECK_LT(lt_.cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                                  sizeof(bias)));
    const float one = 1, zero = 0;
    CHECK_LT(lt_.cublasLtMatmul(lt_.handle, desc_, &one, b, b_, a, a_, c ? &one : &zero, c ? c : d,
                                d_, d, d_, &algo_.algo, workspace_, workspace_bytes_, stream));
  }

 private:
  CublasLt& lt_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, d_ = nullptr;
  cublasLtMatmulHeuristicResult_t algo_{};
  void* workspace_;
  size_t workspace_bytes_;
};

/// bf16 device memory, uniform in [-1, 1) scaled by `scale`.
struct Buffer {
  bfloat16* data = nullptr;
  int64_t count = 0;
  Buffer(int64_t n, std::mt19937& rng, float scale) : count(n) {
    CHECK_CUDA(cudaMalloc(&data, std::max<int64_t>(n, 1) * sizeof(bfloat16)));
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<bfloat16> host(static_cast<size_t>(n));
    for (bfloat16& v : host) v = bfloat16(dist(rng));
    CHECK_CUDA(cudaMemcpy(data, host.data(), n * sizeof(bfloat16), cudaMemcpyHostToDevice));
  }
  Buffer(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept : data(o.data), count(o.count) { o.data = nullptr; }
  ~Buffer() {
    if (data) cudaFree(data);
  }
  std::vector<float> download() const {
    std::vector<bfloat16> host(static_cast<size_t>(count));
    CHECK_CUDA(cudaMemcpy(host.data(), data, count * sizeof(bfloat16), cudaMemcpyDeviceToHost));
    std::vector<float> out(host.size());
    for (size_t i = 0; i < host.size(); ++i) out[i] = static_cast<float>(host[i]);
    return out;
  }
};

// kMatmulBtTiles128: matmul_bt's 128 x 128 instance (what sm_86 / sm_89 run;
// Launch::max_shared_bytes_per_block below the 128 x 256 pipeline's 193 KiB), against the
// 128 x 256 tiles: where more, smaller tiles fill the last wave better (M = 1024, N = 14336:
// 448 tiles of 128 x 256 are 3.4 waves of 132 programs, 896 of 128 x 128 6.8), this says
// whether the entry point should choose by waves too (an H200: no, 128 x 128 ran at about
// half the rate). (The 2-CTA clusters' rows, `matmul_bt/1cta`, went with the clusters: an
// H200 ran every tiles shape faster without them; bench/RESULTS.md.)
// kMatmulBtSplitK: matmul_bt's four-stage split-K instance where the entry point ran a deep one
// (decode: 16 rows a tile, eleven stages; splitk_deep: 64 rows, seven; both sum a tile's
// splits in a cluster), beside it (Launch::max_shared_bytes_per_block 200 KiB: below their 219
// and 213 KiB, above the 128 x 256 pipeline's 193): the twenty-fifth session added the deep
// instances without a device, the twenty-ninth their cluster sum.
// kBatchedMatmulBt: batched_matmul_bt on [batch, M, K] x [batch, N, K] (rows
// `batched_matmul_bt/xB`), against cuBLASLt's strided batch.
enum class Product {
  kMatmulBt,
  kMatmulBtTiles128,
  kMatmulBtSplitK,
  kMatmul,
  kLinearBiasGelu,
  kGemmBt,
  kBatchedMatmulBt
};

const char* product_name(Product p) {
  switch (p) {
    case Product::kMatmulBt:
      return "matmul_bt";
    case Product::kMatmulBtTiles128:
      return "matmul_bt/tiles128";
    case Product::kMatmulBtSplitK:
      return "matmul_bt/splitk";
    case Product::kMatmul:
      return "matmul";
    case Product::kLinearBiasGelu:
      return "linear_bias_gelu";
    case Product::kGemmBt:
      return "gemm_bt";
    case Product::kBatchedMatmulBt:
      return "batched_matmul_bt";
  }
  return "?";
}

struct Row {
  std::string op;
  int64_t m, n, k;
  double ours_ms, peer_ms, max_error;
  std::string instance;  // what the entry point launched (Launch::record), e.g. ..._splitk
  std::string why;       // why a direct twin ran instead, if one did
  std::array<int64_t, 3> grid;
  int64_t programs;  // a persistent grid's programs (Launch::record), else 0
  // Back to back (timing.h's back_to_back_ms): the device's time a launch, the host's hidden.
  double ours_b2b_ms = NAN, peer_b2b_ms = NAN;
  double ours_host_us = NAN, peer_host_us = NAN;  // the launch call's host time (median_ms)
  int64_t batch = 1;                              // products in a batched row
  // Captured into one CUDA graph (timing.h's graph_ms): the device's time with no host path.
  double ours_graph_ms = NAN, peer_graph_ms = NAN;
};

/// A persistent tiles-schedule row's K steps per program: cdiv(T, W) K for T tiles of K steps
/// on W programs (the plain walk; in clusters of two, cdiv(T / 2, W / 2) cluster tiles, the
/// same for the even T and W they run on). E.g. 1024 x 14336 x 4096 in 128 x 256 tiles on 132
/// SMs: T = 448, 64 steps: 256. Time over it is the rate of a K step, which a schedule that
/// loses nothing to its last round keeps from shape to shape.
int64_t walk_steps(int64_t tiles, int64_t programs, int64_t steps) {
  if (tiles <= 0 || programs <= 0) return 0;
  return (tiles + programs - 1) / programs * steps;
}

/// The instance matmul_bt's entry point chose for a shape already benchmarked ("" if none).
std::string chosen(const std::vector<Row>& rows, int64_t m, int64_t n, int64_t k) {
  for (const Row& r : rows)
    if (r.op == "matmul_bt" && r.m == m && r.n == n && r.k == k) return r.instance;
  return "";
}
bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// --pdl: our launches with programmatic stream serialization.
bool use_pdl = false;
/// --max-cluster: Launch::max_cluster of our launches (0: no bound).
int max_cluster = 0;

/// The --csv file (null: none), a row written as soon as it is measured: a run cut short (a
/// time limit) keeps the rows it finished.
FILE* csv_file = nullptr;

bool open_csv(const std::string& path) {
  csv_file = std::fopen(path.c_str(), "w");
  if (!csv_file) return false;
  std::fprintf(csv_file,
               "op,m,n,k,ours_ms,cublaslt_ms,ours_tflops,cublaslt_tflops,max_error,instance,grid,"
               "programs,walk_steps,ours_b2b_ms,cublaslt_b2b_ms,ours_host_us,cublaslt_host_us,"
               "ours_graph_ms,cublaslt_graph_ms\n");
  std::fflush(csv_file);
  return true;
}

/// Appends `r` to the --csv file, if any.
void write_csv(const Row& r) {
  if (!csv_file) return;
  // Attention rows: m = batch x heads, n = seq, k = d.
  const bool attention = r.op.find("attention") != std::string::npos;
  const double flop = attention ? 4.0 * r.m * r.n * r.n * r.k * (r.op[0] == 'c' ? 0.5 : 1.0)
                                : 2.0 * r.batch * r.m * r.n * r.k;
  const int64_t steps = attention ? 0 : walk_steps(r.grid[0], r.programs, (r.k + 63) / 64);
  std::fprintf(csv_file,
               "%s,%lld,%lld,%lld,%.5f,%.5f,%.2f,%.2f,%.3g,%s,%lldx%lldx%lld,%lld,%lld,%.5f,%.5f,%."
               "2f,%.2f,%.5f,%.5f\n",
               r.op.c_str(), static_cast<long long>(r.m), static_cast<long long>(r.n),
               static_cast<long long>(r.k), r.ours_ms, r.peer_ms, flop / (r.ours_ms * 1e9),
               flop / (r.peer_ms * 1e9), r.max_error, (r.instance + r.why).c_str(),
               static_cast<long long>(r.grid[0]), static_cast<long long>(r.grid[1]),
               static_cast<long long>(r.grid[2]), static_cast<long long>(r.programs),
               static_cast<long long>(steps), r.ours_b2b_ms, r.peer_b2b_ms, r.ours_host_us,
               r.peer_host_us, r.ours_graph_ms, r.peer_graph_ms);
  std::fflush(csv_file);
}

/// Times one product of one shape, ours and cuBLASLt's, after comparing their results.
bool bench(Product product, int64_t m, int64_t n, int64_t k, int reps, int64_t l2, CublasLt* lt,
           void* workspace, size_t workspace_bytes, std::mt19937& rng, std::vector<Row>& rows,
           int64_t batch = 1) {
  const bool b_transposed = product != Product::kMatmul;
  const bool with_c = product == Product::kGemmBt;
  const std::string op = batch > 1
                             ? std::string(product_name(product)) + "/x" + std::to_string(batch)
                             : std::string(product_name(product));
  // Weights (B, bias) rotate over copies that together exceed the L2 cache three times.
  const double weight_bytes = 2.0 * batch * n * k;
  const int sets = static_cast<int>(std::clamp<double>(3.0 * l2 / weight_bytes + 1, 1, 8));
  const float scale = 1.0f / std::sqrt(static_cast<float>(k));  // keeps D near unit scale
  Buffer a(batch * m * k, rng, 1.0f), d(batch * m * n, rng, 1.0f), d_peer(batch * m * n, rng, 1.0f),
      c(with_c ? m * n : 0, rng, 1.0f);
  std::vector<Buffer> b, bias;
  for (int s = 0; s < sets; ++s) {
    b.emplace_back(batch * n * k, rng, scale);
    bias.emplace_back(n, rng, 1.0f);
  }
  pallas::LaunchRecord record;
  pallas::Launch launch{pallas::Backend::kCuda, nullptr};
  launch.programmatic_dependent_launch = use_pdl;
  launch.max_cluster = max_cluster;
  launch.record = &record;
  if (product == Product::kMatmulBtTiles128) launch.max_shared_bytes_per_block = 99 * 1024;
  if (product == Product::kMatmulBtSplitK) launch.max_shared_bytes_per_block = 200 * 1024;
  bool capturing = false, capture_failed = false;  // graph_ms: a failed call ends the capture
  auto ours = [&](int i) {
    const bfloat16* bw = b[i % sets].data;
    TensorView<const bfloat16, 2> av(a.data, {m, k});
    TensorView<bfloat16, 2> dv(d.data, {m, n});
    pallas::Status s;
    switch (product) {
      case Product::kMatmulBt:
      case Product::kMatmulBtTiles128:
      case Product::kMatmulBtSplitK:
        s = pallas::kernels::matmul_bt(av, TensorView<const bfloat16, 2>(bw, {n, k}), dv, launch);
        break;
      case Product::kMatmul:
        s = pallas::kernels::matmul(av, TensorView<const bfloat16, 2>(bw, {k, n}), dv, launch);
        break;
      case Product::kLinearBiasGelu:
        s = pallas::kernels::linear_bias_gelu(
            av, TensorView<const bfloat16, 2>(bw, {n, k}),
            TensorView<const bfloat16, 1>(bias[i % sets].data, {n}), dv, launch);
        break;
      case Product::kGemmBt:
        s = pallas::kernels::gemm_bt(av, TensorView<const bfloat16, 2>(bw, {n, k}),
                                     TensorView<const bfloat16, 2>(c.data, {m, n}), dv, 1.0f, 1.0f,
                                     launch);
        break;
      case Product::kBatchedMatmulBt:
        s = pallas::kernels::batched_matmul_bt(TensorView<const bfloat16, 3>(a.data, {batch, m, k}),
                                               TensorView<const bfloat16, 3>(bw, {batch, n, k}),
                                               TensorView<bfloat16, 3>(d.data, {batch, m, n}),
                                               launch);
        break;
    }
    if (!s.ok()) {
      std::fprintf(stderr, "%s: %s\n", op.c_str(), s.message().c_str());
      if (capturing) {
        capture_failed = true;
        return;
      }
      std::exit(1);
    }
  };
  std::unique_ptr<LtProduct> peer;
  if (lt)
    peer =
        std::make_unique<LtProduct>(*lt, m, n, k, b_transposed, product == Product::kLinearBiasGelu,
                                    workspace, workspace_bytes, batch);
  auto theirs = [&](int i) {
    peer->run(a.data, b[i % sets].data,
              product == Product::kLinearBiasGelu ? bias[i % sets].data : nullptr, d_peer.data,
              with_c ? c.data : nullptr, launch.stream);
  };
  // Same inputs, then compare: |ours - theirs| <= 2^-6 (|theirs| + 1), bf16 outputs summed in
  // f32 in different orders.
  double max_error = 0;
  if (peer) {
    ours(0);
    theirs(0);
    CHECK_CUDA(cudaDeviceSynchronize());
    const std::vector<float> x = d.download(), y = d_peer.download();
    for (size_t i = 0; i < x.size(); ++i)
      max_error = std::max<double>(max_error, std::abs(x[i] - y[i]) / (std::abs(y[i]) + 1));
    if (!(max_error <= 1.0 / 64)) {
      std::printf("%s %lldx%lldx%lld: MISMATCH against cuBLASLt, max error %.3g\n", op.c_str(),
                  static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
                  max_error);
      return false;
    }
  }
  double ours_host_us = NAN, peer_host_us = NAN;
  const double ours_ms = median_ms(ours, reps, 5, &ours_host_us);
  const double peer_ms = peer ? median_ms(theirs, reps, 5, &peer_host_us) : NAN;
  const double ours_b2b_ms = back_to_back_ms(ours, reps);
  const double peer_b2b_ms = peer ? back_to_back_ms(theirs, reps) : NAN;
  // Captured into graphs on a stream of the bench's own (the legacy stream cannot capture).
  static const cudaStream_t graph_stream = [] {
    cudaStream_t stream = nullptr;
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    return stream;
  }();
  capturing = true;
  launch.stream = graph_stream;
  const double ours_graph_ms = graph_ms(ours, reps, graph_stream, capture_failed);
  capture_failed = false;
  const double peer_graph_ms = peer ? graph_ms(theirs, reps, graph_stream, capture_failed) : NAN;
  launch.stream = nullptr;
  capturing = false;
  const std::string instance = record.instance ? record.instance : "?";
  const std::string why = fallback_text(record);  // a direct twin ran: say why
  rows.push_back({op, m, n, k, ours_ms, peer_ms, max_error, instance, why, record.grid,
                  record.programs, ours_b2b_ms, peer_b2b_ms, ours_host_us, peer_host_us, batch,
                  ours_graph_ms, peer_graph_ms});
  write_csv(rows.back());
  const double flop = 2.0 * batch * m * n * k;
  // A persistent row: its programs (and clusters), their K steps and the time of one.
  std::string walk;
  if (record.persistent && record.programs > 0) {
    const int64_t steps = walk_steps(record.grid[0], record.programs, (k + 63) / 64);
    walk = "  " + std::to_string(record.programs) + " programs" +
           (record.cluster > 1 ? " in clusters of " + std::to_string(record.cluster) : "") + " x " +
           std::to_string(steps) + " steps, " +
           std::to_string(static_cast<int>(ours_ms * 1e6 / std::max<int64_t>(steps, 1))) +
           " ns a step";
  }
  // A split instance whose splits met in thread-block clusters (the deep instances' sum).
  if (!record.persistent && record.launched_cluster > 1)
    walk = "  splits summed in clusters of " + std::to_string(record.launched_cluster);
  std::printf(
      "%-18s %6lld %6lld %6lld  ours %8.1f TFLOP/s  cuBLASLt %8.1f TFLOP/s  ours/theirs "
      "time %.2fx (back to back %.2fx; graph %.2fx; host %.1f / %.1f us)  %s [%lld, %lld, "
      "%lld]%s%s\n",
      op.c_str(), static_cast<long long>(m), static_cast<long long>(n), static_cast<long long>(k),
      flop / (ours_ms * 1e9), flop / (peer_ms * 1e9), ours_ms / peer_ms, ours_b2b_ms / peer_b2b_ms,
      ours_graph_ms / peer_graph_ms, ours_host_us, peer_host_us, instance.c_str(),
      static_cast<long long>(record.grid[0]), static_cast<long long>(record.grid[1]),
      static_cast<long long>(record.grid[2]), why.c_str(), walk.c_str());
  std::fflush(stdout);
  return true;
}

/// Times attention (or causal_attention) on [batch, heads, seq, d] bf16 arrays, q and k, v of
/// one length. No library here has a fused attention to compare with (cuDNN is not part of
/// the toolkit): the row reports TFLOP/s (4 b h s^2 d, halved for causal) and that rate over
/// the fastest cuBLASLt GEMM of this run (`gemm_tflops`), the tensor cores' practical ceiling.
/// q, k, v, o hold at least batch * heads * seq * d elements each (one set serves every shape).
void bench_attention(bool causal, int64_t batch, int64_t heads, int64_t seq, int64_t d, int reps,
                     double gemm_tflops, Buffer& q, Buffer& k, Buffer& v, Buffer& o,
                     std::vector<Row>& rows) {
  pallas::LaunchRecord record;
  pallas::Launch launch{pallas::Backend::kCuda, nullptr};
  launch.programmatic_dependent_launch = use_pdl;
  launch.max_cluster = max_cluster;
  launch.record = &record;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  auto view = [&](bfloat16* p) { return TensorView<bfloat16, 4>(p, {batch, heads, seq, d}); };
  auto ours = [&](int) {
    const pallas::Status s =
        causal ? pallas::kernels::causal_attention(view(q.data), view(k.data), view(v.data),
                                                   view(o.data), scale, launch)
               : pallas::kernels::attention(view(q.data), view(k.data), view(v.data), view(o.data),
                                            scale, launch);
    if (!s.ok()) {
      std::fprintf(stderr, "attention: %s\n", s.message().c_str());
      std::exit(1);
    }
  };
  const double ms = median_ms(ours, reps);
  const double flop = 4.0 * batch * heads * seq * seq * d * (causal ? 0.5 : 1.0);
  const std::string op = causal ? "causal_attention" : "attention";
  const std::string instance = record.instance ? record.instance : "?";
  rows.push_back({op, batch * heads, seq, d, ms, NAN, NAN, instance, fallback_text(record),
                  record.grid, record.programs});
  write_csv(rows.back());
  std::printf(
      "%-18s b*h %4lld seq %6lld d %4lld  ours %8.1f TFLOP/s  %.2f of the best GEMM's "
      "%.1f  %s [%lld, %lld, %lld]\n",
      op.c_str(), static_cast<long long>(batch * heads), static_cast<long long>(seq),
      static_cast<long long>(d), flop / (ms * 1e9), flop / (ms * 1e9) / gemm_tflops, gemm_tflops,
      instance.c_str(), static_cast<long long>(record.grid[0]),
      static_cast<long long>(record.grid[1]), static_cast<long long>(record.grid[2]));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string csv;
  std::vector<std::string> only;
  int reps = 30;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--csv" && i + 1 < argc)
      csv = argv[++i];
    else if (arg == "--reps" && i + 1 < argc && std::atoi(argv[i + 1]) > 0)
      reps = std::atoi(argv[++i]);
    else if (arg == "--pdl")
      use_pdl = true;
    else if (arg == "--max-cluster" && i + 1 < argc && std::atoi(argv[i + 1]) > 0)
      max_cluster = std::atoi(argv[++i]);
    else if (arg == "--quick")
      quick = true;
    else if (arg == "--only" && i + 1 < argc)
      only.push_back(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: pallas_matmul_bench [--csv FILE] [--reps N] [--quick] [--pdl] "
                   "[--max-cluster N] [--only OP,M,N,K]...\n");
      return 2;
    }
  }
  if (!pallas::cuda_device_available()) {
    std::printf("pallas_matmul_bench: no CUDA device; nothing measured\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, sm_%d%d, %d SMs\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  CublasLt lt;
  const bool have_peer = lt.load();
  const size_t workspace_bytes = size_t{32} << 20;
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, workspace_bytes));

  if (!csv.empty() && !open_csv(csv)) {
    std::fprintf(stderr, "pallas_matmul_bench: cannot write %s\n", csv.c_str());
    return 2;
  }
  std::mt19937 rng(12345);
  std::vector<Row> rows;
  bool ok = true;
  // Whether the --only rows (if any) include the row (op, m, n, k).
  auto wanted = [&](const char* op, int64_t m, int64_t n, int64_t k) {
    const std::string row = std::string(op) + "," + std::to_string(m) + "," + std::to_string(n) +
                            "," + std::to_string(k);
    return only.empty() || std::find(only.begin(), only.end(), row) != only.end();
  };
  auto run = [&](Product p, int64_t m, int64_t n, int64_t k) {
    if (!wanted(product_name(p), m, n, k)) return;
    ok &= bench(p, m, n, k, reps, prop.l2CacheSize, have_peer ? &lt : nullptr, workspace,
                workspace_bytes, rng, rows);
  };
  std::vector<int64_t> squares = {512, 1024, 2048, 4096, 8192};
  if (quick) squares = {1024, 4096};
  for (int64_t s : squares) run(Product::kMatmulBt, s, s, s);
  for (int64_t s : squares) run(Product::kMatmul, s, s, s);
  std::vector<int64_t> ms = {1, 16, 64, 128, 256, 1024, 4096};
  if (quick) ms = {16, 4096};
  const std::pair<int64_t, int64_t> llm[] = {
      {4096, 4096}, {11008, 4096}, {4096, 11008}, {14336, 4096}};
  for (auto [n, k] : llm)
    for (int64_t m : ms) run(Product::kMatmulBt, m, n, k);
  // Decode steps against a [K, N] weight (JAX's layout for a dense layer's kernel): split-K and
  // decode read its [64 K, 128 N] blocks through a transposed view, M-major (.tnspA).
  for (auto [n, k] : {std::pair<int64_t, int64_t>{4096, 4096}, {11008, 4096}})
    for (int64_t m : ms)
      if (m <= 256) run(Product::kMatmul, m, n, k);
  // Whole rounds: 1024 x N x 4096 with N near 11008 such that the 128 x 256 tiles (8 rows of
  // them) are a multiple of the SMs (132: N = 8448, 264 tiles, two rounds): its time a K step
  // against a shape whose last round is partial (1024 x 14336: 448 tiles, 3.4 rounds) says what
  // that last round costs.
  if (!quick) {
    const int64_t sms = prop.multiProcessorCount, tile_rows = 1024 / 128;
    const int64_t columns = sms / std::gcd(sms, tile_rows);  // the least whole-round count
    const int64_t whole_n = 256 * columns * std::max<int64_t>((43 + columns / 2) / columns, 1);
    run(Product::kMatmulBt, 1024, whole_n, 4096);
  }
  // tiles128 against tiles only where the entry point ran the tiles schedule above
  // (elsewhere it runs split-K, whatever the shared memory).
  auto tiles_ran = [&](int64_t m, int64_t n, int64_t k) {
    return ends_with(chosen(rows, m, n, k), "_tiles");
  };
  for (int64_t s : squares)
    if (tiles_ran(s, s, s)) run(Product::kMatmulBtTiles128, s, s, s);
  for (auto [n, k] : llm)
    for (int64_t m : ms)
      if (tiles_ran(m, n, k)) run(Product::kMatmulBtTiles128, m, n, k);
  // split-K's four stages beside the deep split instances where they ran.
  auto deep_ran = [&](int64_t m, int64_t n, int64_t k) {
    const std::string instance = chosen(rows, m, n, k);
    return ends_with(instance, "_decode") || ends_with(instance, "_splitk_deep");
  };
  for (int64_t s : squares)
    if (deep_ran(s, s, s)) run(Product::kMatmulBtSplitK, s, s, s);
  for (auto [n, k] : llm)
    for (int64_t m : ms)
      if (deep_ran(m, n, k)) run(Product::kMatmulBtSplitK, m, n, k);
  for (int64_t m : ms) run(Product::kLinearBiasGelu, m, 11008, 4096);
  // The products with C or R (128 x 256 tiles, C read 16 columns at a time in the
  // epilogue): the squares, and a residual down projection.
  for (int64_t s : squares) run(Product::kGemmBt, s, s, s);
  for (int64_t m : ms) run(Product::kGemmBt, m, 4096, 11008);
  // Batched (128 x 256 tiles since the twenty-fourth session; 128 x 128 before, at 2.0..2.2x
  // cuBLASLt's time on an H100): 8 products of 1024^3 and of 2048^3, 64 of 512^3, against
  // cuBLASLt's strided batch.
  for (auto [batch, s] : {std::pair<int64_t, int64_t>{8, 1024}, {8, 2048}, {64, 512}})
    if (wanted(("batched_matmul_bt/x" + std::to_string(batch)).c_str(), s, s, s))
      ok &= bench(Product::kBatchedMatmulBt, s, s, s, reps, prop.l2CacheSize,
                  have_peer ? &lt : nullptr, workspace, workspace_bytes, rng, rows, batch);
  // Attention (rows: m = batch x heads, n = seq, k = d): 16K tokens of 2048 x 8 batch entries
  // and less, head dims 64 and 128, as FlashAttention's benchmarks.
  double best_gemm = NAN;
  for (const Row& r : rows)
    if (!std::isnan(r.peer_ms))
      best_gemm = std::isnan(best_gemm)
                      ? 2.0 * r.m * r.n * r.k / (r.peer_ms * 1e9)
                      : std::max(best_gemm, 2.0 * r.m * r.n * r.k / (r.peer_ms * 1e9));
  std::vector<int64_t> seqs = {512, 1024, 2048, 4096, 8192};
  if (quick) seqs = {1024, 4096};
  {
    const int64_t tokens = 16384, width = 2048;
    Buffer q(tokens * width, rng, 1.0f), k(tokens * width, rng, 1.0f), v(tokens * width, rng, 1.0f),
        o(tokens * width, rng, 1.0f);
    for (int64_t d : {64, 128})
      for (bool causal : {false, true})
        for (int64_t seq : seqs)
          if (wanted(causal ? "causal_attention" : "attention", tokens / seq * (width / d), seq, d))
            bench_attention(causal, tokens / seq, width / d, seq, d, reps, best_gemm, q, k, v, o,
                            rows);
  }

  if (!only.empty() && rows.empty()) {
    std::fprintf(stderr,
                 "pallas_matmul_bench: no row matches --only (rows are OP,M,N,K as printed, "
                 "e.g. matmul_bt,1,11008,4096; attention rows attention,B*H,SEQ,D)\n");
    ok = false;
  }
  if (csv_file) std::fclose(csv_file);
  CHECK_CUDA(cudaFree(workspace));
  if (have_peer) lt.cublasLtDestroy(lt.handle);
  return ok ? 0 : 1;
}

// Ops captured into CUDA graphs (label gpu; SKIPPED without a device). ctest runs this suite in
// a process of its own (ops.cuda_graph) so that the first capture is also every kernel's first
// launch: loading the kernel, allocating its pool regions and its error record happen during
// the capture, in the strict global capture mode, and must not break it.
//
// What a captured call must get right (pallas::Launch, LaunchResources):
//  - the capture stays valid and the graph replays the call on fresh inputs;
//  - the graph owns the call's semaphore and workspace regions: eager calls beside a replay
//    allocate their own (a shared split-K workspace or semaphore would corrupt both);
//  - the regions go back to the pool once the graph and its instantiation are destroyed
//    (CudaLaunch.CapturedLaunchTakesNoRegionInFlight tests the pool's side in isolation);
//  - check_device_errors and take_device_errors, which synchronize, are refused during the
//    capture without breaking it, and a replay's failed checks are read after it has run.

#include "test_support.h"

#include <pallas/detail/kernel_image.h>
#include <pallas/kernels.h>

#include <chrono>
#include <cmath>
#include <thread>

namespace pallas::testing {
namespace {

int current_device() {
  int device = 0;
  EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
  return device;
}

/// A non-blocking stream, destroyed with the test.
class OwnedStream {
 public:
  OwnedStream() {
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  ~OwnedStream() { (void)cudaStreamDestroy(stream_); }
  OwnedStream(const OwnedStream&) = delete;
  OwnedStream& operator=(const OwnedStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

/// A whole-array sum (semaphores) and a split-K matmul_bt (workspace and semaphores) with
/// their inputs, outputs and float64 references.
struct SumAndMatmul {
  static constexpr int64_t kSum = 1 << 22;
  static constexpr int64_t kM = 16, kN = 4096, kK = 4096;  // a decode shape: K is split
  Array<float> x{Backend::kCuda, kSum}, total{Backend::kCuda, 1};
  Array<bfloat16> a{Backend::kCuda, kM*kK}, b{Backend::kCuda, kN*kK};
  Array<float> d{Backend::kCuda, kM* kN};

  Status run(const Launch& launch) {
    if (Status s = kernels::sum_all(TensorView<const float, 1>(x.data(), {kSum}),
                                    TensorView<float, 1>(total.data(), {1}), launch);
        !s.ok())
      return s;
    return kernels::matmul_bt(TensorView<const bfloat16, 2>(a.data(), {kM, kK}),
                              TensorView<const bfloat16, 2>(b.data(), {kN, kK}),
                              TensorView<float, 2>(d.data(), {kM, kN}), launch);
  }
  /// Fresh inputs, poisoned outputs, on the device (synchronous copies).
  void refill(std::mt19937& rng) {
    x.fill_random(rng, 0, 1);
    a.fill_random(rng, -1, 1);
    b.fill_random(rng, -1, 1);
    total.poison();
    d.poison();
    for (auto* array : {&x, &total, &d}) array->upload();
    a.upload();
    b.upload();
  }
  /// Downloads the outputs and compares them with float64 references.
  void check(const char* who) {
    total.download();
    d.download();
    double want = 0;
    for (float v : x.host()) want += v;
    EXPECT_NEAR(total.host()[0], want, 1e-5 * kSum) << who << ": sum_all";
    int misses = 0;
    for (int64_t i = 0; i < kM && misses < 5; ++i)
      for (int64_t j = 0; j < kN && misses < 5; ++j) {
        double acc = 0, magnitude = 0;
        for (int64_t k = 0; k < kK; ++k) {
          const double p = to_float(a.host()[i * kK + k]) * double{to_float(b.host()[j * kK + k])};
          acc += p;
          magnitude += std::abs(p);
        }
        const double got = d.host()[i * kN + j];
        // f32 sums of bf16 products (exact in f32): rounding of order sqrt(K) eps magnitude,
        // ~100x under this bound, while a lost or doubled split of K is far over it.
        if (!(std::abs(got - acc) <= 1e-5 * magnitude + 1e-5)) {
          ADD_FAILURE() << who << ": matmul_bt d[" << i << ", " << j << "] = " << got << ", want "
                        << acc;
          ++misses;
        }
      }
  }
};

TEST(GraphCapture, CapturedOpsReplayOnFreshInputsBesideEagerCalls) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  const int device = current_device();
  std::mt19937 rng(fresh_seed());
  SumAndMatmul captured, eager;
  captured.refill(rng);
  OwnedStream capturing, beside;
  const size_t owned_before = detail::graph_owned_regions(device);
  const size_t pooled_before = detail::pooled_regions(device);

  ASSERT_EQ(cudaStreamBeginCapture(capturing.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  LaunchRecord record;
  Launch launch{Backend::kCuda, capturing.get()};
  launch.record = &record;
  const Status status = captured.run(launch);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(capturing.get(), &graph), cudaSuccess)
      << "the calls broke the capture";
  ASSERT_TRUE(status.ok()) << status.message();
  ASSERT_NE(record.instance, nullptr);
  // sum_all's and the split matmul's (decode or splitk at 16 rows) workspace and semaphores.
  EXPECT_EQ(detail::graph_owned_regions(device), owned_before + 4)
      << "matmul_bt ran " << record.instance;
  const size_t pooled_captured = detail::pooled_regions(device);
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);

  size_t pooled_after_first = 0;
  for (int round = 0; round < 3; ++round) {
    const std::string who = "round " + std::to_string(round);
    captured.refill(rng);
    eager.refill(rng);
    ASSERT_EQ(cudaGraphLaunch(exec, capturing.get()), cudaSuccess) << who;
    // The same ops eagerly on another stream while the replay runs: they must not take the
    // graph's regions.
    ASSERT_TRUE(eager.run(Launch{Backend::kCuda, beside.get()}).ok()) << who;
    ASSERT_EQ(cudaStreamSynchronize(capturing.get()), cudaSuccess) << who;
    ASSERT_EQ(cudaStreamSynchronize(beside.get()), cudaSuccess) << who;
    // In this process of its own the pool held nothing but the graph's regions: the eager
    // calls had to allocate regions of their own (two to four, a workspace and semaphores at
    // least: on their one stream the matmul may take sum_all's regions again, as an H200
    // showed: three), then reuse them; the graph's stay the graph's.
    const size_t pooled = detail::pooled_regions(device);
    if (pooled_before == 0) {
      EXPECT_GE(pooled, pooled_captured + 2) << who;
      EXPECT_LE(pooled, pooled_captured + 4) << who;
      if (round > 0) EXPECT_EQ(pooled, pooled_after_first) << who << ": the eager calls' pool grew";
    }
    if (round == 0) pooled_after_first = pooled;
    EXPECT_EQ(detail::graph_owned_regions(device), owned_before + 4) << who;
    captured.check(("replay, " + who).c_str());
    eager.check(("eager beside the replay, " + who).c_str());
  }

  ASSERT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  // CUDA destroys the graph's user object on its own thread, soon after.
  for (int wait = 0; wait < 500 && detail::graph_owned_regions(device) > owned_before; ++wait)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(detail::graph_owned_regions(device), owned_before)
      << "the destroyed graph's regions did not come back to the pool";
}

TEST(GraphCapture, DeviceErrorsAreReadAfterAReplay) {
  if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(take_device_errors().ok());  // nothing left over
  Array<float> logits(Backend::kCuda, 2 * 8), loss(Backend::kCuda, 2);
  Array<int32_t> labels(Backend::kCuda, 2);
  std::mt19937 rng(fresh_seed());
  logits.fill_random(rng, -1, 1);
  labels.host() = {3, -1};
  loss.poison();
  logits.upload();
  labels.upload();
  loss.upload();
  OwnedStream stream;
  auto run = [&](const Launch& launch) {
    return kernels::cross_entropy(TensorView<const float, 2>(logits.data(), {2, 8}),
                                  TensorView<const int32_t, 1>(labels.data(), {2}),
                                  TensorView<float, 1>(loss.data(), {2}), launch);
  };

  ASSERT_EQ(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
  Launch checked{Backend::kCuda, stream.get()};
  checked.check_device_errors = true;
  const Status refused = run(checked);
  const Status taken = take_device_errors(stream.get());
  const Status captured = run(Launch{Backend::kCuda, stream.get()});  // the error record's birth
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(stream.get(), &graph), cudaSuccess)
      << "the refused calls broke the capture";
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("capturing a CUDA graph"), std::string::npos)
      << refused.message();
  EXPECT_EQ(taken.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(taken.message().find("capturing a CUDA graph"), std::string::npos) << taken.message();
  ASSERT_TRUE(captured.ok()) << captured.message();

  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
  const Status replayed = take_device_errors(stream.get());
  EXPECT_EQ(replayed.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(replayed.message(),
            "cross_entropy_f32: operand 'labels' element 1 is -1, outside [0, 8)");
  loss.download();
  EXPECT_FALSE(std::isnan(loss.host()[0]));
  EXPECT_TRUE(std::isnan(loss.host()[1]));

  labels.host() = {3, 7};
  labels.upload();
  ASSERT_EQ(cudaGraphLaunch(exec, stream.get()), cudaSuccess);
  EXPECT_TRUE(take_device_errors(stream.get()).ok());
  loss.download();
  EXPECT_FALSE(std::isnan(loss.host()[1]));
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
}

}  // namespace
}  // namespace pallas::testing

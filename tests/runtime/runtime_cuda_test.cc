// launch_kernel on the CUDA backend with real cubins (test_kernels.cu, embedded by
// embed_cubins.cmake). Every test skips without a CUDA device.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "pallas/detail/kernel_image.h"
#include "pallas/pallas.h"

namespace pallas_test {
extern const std::span<const pallas::detail::Cubin> kTestCubins;
}

namespace pallas {
namespace {

using detail::KernelImage;
using detail::launch_kernel;
using pallas_test::kTestCubins;

const KernelMetadata kAddMetadata{"test_add_f32", "add", "[cdiv(n, 256)]", 256, {}, {}};
const KernelMetadata kSmemMetadata{"test_smem", "smem", "[a, b, c]", 128, {}, {}};

const KernelImage kAdd{&kAddMetadata, "pallas_test_add", kTestCubins, nullptr, 256, 0, 0};

#define ASSERT_CUDA(expr)                                                      \
  do {                                                                         \
    const cudaError_t err_ = (expr);                                           \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorString(err_); \
  } while (0)

class CudaLaunch : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_device_available()) GTEST_SKIP() << "no CUDA device";
  }
};

template <class T>
struct DeviceBuffer {
  explicit DeviceBuffer(size_t n) : n(n) {
    if (cudaMalloc(&ptr, n * sizeof(T)) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  T* ptr = nullptr;
  size_t n;
};

// z = x + y through launch_kernel; returns the status and fills `z`.
Status run_add(const std::vector<float>& x, const std::vector<float>& y, std::vector<float>& z,
               Stream stream) {
  const int64_t n = static_cast<int64_t>(x.size());
  DeviceBuffer<float> dx(n), dy(n), dz(n);
  if (!dx.ptr || !dy.ptr || !dz.ptr) return Status::Error(StatusCode::kCudaError, "cudaMalloc");
  // On `stream`, in its order: a non-blocking stream does not wait for the legacy default
  // stream's cudaMemcpy / cudaMemset (with those, an H200 read back the poison: the memset
  // may run after the kernel, the kernel before the copies land).
  cudaMemcpyAsync(dx.ptr, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream);
  cudaMemcpyAsync(dy.ptr, y.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream);
  cudaMemsetAsync(dz.ptr, 0xff, n * sizeof(float), stream);  // poison: NaN
  const float* px = dx.ptr;
  const float* py = dy.ptr;
  float* pz = dz.ptr;
  long long nn = n;
  void* args[] = {&px, &py, &pz, &nn};
  Status s = launch_kernel(kAdd, args, {(n + 255) / 256, 1, 1}, Launch{Backend::kCuda, stream});
  if (!s.ok()) return s;
  if (cudaStreamSynchronize(stream) != cudaSuccess) {
    return Status::Error(StatusCode::kCudaError, "cudaStreamSynchronize");
  }
  z.resize(n);
  if (cudaMemcpy(z.data(), dz.ptr, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess)
    return Status::Error(StatusCode::kCudaError, "cudaMemcpy of z");
  return Status::Ok();
}

// First launches of the process race on the lazy load: run this before the others.
TEST_F(CudaLaunch, ConcurrentFirstLaunches) {
  constexpr int kThreads = 8;
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &errors] {
      cudaStream_t stream = nullptr;
      cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
      for (int iter = 0; iter < 20 && errors[t].empty(); ++iter) {
        const int n = 1000 + 37 * t + iter;
        std::vector<float> x(n), y(n), z;
        for (int i = 0; i < n; ++i) {
          x[i] = 0.5f * i + t;
          y[i] = 3.0f - i;
        }
        Status s = run_add(x, y, z, stream);
        if (!s.ok()) {
          errors[t] = s.message();
          break;
        }
        for (int i = 0; i < n; ++i) {
          if (z[i] != x[i] + y[i]) {
            errors[t] = "wrong result at " + std::to_string(i);
            break;
          }
        }
      }
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
}

TEST_F(CudaLaunch, AddOddSizes) {
  for (int n : {1, 255, 256, 257, 1000003}) {
    std::vector<float> x(n), y(n), z;
    for (int i = 0; i < n; ++i) {
      x[i] = 1.25f * (i % 977);
      y[i] = -0.5f * (i % 131) + 7;
    }
    Status s = run_add(x, y, z, nullptr);
    ASSERT_TRUE(s.ok()) << s.message();
    for (int i = 0; i < n; ++i) ASSERT_EQ(z[i], x[i] + y[i]) << "n=" << n << " i=" << i;
  }
}

TEST_F(CudaLaunch, DynamicSharedMemoryAbove48KiB) {
  int device = 0, optin = 0;
  ASSERT_CUDA(cudaGetDevice(&device));
  ASSERT_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int bytes = 96 * 1024;
  if (optin < bytes) GTEST_SKIP() << "device allows only " << optin << " bytes";
  static const KernelImage kSmem{
      &kSmemMetadata, "pallas_test_smem", kTestCubins, nullptr, 128, bytes, 0};
  const std::array<int64_t, 3> grid{3, 2, 2};
  const int programs = 12;
  DeviceBuffer<int> out(programs);
  ASSERT_NE(out.ptr, nullptr);
  int* pout = out.ptr;
  int words = bytes / 4;
  void* args[] = {&pout, &words};
  for (int rep = 0; rep < 2; ++rep) {  // the second launch finds the limit already raised
    ASSERT_CUDA(cudaMemset(out.ptr, 0, programs * sizeof(int)));
    Status s = launch_kernel(kSmem, args, grid, Launch{});
    ASSERT_TRUE(s.ok()) << s.message();
    std::vector<int> host(programs);
    ASSERT_CUDA(cudaMemcpy(host.data(), out.ptr, programs * sizeof(int), cudaMemcpyDeviceToHost));
    for (int p = 0; p < programs; ++p) EXPECT_EQ(host[p], words - 1 + p) << "program " << p;
  }

  // More than the device allows is refused before launching.
  static const KernelImage kTooMuch{
      &kSmemMetadata, "pallas_test_smem", kTestCubins, nullptr, 128, optin + 1024, 0};
  Status s = launch_kernel(kTooMuch, args, grid, Launch{});
  EXPECT_EQ(s.code(), StatusCode::kNoBinaryForArch);
  EXPECT_NE(s.message().find("test_smem: needs " + std::to_string(optin + 1024) +
                             " bytes of dynamic shared memory per program, but "),
            std::string::npos)
      << s.message();
}

TEST_F(CudaLaunch, MissingSymbolIsCudaError) {
  static const KernelImage kMissing{
      &kAddMetadata, "no_such_kernel", kTestCubins, nullptr, 256, 0, 0};
  float* p = nullptr;
  long long n = 0;
  void* args[] = {&p, &p, &p, &n};
  Status s = launch_kernel(kMissing, args, {1, 1, 1}, Launch{});
  EXPECT_EQ(s.code(), StatusCode::kCudaError);
  EXPECT_EQ(s.message().rfind("test_add_f32: cudaLibraryGetKernel failed: ", 0), 0u) << s.message();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // reported through the Status, not left behind
}

TEST_F(CudaLaunch, BadImageIsCudaError) {
  int device = 0, major = 0, minor = 0;
  ASSERT_CUDA(cudaGetDevice(&device));
  ASSERT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  ASSERT_CUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  static const unsigned char kGarbage[] = "this is not a cubin";
  const detail::Cubin cubins[] = {{10 * major + minor, true, kGarbage, sizeof(kGarbage)}};
  static const KernelMetadata kBadMetadata{"bad_image", "bad", "[1]", 32, {}, {}};
  const KernelImage image{&kBadMetadata, "pallas_test_add", cubins, nullptr, 32, 0};
  void* args[] = {nullptr};
  Status s = launch_kernel(image, args, {1, 1, 1}, Launch{});
  EXPECT_EQ(s.code(), StatusCode::kCudaError);
  // The driver may check the image when it loads the library or, loading lazily (an H200's
  // 580 driver), when the kernel is looked up or loaded onto the device (cudaFuncGetAttributes,
  // right after): each names the call and the CUDA error.
  const std::string& m = s.message();
  const bool at_load = m.rfind("bad_image: cudaLibraryLoadData failed: ", 0) == 0;
  const bool at_lookup =
      m.rfind("bad_image: cudaLibraryGetKernel failed: ", 0) == 0 ||
      m.rfind("bad_image: cudaFuncGetAttributes (loading the kernel) failed: ", 0) == 0;
  EXPECT_TRUE(at_load || at_lookup) << m;
  EXPECT_NE(s.message().find("cudaError"), std::string::npos) << s.message();
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);  // reported through the Status, not left behind
}

TEST_F(CudaLaunch, NoBinaryForArchNamesDevice) {
  const detail::Cubin cubins[] = {{10, false, kTestCubins[0].data, kTestCubins[0].size}};
  const KernelImage image{&kAddMetadata, "pallas_test_add", cubins, nullptr, 256, 0};
  void* args[] = {nullptr};
  Status s = launch_kernel(image, args, {1, 1, 1}, Launch{});
  EXPECT_EQ(s.code(), StatusCode::kNoBinaryForArch);
  cudaDeviceProp prop{};
  int device = 0;
  ASSERT_CUDA(cudaGetDevice(&device));
  ASSERT_CUDA(cudaGetDeviceProperties(&prop, device));
  const std::string want = std::string("test_add_f32: no binary for ") + prop.name + " (sm_" +
                           std::to_string(10 * prop.major + prop.minor) + "); built targets: sm_10";
  EXPECT_EQ(s.message(), want);
}

// Holds a stream at a host function until opened (or destroyed), so that whatever is queued
// behind it is provably still in flight: the pool cannot see its launches complete.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : stream_(stream) {
    ok_ = cudaLaunchHostFunc(stream, &StreamGate::hold, this) == cudaSuccess;
  }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  ~StreamGate() {
    open();
    (void)cudaStreamSynchronize(stream_);
  }
  bool ok() const { return ok_; }
  void open() { open_.store(true); }

 private:
  static void CUDART_CB hold(void* self) {
    auto* gate = static_cast<StreamGate*>(self);
    // At most 30 s, so that a test failing before it opens the gate cannot hang.
    for (int i = 0; i < 30000 && !gate->open_.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  cudaStream_t stream_;
  bool ok_ = false;
  std::atomic<bool> open_{false};
};

// A launch's two pooled regions (a workspace, semaphores) on `stream`: their addresses, {}
// where acquire_resources failed (the failure is recorded). Released on return, as after a
// launch: a fence recorded on `stream`, behind whatever it has queued (none if capturing).
std::vector<void*> acquire(cudaStream_t stream) {
  const detail::ResourceRequest requests[] = {{4096, detail::ResourceKind::kWorkspace},
                                              {64, detail::ResourceKind::kSemaphores}};
  detail::LaunchResources resources;
  Status s = detail::acquire_resources(kAdd, Launch{Backend::kCuda, stream}, requests, resources);
  EXPECT_TRUE(s.ok()) << s.message();
  if (!s.ok()) return {};
  return {resources.data(0), resources.data(1)};
}

// The pool's regions follow their stream (resources.cc): a stream's next launch takes them
// again at once, even with the earlier launch still queued (the stream orders the two), so a
// deep queue does not grow the pool; another stream never gets them while that launch is in
// flight.
TEST_F(CudaLaunch, PooledRegionsFollowTheirStream) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  int device = 0;
  ASSERT_CUDA(cudaGetDevice(&device));
  {
    StreamGate gate(a);
    ASSERT_TRUE(gate.ok());
    const std::vector<void*> first = acquire(a);
    ASSERT_EQ(first.size(), 2u);
    const size_t regions = detail::pooled_regions(device);
    for (int i = 0; i < 32; ++i)
      EXPECT_EQ(acquire(a), first) << "launch " << i << " on the same stream took other regions";
    EXPECT_EQ(detail::pooled_regions(device), regions) << "a queue on one stream grew the pool";
    const std::vector<void*> other = acquire(b);  // a's fence has not passed: the gate holds it
    ASSERT_EQ(other.size(), 2u);
    EXPECT_NE(other[0], first[0]) << "stream b got stream a's workspace while a's is in flight";
    EXPECT_NE(other[1], first[1]) << "stream b got stream a's semaphores while a's is in flight";
  }  // the gate opens; a drains
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

// A launch captured into a graph runs at every replay, on any stream: it must not take the
// regions of a launch still in flight on its own stream (the eager same-stream rule would),
// and what it takes stays the graph's until the graph is destroyed (resources.cc).
TEST_F(CudaLaunch, CapturedLaunchTakesNoRegionInFlight) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_CUDA(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  ASSERT_CUDA(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  int device = 0;
  ASSERT_CUDA(cudaGetDevice(&device));
  const size_t owned_before = detail::graph_owned_regions(device);
  std::vector<void*> eager, captured;
  cudaGraph_t graph = nullptr;
  {
    StreamGate gate(a);
    ASSERT_TRUE(gate.ok());
    eager = acquire(a);  // in flight behind the gate
    ASSERT_EQ(eager.size(), 2u);
    ASSERT_CUDA(cudaStreamBeginCapture(a, cudaStreamCaptureModeGlobal));
    captured = acquire(a);
    // An eager launch on another stream while `a` captures in the global mode: its calls (the
    // stream's id, event queries, a fence) must not invalidate the capture.
    const std::vector<void*> beside = acquire(b);
    ASSERT_CUDA(cudaStreamEndCapture(a, &graph));
    ASSERT_EQ(captured.size(), 2u);
    ASSERT_EQ(beside.size(), 2u);
    EXPECT_NE(beside[0], captured[0]) << "an eager launch beside the capture got its workspace";
    EXPECT_NE(beside[0], eager[0]) << "stream b got stream a's workspace while a's is in flight";
    EXPECT_NE(captured[0], eager[0]) << "the capture took a workspace in flight on its stream";
    EXPECT_NE(captured[1], eager[1]) << "the capture took semaphores in flight on its stream";
    EXPECT_EQ(detail::graph_owned_regions(device), owned_before + 2);
  }  // the gate opens; a drains: the eager regions are idle, the graph's still held
  for (int i = 0; i < 4; ++i) {
    const std::vector<void*> other = acquire(i % 2 ? a : b);
    ASSERT_EQ(other.size(), 2u);
    EXPECT_NE(other[0], captured[0]) << "an eager launch got the graph's workspace";
    EXPECT_NE(other[1], captured[1]) << "an eager launch got the graph's semaphores";
  }
  ASSERT_CUDA(cudaGraphDestroy(graph));
  // CUDA destroys the graph's user object on its own thread, soon after.
  for (int wait = 0; wait < 500 && detail::graph_owned_regions(device) > owned_before; ++wait)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(detail::graph_owned_regions(device), owned_before);
  ASSERT_CUDA(cudaStreamSynchronize(b));
  cudaStreamDestroy(a);
  cudaStreamDestroy(b);
}

}  // namespace
}  // namespace pallas

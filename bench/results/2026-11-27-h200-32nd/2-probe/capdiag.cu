// Which CUDA calls invalidate a global-mode stream capture on this driver.
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <thread>
__global__ void k(int* p) {
  if (p) *p = 1;
}
static const char* st(cudaStreamCaptureStatus s) {
  return s == cudaStreamCaptureStatusNone     ? "none"
         : s == cudaStreamCaptureStatusActive ? "active"
                                              : "INVALIDATED";
}
static std::atomic<bool> open_{false};
static void CUDART_CB hold(void*) {
  for (int i = 0; i < 3000 && !open_.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}
#define R(x)                                            \
  do {                                                  \
    cudaError_t e_ = (x);                               \
    printf("    %-60s %s\n", #x, cudaGetErrorName(e_)); \
  } while (0)
static void scenario(const char* name, const std::function<void(cudaStream_t)>& pre,
                     const std::function<void(cudaStream_t)>& body) {
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  printf("== %s\n", name);
  pre(s);
  R(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  body(s);
  cudaStreamCaptureStatus c;
  R(cudaStreamGetCaptureInfo(s, &c));
  printf("    -> %s\n", st(c));
  cudaGraph_t g = nullptr;
  R(cudaStreamEndCapture(s, &g));
  if (g) cudaGraphDestroy(g);
  cudaGetLastError();
  open_ = true;
  cudaStreamSynchronize(s);
  open_ = false;
  cudaStreamDestroy(s);
}
struct Relaxed {
  cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
  Relaxed() { cudaThreadExchangeStreamCaptureMode(&m); }
  ~Relaxed() { cudaThreadExchangeStreamCaptureMode(&m); }
};
int main() {
  cudaFree(0);
  auto none = [](cudaStream_t) {};
  cudaEvent_t earlier;
  cudaEventCreateWithFlags(&earlier, cudaEventDisableTiming);
  scenario("nothing", none, none);
  scenario("cudaGetDevice", none, [](cudaStream_t) {
    int d;
    R(cudaGetDevice(&d));
  });
  scenario("cudaStreamGetId", none, [](cudaStream_t s) {
    unsigned long long id;
    R(cudaStreamGetId(s, &id));
  });
  scenario(
      "gate (host func) before capture",
      [](cudaStream_t s) { cudaLaunchHostFunc(s, hold, nullptr); }, none);
  scenario(
      "event recorded on s before; query relaxed",
      [&](cudaStream_t s) {
        cudaEventRecord(earlier, s);
        cudaStreamSynchronize(s);
      },
      [&](cudaStream_t) {
        Relaxed r;
        R(cudaEventQuery(earlier));
      });
  scenario(
      "event recorded on s behind gate; query relaxed",
      [&](cudaStream_t s) {
        cudaLaunchHostFunc(s, hold, nullptr);
        cudaEventRecord(earlier, s);
      },
      [&](cudaStream_t) {
        Relaxed r;
        R(cudaEventQuery(earlier));
      });
  scenario(
      "event query NOT relaxed",
      [&](cudaStream_t s) {
        cudaEventRecord(earlier, s);
        cudaStreamSynchronize(s);
      },
      [&](cudaStream_t) { R(cudaEventQuery(earlier)); });
  scenario("eventCreate relaxed", none, [](cudaStream_t) {
    Relaxed r;
    cudaEvent_t e;
    R(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  });
  scenario("cudaMalloc relaxed", none, [](cudaStream_t) {
    Relaxed r;
    void* p;
    R(cudaMalloc(&p, 4096));
  });
  scenario("private stream create relaxed", none, [](cudaStream_t) {
    Relaxed r;
    cudaStream_t z;
    R(cudaStreamCreateWithFlags(&z, cudaStreamNonBlocking));
  });
  scenario("zero now relaxed (create, memsetAsync, sync, destroy)", none, [](cudaStream_t) {
    Relaxed r;
    void* p;
    R(cudaMalloc(&p, 4096));
    cudaStream_t z;
    R(cudaStreamCreateWithFlags(&z, cudaStreamNonBlocking));
    R(cudaMemsetAsync(p, 0, 4096, z));
    R(cudaStreamSynchronize(z));
    R(cudaStreamDestroy(z));
  });
  scenario("cudaFuncGetAttributes relaxed", none, [](cudaStream_t) {
    Relaxed r;
    cudaFuncAttributes a;
    R(cudaFuncGetAttributes(&a, k));
  });
  scenario("kernel launch in capture", none, [](cudaStream_t s) {
    k<<<1, 1, 0, s>>>(nullptr);
    R(cudaGetLastError());
  });
  scenario("event record in capture (fence)", none,
           [&](cudaStream_t s) { R(cudaEventRecord(earlier, s)); });
  scenario("user object + retain", none, [](cudaStream_t s) {
    cudaStreamCaptureStatus c;
    cudaGraph_t g;
    R(cudaStreamGetCaptureInfo(s, &c, nullptr, &g));
    cudaUserObject_t o;
    R(cudaUserObjectCreate(
        &o, nullptr, [](void*) {}, 1, cudaUserObjectNoDestructorSync));
    R(cudaGraphRetainUserObject(g, o, 1, cudaGraphUserObjectMove));
  });
  scenario("cudaOccupancyMaxActiveClusters relaxed", none, [](cudaStream_t) {
    Relaxed r;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(8);
    cfg.blockDim = dim3(128);
    cudaLaunchAttribute at;
    at.id = cudaLaunchAttributeClusterDimension;
    at.val.clusterDim.x = 4;
    at.val.clusterDim.y = 1;
    at.val.clusterDim.z = 1;
    cfg.attrs = &at;
    cfg.numAttrs = 1;
    int n = 0;
    R(cudaOccupancyMaxActiveClusters(&n, (void*)k, &cfg));
    printf("    clusters %d\n", n);
  });
  scenario("cudaPointerGetAttributes", none, [](cudaStream_t) {
    void* p;
    cudaMalloc(&p, 16);
    cudaPointerAttributes a;
    R(cudaPointerGetAttributes(&a, p));
  });
  return 0;
}

// Shared helpers for the op tests: arrays that live on the backend under test,
// fresh random data, poisoning, and tolerance checks against float64 references.
#pragma once

#include <pallas/pallas.h>
#include <pallas/thrust.h>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace pallas::testing {

inline float to_float(float v) { return v; }
inline float to_float(half v) { return static_cast<float>(v); }
inline float to_float(bfloat16 v) { return static_cast<float>(v); }
inline float to_float(int32_t v) { return static_cast<float>(v); }
template <class T>
T from_float(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return T(v);
}

/// |got - want| <= atol + rtol * |want|, per dtype of the output (DESIGN.md 6).
template <class T>
struct Tolerance;
template <>
struct Tolerance<float> {
  static constexpr double rtol = 1e-5, atol = 1e-6;
};
template <>
struct Tolerance<half> {
  static constexpr double rtol = 1e-2, atol = 1e-3;
};
template <>
struct Tolerance<bfloat16> {
  static constexpr double rtol = 1e-2, atol = 1e-2;
};

template <class T>
const char* dtype_name() {
  return to_string(dtype_of_v<T>);
}

/// A fresh seed per run (printed on failure) so tests see new data each time.
inline uint32_t fresh_seed() {
  static std::random_device rd;
  return rd();
}

/// A host vector mirrored in device memory on the CUDA backend: a
/// thrust::device_vector, whose copies are cudaMemcpy (no Thrust kernel, so a
/// host compiler builds it). Thrust reports CUDA errors as exceptions, which
/// fail the test.
template <class T>
class Array {
 public:
  Array(Backend backend, size_t count) : backend_(backend), host_(count) {
    if (backend_ == Backend::kCuda && count > 0) device_.assign(host_.begin(), host_.end());
  }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  std::vector<T>& host() { return host_; }
  /// Pointer on the backend: host memory or device memory.
  T* data() {
    return backend_ == Backend::kCuda ? thrust::raw_pointer_cast(device_.data()) : host_.data();
  }
  void upload() {
    if (!device_.empty()) thrust::copy(host_.begin(), host_.end(), device_.begin());
  }
  void download() {
    if (!device_.empty()) {
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      thrust::copy(device_.begin(), device_.end(), host_.begin());
    }
  }
  void fill_random(std::mt19937& rng, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    for (T& v : host_) v = from_float<T>(dist(rng));
  }
  /// NaN everywhere: an element the kernel fails to write stays NaN and fails.
  void poison() {
    for (T& v : host_) v = from_float<T>(std::numeric_limits<float>::quiet_NaN());
  }

 private:
  Backend backend_;
  std::vector<T> host_;
  thrust::device_vector<T> device_;
};

/// Checks one element; returns false (and records a failure) when it is off.
template <class T>
bool expect_close(T got_value, double want, const std::string& where) {
  double got = to_float(got_value);
  double tol = Tolerance<T>::atol + Tolerance<T>::rtol * std::abs(want);
  if (std::isnan(got) || std::isnan(want) || std::abs(got - want) > tol) {
    ADD_FAILURE() << where << ": got " << got << ", want " << want << " (tolerance " << tol << ")";
    return false;
  }
  return true;
}

/// Whether an entry point's staged instance runs on `backend` where TMA's rules hold (its
/// descriptors are handed out): always on the emulator (an sm_90 by default), on CUDA where
/// the device is an sm_90 (TMA) or sm_8x (the cp.async form, which takes the same
/// descriptor parameters; the small test kernels' plans fit 99 KiB), never on the host.
/// The current CUDA device's compute capability major (9 for sm_90), or -1 where CUDA cannot
/// say (no device, a failed query).
inline int cuda_compute_major() {
  int device = 0, major = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return major;
}

inline bool tma_instance_runs(Backend backend) {
  if (backend == Backend::kEmulator) return true;
  if (backend != Backend::kCuda || !cuda_device_available()) return false;
  const int major = cuda_compute_major();
  return major == 8 || major == 9;
}

class BackendTest : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    if (GetParam() == Backend::kCuda && !cuda_device_available())
      GTEST_SKIP() << "no CUDA device: the CUDA backend is not tested here";
  }
  Launch launch() const { return Launch{GetParam(), nullptr}; }
};

inline std::string backend_name(const ::testing::TestParamInfo<Backend>& info) {
  switch (info.param) {
    case Backend::kCuda:
      return "Cuda";
    case Backend::kEmulator:
      return "Emulator";
    default:
      return "Host";
  }
}

}  // namespace pallas::testing

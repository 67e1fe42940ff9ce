// Optional: views of Thrust's vectors, so entry points take a thrust::device_vector (CUDA
// backend) or thrust::host_vector (host and emulator backends) as they take a pointer.
//
//   #include <pallas/thrust.h>
//   thrust::device_vector<float> x = host_x, y(n);
//   pallas::Status s = pallas::kernels::gelu(pallas::TensorView<const float, 1>(x, {n}),
//                                            pallas::TensorView<float, 1>(y, {n}), launch);
//
// The view keeps the vector's size: an entry point rejects a view that reaches past it
// (check_storage). Needs the CUDA toolkit's Thrust (CCCL) headers on the include path
// (CMake: PallasKernels::thrust); a host compiler is enough, nothing here launches a kernel.
#pragma once

#include <cstdint>

#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include "pallas/tensor_view.h"

namespace pallas {

namespace detail {
// StorageTraits of a Thrust vector `Vector` of T: its elements are contiguous.
template <class Vector, class T>
struct ThrustVectorTraits {
  static T* data(Vector& v) { return thrust::raw_pointer_cast(v.data()); }
  static const T* data(const Vector& v) { return thrust::raw_pointer_cast(v.data()); }
  static int64_t size(const Vector& v) { return static_cast<int64_t>(v.size()); }
};
}  // namespace detail

template <class T, class Alloc>
struct StorageTraits<thrust::device_vector<T, Alloc>>
    : detail::ThrustVectorTraits<thrust::device_vector<T, Alloc>, T> {};

template <class T, class Alloc>
struct StorageTraits<thrust::host_vector<T, Alloc>>
    : detail::ThrustVectorTraits<thrust::host_vector<T, Alloc>, T> {};

}  // namespace pallas

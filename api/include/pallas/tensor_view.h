// pallas::TensorView: a non-owning view of a strided array in device (or host) memory.
//
// Strides are in elements, not bytes. Entry points check views before launching
// (pallas::detail::check_operand): no null data unless the view is empty, alignment to the
// element size, unit stride in the last dim, and for an output no overlap between dims (an
// input may broadcast: a stride of 0 reads one row, or one matrix of a batch, several times).
//
// A view is made from a pointer, or from a container that owns the elements: a std::vector
// here, thrust::device_vector / host_vector with <pallas/thrust.h>. A view of a container
// knows how many elements the container holds, and an entry point rejects a view whose
// shape and strides reach past them (check_storage), naming the operand:
//
//   std::vector<float> x(1000), y(1000);
//   pallas::kernels::gelu(pallas::TensorView<const float, 1>(x, {1000}),
//                         pallas::TensorView<float, 1>(y, {1000}), {pallas::Backend::kHost});
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace pallas {

// How a view reaches the elements of a container `C`: `data(c)` (the first element, a raw
// pointer in the memory the kernels read) and `size(c)` (elements). Specialized for
// std::vector below and for Thrust's vectors in <pallas/thrust.h>.
template <class C>
struct StorageTraits;

template <class T, class Alloc>
struct StorageTraits<std::vector<T, Alloc>> {
  static T* data(std::vector<T, Alloc>& v) { return v.data(); }
  static const T* data(const std::vector<T, Alloc>& v) { return v.data(); }
  static int64_t size(const std::vector<T, Alloc>& v) { return static_cast<int64_t>(v.size()); }
};

// A container a TensorView<T, Rank> can view: its StorageTraits give a pointer convertible to T*.
template <class C, class T>
concept ViewableStorage = requires(C& c) {
  { StorageTraits<std::remove_const_t<C>>::data(c) } -> std::convertible_to<T*>;
  { StorageTraits<std::remove_const_t<C>>::size(c) } -> std::convertible_to<int64_t>;
};

template <class T, int Rank>
class TensorView {
  static_assert(Rank >= 0, "pallas::TensorView: Rank must be >= 0");

 public:
  static constexpr int rank = Rank;
  using element_type = T;
  // std::array<int64_t, Rank>, spelled without an int -> size_t conversion (-Wsign-conversion).
  using Extents = std::array<int64_t, static_cast<size_t>(Rank)>;

  TensorView() = default;

  // A row-major contiguous view: the last dim has stride 1.
  constexpr TensorView(T* data, Extents shape)
      : data_(data), shape_(shape), strides_(row_major_strides(shape)) {}

  constexpr TensorView(T* data, Extents shape, Extents strides)
      : data_(data), shape_(shape), strides_(strides) {}

  // A view of a container's elements from its first (row-major, or with `strides`). Entry
  // points check that the view stays inside the container. Only lvalues: a view of a
  // temporary would dangle.
  template <class C>
  requires ViewableStorage<C, T> TensorView(C& storage, Extents shape)
      : TensorView(StorageTraits<std::remove_const_t<C>>::data(storage), shape) {
    storage_elements_ = StorageTraits<std::remove_const_t<C>>::size(storage);
  }
  template <class C>
  requires ViewableStorage<C, T> TensorView(C& storage, Extents shape, Extents strides)
      : TensorView(StorageTraits<std::remove_const_t<C>>::data(storage), shape, strides) {
    storage_elements_ = StorageTraits<std::remove_const_t<C>>::size(storage);
  }

  // A view of mutable elements converts to a view of const elements.
  template <class U>
  requires std::is_same_v<T, const U>
  constexpr TensorView(const TensorView<U, Rank>& other)  // NOLINT(google-explicit-constructor)
      : data_(other.data()),
        shape_(other.shape()),
        strides_(other.strides()),
        storage_elements_(other.storage_elements()) {}

  constexpr T* data() const { return data_; }
  constexpr const Extents& shape() const { return shape_; }
  constexpr const Extents& strides() const { return strides_; }
  constexpr int64_t shape(int d) const { return shape_[static_cast<size_t>(d)]; }
  constexpr int64_t stride(int d) const { return strides_[static_cast<size_t>(d)]; }
  // Elements the viewed container holds from data(); -1 for a view made from a pointer.
  constexpr int64_t storage_elements() const { return storage_elements_; }

  // The number of elements (1 for rank 0).
  constexpr int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : shape_) n *= s;
    return n;
  }

  static constexpr Extents row_major_strides(const Extents& shape) {
    Extents strides{};
    int64_t s = 1;
    for (size_t d = static_cast<size_t>(Rank); d-- > 0;) {
      strides[d] = s;
      s *= shape[d];
    }
    return strides;
  }

 private:
  T* data_ = nullptr;
  Extents shape_{};
  Extents strides_{};
  int64_t storage_elements_ = -1;
};

}  // namespace pallas

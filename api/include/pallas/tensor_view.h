// pallas::TensorView: a non-owning view of a strided array in device (or host) memory.
//
// Strides are in elements, not bytes. Entry points check views before launching
// (pallas::detail::check_operand): no null data unless the view is empty, alignment to the
// element size, unit stride in the last dim, and no overlap between dims.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace pallas {

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

  // A view of mutable elements converts to a view of const elements.
  template <class U>
  requires std::is_same_v<T, const U>
  constexpr TensorView(const TensorView<U, Rank>& other)  // NOLINT(google-explicit-constructor)
      : data_(other.data()), shape_(other.shape()), strides_(other.strides()) {}

  constexpr T* data() const { return data_; }
  constexpr const Extents& shape() const { return shape_; }
  constexpr const Extents& strides() const { return strides_; }
  constexpr int64_t shape(int d) const { return shape_[static_cast<size_t>(d)]; }
  constexpr int64_t stride(int d) const { return strides_[static_cast<size_t>(d)]; }

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
};

}  // namespace pallas

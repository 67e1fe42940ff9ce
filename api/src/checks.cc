// Operand checks of generated entry points (pallas::detail::check_operand, check_dim).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "pallas/detail/kernel_image.h"

namespace pallas::detail {
namespace {

std::string prefix(const char* kernel, const char* operand) {
  std::string s = kernel ? kernel : "<kernel>";
  s += ": operand '";
  s += operand ? operand : "?";
  s += "'";
  return s;
}

std::string hex(uintptr_t value) {
  char buf[2 + 2 * sizeof(uintptr_t)] = {'0', 'x'};
  auto [end, ec] = std::to_chars(buf + 2, buf + sizeof(buf), value, 16);
  (void)ec;  // the buffer always fits
  return std::string(buf, end);
}

/// A view's bytes as rows: `rows` runs of `width` bytes, `stride` bytes apart
/// from `base` (exact: the view is exactly these rows; else only its span).
struct ByteRows {
  int64_t base = 0, rows = 0, stride = 0, width = 0;
  bool exact = true;
  bool empty() const { return rows == 0; }
  int64_t end() const { return base + (rows - 1) * stride + width; }
};

ByteRows byte_rows(const void* data, size_t element, int rank, const int64_t* shape,
                   const int64_t* strides) {
  ByteRows r;
  r.base = static_cast<int64_t>(reinterpret_cast<uintptr_t>(data));
  const auto es = static_cast<int64_t>(element);
  for (int d = 0; d < rank; ++d)
    if (shape[d] == 0) return r;  // empty
  // The innermost dim is contiguous (check_operand); merge every outer dim that
  // continues it (stride * element == the bytes inside it), then count the rest.
  r.width = es;
  r.rows = 1;
  int64_t outer_dims = 0;
  for (int d = rank - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    const int64_t stride = strides[d] * es;
    if (outer_dims == 0 && (d == rank - 1 || stride == r.width)) {
      r.width = d == rank - 1 ? shape[d] * es : r.width * shape[d];
      continue;
    }
    if (outer_dims == 1 && stride == r.stride * r.rows) {  // continues the rows
      r.rows *= shape[d];
      continue;
    }
    if (outer_dims == 1) {  // a second, independent outer dim: only the span is known
      r.exact = false;
      r.width = r.end() - r.base;  // the span so far, as one row
      r.rows = 1;
    }
    r.stride = stride;
    r.rows *= shape[d];
    outer_dims = 1;
  }
  if (r.rows == 1) r.stride = 0;
  return r;
}

/// Whether the rows of `a` and `b` share a byte.
bool overlap(const ByteRows& a, const ByteRows& b) {
  if (a.empty() || b.empty()) return false;
  if (a.end() <= b.base || b.end() <= a.base) return false;  // disjoint spans
  const int64_t stride = a.rows > 1 ? a.stride : b.stride;
  if (!a.exact || !b.exact || stride == 0 || (a.rows > 1 && b.rows > 1 && a.stride != b.stride))
    return true;  // intersecting spans of views not compared row by row
  // Row i of a is [a.base + i S, + a.width), row j of b [b.base + j S, + b.width); with
  // k = j - i and d = b.base - a.base they meet iff -b.width < d + k S < a.width.
  const int64_t d = b.base - a.base;
  auto floor_div = [](int64_t x, int64_t y) {
    return x / y - ((x % y != 0) && ((x < 0) != (y < 0)));
  };
  const int64_t k_min = floor_div(-b.width - d, stride) + 1;
  const int64_t k_max = -floor_div(-(a.width - d), stride) - 1;  // ceil((a.width - d) / S) - 1
  const int64_t lo = std::max(k_min, -(a.rows - 1)), hi = std::min(k_max, b.rows - 1);
  return lo <= hi;
}

}  // namespace

Status check_no_overlap(const char* kernel, const char* a_name, const void* a, size_t a_element,
                        int a_rank, const int64_t* a_shape, const int64_t* a_strides,
                        const char* b_name, const void* b, size_t b_element, int b_rank,
                        const int64_t* b_shape, const int64_t* b_strides) {
  if (!overlap(byte_rows(a, a_element, a_rank, a_shape, a_strides),
               byte_rows(b, b_element, b_rank, b_shape, b_strides)))
    return Status::Ok();
  return Status::Error(StatusCode::kInvalidArgument,
                       std::string(kernel) + ": output '" + a_name + "' overlaps operand '" +
                           b_name +
                           "' in memory (only an operand the kernel declares in-place may share "
                           "memory with an output)");
}

Status check_index_range(const char* kernel, const char* operand, int rank, const int64_t* shape,
                         const int64_t* strides) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  // The last element's offset + 1, saturating (check_operand accepted the view: extents and
  // strides are non-negative).
  int64_t span = 1;
  bool too_big = false;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return Status::Ok();  // empty: nothing is indexed
    if (shape[d] - 1 > kMax || (strides[d] != 0 && (shape[d] - 1) > kMax / strides[d])) {
      too_big = true;
      continue;
    }
    span += (shape[d] - 1) * strides[d];
    too_big = too_big || span > kMax;
  }
  if (!too_big) return Status::Ok();
  std::string how_many = "more than " + std::to_string(kMax);
  if (span > kMax && span < (int64_t{1} << 62)) how_many = std::to_string(span);
  return Status::Error(StatusCode::kInvalidArgument,
                       std::string(kernel) + ": operand '" + operand + "' spans " + how_many +
                           " elements; its kernel indexes in 32 bits, at most " +
                           std::to_string(kMax));
}

Status check_storage(const char* kernel, const char* operand, int rank, const int64_t* shape,
                     const int64_t* strides, int64_t storage_elements) {
  if (storage_elements < 0) return Status::Ok();  // a pointer: nothing to compare with
  // The last element's offset (check_operand accepted the view: no overflow, no negative
  // extents or strides).
  int64_t last = 0;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) return Status::Ok();  // empty: nothing is read or written
    last += (shape[d] - 1) * strides[d];
  }
  if (last < storage_elements) return Status::Ok();
  return Status::Error(StatusCode::kInvalidArgument,
                       prefix(kernel, operand) + " reaches element " + std::to_string(last) +
                           " of its storage, which holds " + std::to_string(storage_elements) +
                           " elements");
}

std::string number_text(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

bool dims_disjoint_by_stride(int rank, const int64_t* shape, const int64_t* strides) {
  // The dims that are stepped along, innermost (smallest stride) first.
  std::vector<int> order;
  for (int d = 0; d < rank; ++d)
    if (shape[d] > 1) order.push_back(d);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return strides[a] < strides[b]; });
  int64_t span = 1;  // one past the largest offset the dims so far reach
  for (int d : order) {
    if (strides[d] < span) return false;
    int64_t extent = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &extent) ||
        __builtin_add_overflow(span, extent, &span))
      return false;
  }
  return true;
}

Status check_operand(const char* kernel, const char* operand, const void* data, size_t element_size,
                     int rank, const int64_t* shape, const int64_t* strides, bool written) {
  bool empty = false;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] < 0) {
      return Status::Error(StatusCode::kInvalidArgument,
                           prefix(kernel, operand) + " dim " + std::to_string(d) +
                               " has negative extent " + std::to_string(shape[d]));
    }
    empty = empty || shape[d] == 0;
  }
  if (empty) return Status::Ok();  // nothing is read or written

  if (data == nullptr) {
    return Status::Error(StatusCode::kNullPointer, prefix(kernel, operand) + " is a null pointer");
  }
  const auto address = reinterpret_cast<uintptr_t>(data);
  if (element_size > 1 && address % element_size != 0) {
    return Status::Error(StatusCode::kMisaligned,
                         prefix(kernel, operand) + " is not aligned to its " +
                             std::to_string(element_size) + "-byte element size (address " +
                             hex(address) + ")");
  }
  if (rank == 0) return Status::Ok();

  const int last = rank - 1;
  if (shape[last] > 1 && strides[last] != 1) {
    return Status::Error(StatusCode::kInvalidArgument,
                         prefix(kernel, operand) + " dim " + std::to_string(last) + " has stride " +
                             std::to_string(strides[last]) +
                             "; the kernel needs unit stride in the last dim");
  }
  // `span` is one past the largest offset reachable through the dims inside dim d. A written
  // operand's dim d must step past it, so that no two indices alias the same element; an
  // input's may not (a stride of 0 broadcasts, as an expanded view: reading an element twice
  // is harmless), but it may not step backwards.
  int64_t span = shape[last];
  for (int d = last - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (!written && strides[d] < 0) {
      return Status::Error(StatusCode::kInvalidArgument,
                           prefix(kernel, operand) + " dim " + std::to_string(d) +
                               " has negative stride " + std::to_string(strides[d]) +
                               "; an input's strides are 0 (broadcast) or positive");
    }
    if (written && strides[d] < span) {
      // Dims in another order may still not overlap: [batch, heads, seq, d] viewing
      // [batch, seq, heads, d] memory (strides {S H D, D, H D, 1}).
      if (dims_disjoint_by_stride(rank, shape, strides)) return Status::Ok();
      return Status::Error(StatusCode::kInvalidArgument,
                           prefix(kernel, operand) + " dim " + std::to_string(d) + " has stride " +
                               std::to_string(strides[d]) + ", smaller than the " +
                               std::to_string(span) +
                               " elements of the dims inside it (an output's elements may not "
                               "share memory; only inputs broadcast)");
    }
    int64_t extent = 0;
    if (__builtin_mul_overflow(shape[d] - 1, strides[d], &extent) ||
        __builtin_add_overflow(span, extent, &span)) {
      return Status::Error(StatusCode::kInvalidArgument,
                           prefix(kernel, operand) + " dim " + std::to_string(d) + " with stride " +
                               std::to_string(strides[d]) + " spans more than 2^63 elements");
    }
  }
  return Status::Ok();
}

Status check_dim(const char* kernel, const char* operand, int dim, int64_t actual,
                 const char* dim_name, int64_t expected, const char* set_by_operand,
                 int set_by_dim) {
  if (actual == expected) return Status::Ok();
  std::string message = prefix(kernel, operand) + " dim " + std::to_string(dim) + " is " +
                        std::to_string(actual) + ", but dim '" + (dim_name ? dim_name : "?") +
                        "' is " + std::to_string(expected);
  if (set_by_operand != nullptr) {
    message += std::string(" (set by operand '") + set_by_operand + "' dim " +
               std::to_string(set_by_dim) + ")";
  }
  return Status::Error(StatusCode::kShapeMismatch, std::move(message));
}

}  // namespace pallas::detail

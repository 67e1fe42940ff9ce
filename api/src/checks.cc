// Operand checks of generated entry points (pallas::detail::check_operand, check_dim).
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>

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

}  // namespace

std::string number_text(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

Status check_operand(const char* kernel, const char* operand, const void* data, size_t element_size,
                     int rank, const int64_t* shape, const int64_t* strides) {
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
  // `span` is one past the largest offset reachable through the dims inside dim d; dim d must
  // step past it so that no two indices alias the same element.
  int64_t span = shape[last];
  for (int d = last - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (strides[d] < span) {
      return Status::Error(StatusCode::kInvalidArgument,
                           prefix(kernel, operand) + " dim " + std::to_string(d) + " has stride " +
                               std::to_string(strides[d]) + ", smaller than the " +
                               std::to_string(span) + " elements of the dims inside it");
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

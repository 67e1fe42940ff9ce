#include "pallas/dtype.h"

namespace pallas {

const char* to_string(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
  }
  return "unknown dtype";
}

}  // namespace pallas

#include "pallas/status.h"

namespace pallas {

const char* to_string(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kShapeMismatch:
      return "shape mismatch";
    case StatusCode::kNullPointer:
      return "null pointer";
    case StatusCode::kMisaligned:
      return "misaligned";
    case StatusCode::kUnsupportedDtype:
      return "unsupported dtype";
    case StatusCode::kNoDevice:
      return "no device";
    case StatusCode::kNoBinaryForArch:
      return "no binary for arch";
    case StatusCode::kCudaError:
      return "cuda error";
    case StatusCode::kUnsupportedBackend:
      return "unsupported backend";
    case StatusCode::kEmulatorCheckFailed:
      return "emulator check failed";
    case StatusCode::kOutOfMemory:
      return "out of memory";
  }
  return "unknown status code";
}

}  // namespace pallas

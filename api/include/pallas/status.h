// pallas::Status: the result of every runtime and generated entry point.
//
// No exceptions cross the API: every call that can fail returns a [[nodiscard]] Status whose
// code says what kind of failure it is and whose message says exactly what was wrong
// ("add_f32: operand 'x' is a null pointer").
#pragma once

#include <string>
#include <utility>

namespace pallas {

enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument,      // a bad value: negative extent, bad stride, grid too large, ...
  kShapeMismatch,        // operand dims disagree with each other
  kNullPointer,          // a non-empty operand has no data
  kMisaligned,           // an operand is not aligned to its element size
  kUnsupportedDtype,     // no instance of the kernel for this element type
  kNoDevice,             // the CUDA backend was asked for, but there is no usable device
  kNoBinaryForArch,      // the device's architecture has no cubin in the library
  kCudaError,            // a CUDA runtime call failed
  kUnsupportedBackend,   // the kernel has no binary for the requested backend
  kEmulatorCheckFailed,  // the emulator found an out-of-bounds access, a race or a deadlock
  kOutOfMemory           // memory the launch needs (workspace, semaphores) could not be allocated
};

// "ok", "invalid argument", "shape mismatch", ...
const char* to_string(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok

  static Status Ok() { return Status(); }
  // An error with `code` and `message`. Error(kOk, ...) is an ok status (the message is dropped).
  static Status Error(StatusCode code, std::string message) {
    Status s;
    if (code != StatusCode::kOk) {
      s.code_ = code;
      s.message_ = std::move(message);
    }
    return s;
  }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }  // "" when ok

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace pallas

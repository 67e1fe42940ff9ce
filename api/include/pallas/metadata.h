// Static description of a generated kernel: operands, grid, per-target resource usage.
// Generic harnesses and the benchmarks read this; every entry point exposes it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

#include "pallas/dtype.h"

namespace pallas {

enum class OperandRole : uint8_t {
  kInput,
  kOutput,
  kInOut,  // an input aliased to an output, updated in place
  kScalar,
  kSemaphores,  // int32 counters from the runtime's pool (not a parameter of the entry point)
  kWorkspace,   // global-memory scratch from the runtime's pool (not a parameter either)
  kErrors,      // the kernel's record of failed checks, 8 int32 from the runtime (see checks)
};

struct OperandMetadata {
  const char* name;
  OperandRole role;
  DType dtype;
  int rank;
  std::array<int64_t, 4> block_shape;  // -1 = squeezed, -2 = full dim; past `rank`: 0
  // Its parameter of the typed entry point (the argv slot), or -1: the runtime supplies it
  // (semaphores, workspace, errors), or it is an output updated in its kInOut input's place.
  int argument = -1;
  // Each dim's extent where the spec fixes it ([1] for a scalar result), -1 for a run-time dim
  // (set by the caller's views); past `rank`: 0.
  std::array<int64_t, 4> fixed_shape = {};
};

struct TargetMetadata {
  const char* arch;    // "sm_90a"
  int sm;              // 90
  bool arch_specific;  // true for the 'a' targets
  int registers;       // per thread
  int spill_stores;    // bytes
  int spill_loads;     // bytes
  int shared_bytes;    // static + dynamic shared memory per program
  size_t cubin_bytes;
  int threads;  // the block this cubin launches with (an sm_80 form has no producer warpgroup)
};

struct KernelMetadata {
  const char* name;         // the instance, "add_f32"
  const char* op;           // the op family, "add"
  const char* grid;         // the grid as text, "[cdiv(n, 1024)]"
  int threads_per_program;  // sm_90 on; TargetMetadata::threads is each cubin's own
  std::span<const OperandMetadata> operands;
  std::span<const TargetMetadata> targets;
  // What each run-time check of the kernel (spec.check) reports, "{0}".."{2}" standing for
  // the values the failing program recorded: "operand 'labels' element {0} is {1}, ...".
  std::span<const char* const> checks = {};
  // What the user called, named in messages: "softmax_f32" for the instances
  // "softmax_f32_tile16" (a variant) and "transpose_f32_direct" (a TMA kernel's twin).
  const char* entry = nullptr;
};

class Status;
struct Launch;

// One kernel instance's metadata and argv entry point. Each op's generated header lists its
// instances (<op>_entry_points) and <pallas/kernels.h> every prebuilt op's
// (kernels::all_entry_points), for harnesses that walk the library.
struct EntryPoint {
  const KernelMetadata& (*metadata)();
  Status (*argv)(void* const* args, const Launch& launch);
};

}  // namespace pallas

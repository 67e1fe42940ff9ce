//===- Emitter.h - generated C++ for one op -------------------------*- C++ -*-===//
#ifndef PALLAS_CODEGEN_EMITTER_H
#define PALLAS_CODEGEN_EMITTER_H

#include "pallas/Codegen/Pipelines.h"
#include "pallas/EDSL/Trace.h"

#include <string>
#include <vector>

namespace pallas::codegen {

/// Everything generated for one kernel instance.
struct CompiledInstance {
  const edsl::TracedKernel* kernel;
  std::vector<GpuBinary> gpu;
  /// Lowered separately for sm_80 (cp.async copies, dots without wgmma), so
  /// the emulator has that form too: pallas_emu_kernel_<instance>_cp_async.
  bool sm80_form = false;
  /// Lowered for the host backend: pallas_host_<instance>. A staged instance has none: the
  /// host has no TMA, so its entry point runs the direct twin there (tma_path_unavailable),
  /// and a host form of its pipeline would only cost build time (about a seventh of the
  /// matmul ops' codegen).
  bool host_form = true;
};

/// The symbol of an instance's cubin for `arch` in `<op>_host.o`: the codegen
/// puts the bytes there (a constant, 16-byte aligned) instead of in the
/// generated source, which a C++ compiler would parse byte by byte.
std::string cubinSymbol(const std::string& instance, const std::string& arch);

/// The public header `pallas/kernels/<op>.h`: one typed overload per instance,
/// plus `<instance>_argv` and `<instance>_metadata` (Halide's pattern).
std::string emitHeader(const std::string& op, const std::string& spec_file,
                       const std::vector<CompiledInstance>& instances);

/// The source: metadata, argument checks, grid computation and the launch
/// through the runtime. Links against `<op>_host.o` (the host forms and the
/// cubins: cubinSymbol) and `<op>_emulator.o` (the emulator forms).
std::string emitSource(const std::string& op, const std::string& spec_file,
                       const std::vector<CompiledInstance>& instances);

}  // namespace pallas::codegen

#endif  // PALLAS_CODEGEN_EMITTER_H

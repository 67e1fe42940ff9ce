//===- Pipelines.h - kernel IR to cubins and host objects ---------*- C++ -*-===//
#ifndef PALLAS_CODEGEN_PIPELINES_H
#define PALLAS_CODEGEN_PIPELINES_H

#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "mlir/IR/BuiltinOps.h"

#include <memory>
#include <string>
#include <vector>

namespace pallas::codegen {

/// Registers every pass and translation the pipelines use.
void registerPipelineDependencies(mlir::DialectRegistry& registry);

struct GpuOptions {
  std::vector<std::string> archs = {"sm_90a", "sm_80"};
  std::string ptxas = "/usr/local/cuda/bin/ptxas";
  std::string cuda_root = "/usr/local/cuda";
  /// PTX ISA version written into the PTX: 8.0 is accepted by every ptxas
  /// from CUDA 12.0 on and is the first with sm_90a.
  std::string ptx_features = "+ptx80";
  /// The module was lowered for sm_8x (lowerToGpuFuncs' cpAsync: cp.async copies, mma.sync,
  /// no clusters): compileForGpu then adds no griddepcontrol wait, which sm_80 lacks, whatever
  /// the archs.
  bool cp_async = false;
};

/// One kernel compiled for one GPU target, with ptxas' resource report.
struct GpuBinary {
  std::string arch;  // "sm_90a"
  int sm = 0;        // 90
  bool arch_specific = false;
  std::string ptx;
  std::string cubin;
  int registers = 0;
  int spill_stores = 0;
  int spill_loads = 0;
  int shared_bytes = 0;          // static + dynamic shared memory per program
  int dynamic_shared_bytes = 0;  // the kernel's shared-memory plan, passed at launch
  int threads = 0;               // the block size it was compiled for, launched with
  // Opens with griddepcontrol wait (pallas-wait-for-prerequisite-grids): may be launched
  // with programmatic stream serialization.
  bool waits_for_prerequisite_grids = false;
};

/// A kernel's shared-memory plan (convert-pallas-to-gpu): its bytes, requested at launch as
/// dynamic shared memory, and their alignment.
struct SharedPlan {
  int bytes = 0;
  int64_t align = 16;
};

/// The pass pipeline from kernel IR to gpu.modules of NVVM-dialect kernels:
/// what becomes PTX, and what the emulator runs. `cpAsync`: staged blocks are
/// copied with cp.async (sm_80), not TMA; dots multiply with mma.sync, not wgmma.
std::string gpuToNVVMPipeline(bool cpAsync = false);
/// Its first half: kernel IR to gpu.modules of gpu.func kernels (blocks to threads; the
/// shared-memory plan, module attributes pallas.shared_bytes.<kernel>).
std::string pallasToGpuPipeline(bool cpAsync = false);
/// Its second half: gpu.modules of gpu.func kernels to the NVVM dialect.
std::string gpuModuleToNVVMPipeline();

/// Runs the textual pass `pipeline` on `module`, verifying the result once at the end. On
/// failure returns false with "<what> failed:" and the diagnostics in `error`.
bool runPipeline(mlir::ModuleOp module, const std::string& pipeline, const char* what,
                 std::string& error);

/// Kernel IR (in place) to gpu.func kernels: pallasToGpuPipeline, and the plan it made.
/// On failure returns false with the reason in `error`.
bool lowerToGpuFuncs(mlir::ModuleOp module, bool cpAsync, SharedPlan& plan, std::string& error);
/// gpu.func kernels (in place) to the NVVM dialect: gpuModuleToNVVMPipeline. One lowering
/// serves the cubins (compileForGpu) and the emulator's form (lowerForEmulator) alike.
bool lowerGpuFuncsToNVVM(mlir::ModuleOp module, std::string& error);

/// Assembles `bin.ptx` for `bin.arch` with ptxas -O3 -v into `bin.cubin`,
/// filling the resource report. ptxas' warnings and its coded advisories fail
/// (see ptxasAdvisories): on failure returns false with the reason in `error`.
bool assembleWithPtxas(const GpuOptions& options, GpuBinary& bin, std::string& error);

/// The lines of a successful ptxas -v log that report a defect in the PTX
/// rather than a resource count: warnings, and advisories with a code, e.g.
///   ptxas info    : (C7511) Potential Performance Loss: wgmma.mma_async
///   instructions are serialized due to insufficient register resources ...
/// (every wgmma of the kernel then waits for the previous one), or (C7519)
/// "warpgroup.arrive is injected ... to allow use of registers in GMMA".
std::vector<std::string> ptxasAdvisories(const std::string& log);

/// Compiles NVVM-dialect kernels (`module`, consumed: lowerGpuFuncsToNVVM's) to PTX and
/// cubins for every arch, each launched with `plan`'s dynamic shared memory. On failure
/// returns false with the reason in `error`.
bool compileForGpu(mlir::ModuleOp module, const GpuOptions& options, const SharedPlan& plan,
                   std::vector<GpuBinary>& binaries, std::string& error);

/// Lowers the kernel IR in `module` (consumed) to LLVM IR functions
/// `void pallas_host_<kernel>(void** args, int64_t g0, int64_t g1, int64_t g2)`.
std::unique_ptr<llvm::Module> lowerForHost(mlir::ModuleOp module, llvm::LLVMContext& context,
                                           std::string& error);

/// Lowers NVVM-dialect kernels (`module`, consumed: lowerGpuFuncsToNVVM's, the IR the
/// cubins are made from) to host code calling the emulator's SIMT runtime:
/// `void pallas_emu_kernel_<kernel>(void** args)` runs one GPU thread, and
/// `const int64_t pallas_emu_kernel_<kernel>_shared_bytes` is its static shared memory.
std::unique_ptr<llvm::Module> lowerForEmulator(mlir::ModuleOp module, llvm::LLVMContext& context,
                                               std::string& error);

/// The same for a module of gpu.func kernels written directly in the gpu
/// dialect (test kernels with barriers, shuffles and shared memory).
std::unique_ptr<llvm::Module> lowerGpuModuleForEmulator(mlir::ModuleOp module,
                                                        llvm::LLVMContext& context,
                                                        std::string& error);

/// Compiles LLVM IR to a relocatable object for the host (generic x86-64), optimized (O2):
/// the host forms.
bool emitHostObject(llvm::Module& module, std::string& object, std::string& error);
/// The same without optimization (no IR passes, -O0 code generation): the emulator forms.
bool emitEmulatorObject(llvm::Module& module, std::string& object, std::string& error);

}  // namespace pallas::codegen

#endif  // PALLAS_CODEGEN_PIPELINES_H

//===- GpuPipeline.cpp - kernel IR -> gpu/nvvm -> PTX -> ptxas -> cubin ---===//

#include "pallas/Codegen/Pipelines.h"

#include "pallas/Codegen/DiagnosticCollector.h"
#include "pallas/Transforms/Passes.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/TimeProfiler.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"

namespace pallas::codegen {

namespace {

/// Parses "sm_90a" into (90, arch-specific).
bool parseArch(const std::string& arch, int& sm, bool& specific) {
  llvm::Regex re("^sm_([0-9]+)(a?)$");
  llvm::SmallVector<llvm::StringRef> m;
  if (!re.match(arch, &m)) return false;
  sm = std::stoi(m[1].str());
  specific = !m[2].empty();
  return true;
}

int firstInt(const std::string& text, const char* pattern) {
  llvm::Regex re(pattern);
  llvm::SmallVector<llvm::StringRef> m;
  if (!re.match(text, &m)) return 0;
  return std::stoi(m[1].str());
}

}  // namespace

std::vector<std::string> ptxasAdvisories(const std::string& log) {
  // "ptxas warning : ...", "ptxas /tmp/x.ptx, line 9; warning : ...", and the
  // coded info lines; the plain info lines (registers, smem, compile time)
  // have no code.
  llvm::Regex coded("^ptxas info +: \\(C[0-9]+\\)");
  llvm::Regex warning("^ptxas.* warning *:");
  std::vector<std::string> found;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(log).split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : lines) {
    line = line.rtrim();
    if (warning.match(line) || coded.match(line)) found.push_back(line.str());
  }
  return found;
}

bool assembleWithPtxas(const GpuOptions& options, GpuBinary& bin, std::string& error) {
  llvm::TimeTraceScope scope("ptxas", bin.arch);
  llvm::SmallString<128> ptxPath, cubinPath, logPath;
  int fd;
  if (llvm::sys::fs::createTemporaryFile("pallas", "ptx", fd, ptxPath) ||
      llvm::sys::fs::createTemporaryFile("pallas", "cubin", cubinPath) ||
      llvm::sys::fs::createTemporaryFile("pallas", "log", logPath)) {
    error = "cannot create temporary files for ptxas";
    return false;
  }
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << bin.ptx;
  }
  std::string archFlag = "-arch=" + bin.arch;
  llvm::SmallVector<llvm::StringRef> args = {options.ptxas, archFlag, "-O3",    "-v",
                                             ptxPath,       "-o",     cubinPath};
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, logPath.str(), logPath.str()};
  std::string execError;
  int rc =
      llvm::sys::ExecuteAndWait(options.ptxas, args, std::nullopt, redirects, 0, 0, &execError);
  auto log = llvm::MemoryBuffer::getFile(logPath);
  std::string logText = log ? (*log)->getBuffer().str() : "";
  // A failure's lines cite the PTX: it is kept, and named.
  const std::string kept = "; the PTX is kept at " + ptxPath.str().str();
  if (rc != 0) {
    error = "ptxas " + archFlag + " failed (" + std::to_string(rc) + kept + "): " + execError +
            "\n" + logText;
  } else {
    auto cubin = llvm::MemoryBuffer::getFile(cubinPath);
    if (!cubin) {
      error = "ptxas produced no cubin";
      rc = 1;
    } else {
      bin.cubin = (*cubin)->getBuffer().str();
      bin.registers = firstInt(logText, "Used ([0-9]+) registers");
      bin.spill_stores = firstInt(logText, "([0-9]+) bytes spill stores");
      bin.spill_loads = firstInt(logText, "([0-9]+) bytes spill loads");
      bin.shared_bytes = firstInt(logText, "([0-9]+) bytes smem");
      // A wgmma pipeline ptxas serialized runs at a fraction of the tensor
      // cores' rate without any other sign: what ptxas says about the PTX
      // fails the build, so that no such kernel ships.
      if (std::vector<std::string> advisories = ptxasAdvisories(logText); !advisories.empty()) {
        error = "ptxas " + archFlag + " reported " + std::to_string(advisories.size()) +
                " warning(s) or advisories (they fail the build" + kept + "):\n" +
                llvm::join(advisories, "\n");
        rc = 1;
      }
    }
  }
  if (rc == 0) llvm::sys::fs::remove(ptxPath);
  llvm::sys::fs::remove(cubinPath);
  llvm::sys::fs::remove(logPath);
  return rc == 0;
}

std::string gpuModuleToNVVMPipeline() {
  return "gpu.module(canonicalize,cse,expand-strided-metadata,convert-scf-to-cf,"
         "convert-vector-to-llvm,convert-gpu-to-nvvm{index-bitwidth=64},canonicalize,cse,"
         "reconcile-unrealized-casts)";
}

std::string pallasToGpuPipeline(bool cpAsync) {
  // The sm_80 form (cpAsync) multiplies with mma.sync, on the spot.
  return std::string(cpAsync ? "pallas-expand-wgmma," : "") +
         "pallas-peel-last-step,pallas-sink-broadcasts,pallas-assign-layouts,"
         "convert-pallas-to-gpu{async-copies=" +
         (cpAsync ? "cp-async mma=mma_sync" : "tma mma=wgmma") + "}";
}

std::string gpuToNVVMPipeline(bool cpAsync) {
  return pallasToGpuPipeline(cpAsync) + "," + gpuModuleToNVVMPipeline();
}

bool runPipeline(mlir::ModuleOp module, const std::string& pipeline, const char* what,
                 std::string& error) {
  DiagnosticCollector diagnostics(module.getContext());
  mlir::PassManager pm(module.getContext());
  // The IR is verified once, after the last pass, not after each: per-pass verification took
  // 12 % of the gemm_bt op's codegen (39.7 s -> 34.6 s without it). To find the pass that
  // broke a module, run its pipeline in pallas-opt, which verifies after every pass.
  pm.enableVerifier(false);
  if (mlir::failed(mlir::parsePassPipeline(pipeline, pm)) || mlir::failed(pm.run(module)) ||
      mlir::failed(mlir::verify(module))) {
    error = std::string(what) + " failed:\n" + diagnostics.text();
    return false;
  }
  return true;
}

bool lowerToGpuFuncs(mlir::ModuleOp module, bool cpAsync, SharedPlan& plan, std::string& error) {
  llvm::TimeTraceScope scope("Lower to GPU");
  if (!runPipeline(module, pallasToGpuPipeline(cpAsync), "GPU lowering", error)) return false;
  // convert-pallas-to-gpu's plan (pallas.shared_bytes.<kernel>, pallas.shared_align.<kernel>):
  // the largest of the module's kernels.
  plan = SharedPlan{};
  for (mlir::NamedAttribute a : module->getAttrs()) {
    auto value = llvm::dyn_cast<mlir::IntegerAttr>(a.getValue());
    if (!value) continue;
    if (a.getName().strref().starts_with("pallas.shared_bytes."))
      plan.bytes = std::max(plan.bytes, static_cast<int>(value.getInt()));
    if (a.getName().strref().starts_with("pallas.shared_align."))
      plan.align = std::max<int64_t>(plan.align, value.getInt());
  }
  return true;
}

bool lowerGpuFuncsToNVVM(mlir::ModuleOp module, std::string& error) {
  llvm::TimeTraceScope scope("Lower to NVVM");
  return runPipeline(module, gpuModuleToNVVMPipeline(), "NVVM lowering", error);
}

bool compileForGpu(mlir::ModuleOp module, const GpuOptions& options, const SharedPlan& plan,
                   std::vector<GpuBinary>& binaries, std::string& error) {
  mlir::MLIRContext* ctx = module.getContext();
  DiagnosticCollector diagnostics(ctx);
  llvm::TimeTraceScope scope("GPU form", [&] { return llvm::join(options.archs, ","); });

  // 1. The NVVM-dialect kernels to LLVM: TMA descriptors are __grid_constant__ parameters;
  // NVVM ops without an LLVM intrinsic (mbarrier.try_wait.parity) become inline PTX (the
  // emulator instead rewrites them). Kernels compiled for sm_90 and up only open with
  // griddepcontrol (programmatic dependent launch); the driver lowers sm_90 and sm_8x
  // targets apart, so a module that also serves sm_80 (which lacks it) is only one given
  // such mixed targets explicitly.
  const bool waits = !options.cp_async && !options.archs.empty() &&
                     llvm::all_of(options.archs, [](const std::string& arch) {
                       int sm = 0;
                       bool specific = false;
                       return parseArch(arch, sm, specific) && sm >= 90;
                     });
  std::string pipeline = std::string("pallas-mark-tma-descriptor-params{grid-constant=true}") +
                         (waits ? ",pallas-wait-for-prerequisite-grids" : "") +
                         ",gpu.module(convert-nvvm-to-llvm,reconcile-unrealized-casts)";
  {
    llvm::TimeTraceScope scope("NVVM to LLVM");
    if (!runPipeline(module, pipeline, "GPU lowering", error)) return false;
  }
  module.walk([&](mlir::LLVM::GlobalOp g) {
    if (g.getAddrSpace() != 3 || !g.getSymName().starts_with("__dynamic_shmem")) return;
    // `.extern .shared .b8 name[]`, CUDA's dynamic shared memory: an internal
    // zero-size global would be a 1-byte static variable the buffer overlaps.
    g.setLinkage(mlir::LLVM::Linkage::External);
    g.setAlignment(std::max<uint64_t>(g.getAlignment().value_or(0), plan.align));
  });

  // The block size the kernel was lowered for (convert-pallas-to-gpu's
  // known_block_size, now the function's nvvm.maxntid): a warp-specialized
  // kernel launches its producer warpgroup only where copies are TMA's.
  int threads = 0;
  module.walk([&](mlir::LLVM::LLVMFuncOp f) {
    for (llvm::StringRef name : {"nvvm.reqntid", "nvvm.maxntid"})
      if (auto dims = f->getAttrOfType<mlir::DenseI32ArrayAttr>(name); dims && !threads) {
        threads = 1;
        for (int32_t d : dims.asArrayRef()) threads *= d;
      }
  });
  if (threads == 0) {
    error = "the lowered kernel has no block size (nvvm.maxntid)";
    return false;
  }

  // 2. One NVVM target per arch, then LLVM's NVPTX backend to PTX.
  llvm::SmallVector<mlir::Attribute> targets;
  for (const std::string& arch : options.archs)
    targets.push_back(mlir::NVVM::NVVMTargetAttr::get(ctx, /*optLevel=*/3, "nvptx64-nvidia-cuda",
                                                      arch, options.ptx_features));
  module.walk(
      [&](mlir::gpu::GPUModuleOp m) { m.setTargetsAttr(mlir::ArrayAttr::get(ctx, targets)); });
  mlir::PassManager serialize(ctx);
  {
    llvm::TimeTraceScope scope("NVPTX to PTX");
    if (mlir::failed(mlir::parsePassPipeline(
            "gpu-module-to-binary{format=isa toolkit=" + options.cuda_root + "}", serialize)) ||
        mlir::failed(serialize.run(module))) {
      error = "PTX generation failed:\n" + diagnostics.text();
      return false;
    }
  }
  mlir::gpu::BinaryOp binary;
  module.walk([&](mlir::gpu::BinaryOp b) { binary = b; });
  if (!binary) {
    error = "PTX generation produced no gpu.binary";
    return false;
  }
  // 3. ptxas per arch.
  for (mlir::Attribute a : binary.getObjects()) {
    auto object = llvm::cast<mlir::gpu::ObjectAttr>(a);
    auto target = llvm::cast<mlir::NVVM::NVVMTargetAttr>(object.getTarget());
    GpuBinary bin;
    bin.arch = target.getChip().str();
    if (!parseArch(bin.arch, bin.sm, bin.arch_specific)) {
      error = "unsupported GPU arch '" + bin.arch + "' (expected sm_XY or sm_XYa)";
      return false;
    }
    bin.ptx = object.getObject().getValue().str();
    if (!assembleWithPtxas(options, bin, error)) return false;
    // The runtime raises a kernel's dynamic shared memory to its plan, which
    // with static shared memory beside it could pass the device's limit: all
    // of it is the plan's (dynamic).
    if (bin.shared_bytes != 0) {
      error = "ptxas " + bin.arch + ": " + std::to_string(bin.shared_bytes) +
              " bytes of static shared memory; every shared byte must be in the kernel's "
              "shared-memory plan (dynamic)";
      return false;
    }
    bin.dynamic_shared_bytes = plan.bytes;
    bin.shared_bytes += plan.bytes;
    bin.threads = threads;
    bin.waits_for_prerequisite_grids = waits;
    binaries.push_back(std::move(bin));
  }
  return true;
}

}  // namespace pallas::codegen

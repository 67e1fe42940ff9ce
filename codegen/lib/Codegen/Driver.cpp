//===- Driver.cpp - the pallas-codegen command line -----------------------===//
//
//   pallas-codegen --list
//   pallas-codegen --op add --print-kernel-ir
//   pallas-codegen --op add --out-dir DIR [--ptxas P] [--cuda-root R] [--archs sm_90a,sm_80]
//                  [--time-trace FILE]
//
// The last form writes, for the op's every instance (dtype combination):
//   DIR/include/pallas/kernels/<op>.h   typed entry points, argv form, metadata
//   DIR/<op>.cc                          embedded cubins, checks, launch
//   DIR/<op>_host.o                      the host forms (CPU code) and the cubins
//   DIR/<op>_emulator.o                  the emulator forms (CPU code)
//   DIR/<op>.kernel.mlir                 the traced kernel IR, for reading
//   DIR/ptx/<instance>.<arch>.ptx        the PTX given to ptxas, for reading
// Files are rewritten only when their bytes change, so rebuilds are quiet and
// outputs are byte-identical across runs. `--time-trace FILE` writes where the
// time went (each instance's forms, LLVM's passes, ptxas) as a Chrome trace,
// for chrome://tracing or ui.perfetto.dev: build cost is measured, not guessed.
//
//===----------------------------------------------------------------------===//

#include "pallas/Codegen/Driver.h"

#include "pallas/Codegen/Emitter.h"
#include "pallas/Codegen/Pipelines.h"
#include "pallas/Dialect/PallasDialect.h"
#include "pallas/EDSL/Trace.h"
#include "pallas/Transforms/Passes.h"

#include "llvm/IR/Constants.h"
#include "llvm/IR/GlobalVariable.h"
#include "llvm/Linker/Linker.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/TimeProfiler.h"
#include "llvm/Support/raw_ostream.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Target/LLVM/NVVM/Target.h"
#include "mlir/Target/LLVMIR/Dialect/All.h"

#include <algorithm>
#include <cstring>
#include <iostream>

namespace pallas::codegen {

void registerPipelineDependencies(mlir::DialectRegistry& registry) {
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  mlir::registerAllToLLVMIRTranslations(registry);
  mlir::NVVM::registerNVVMTargetInterfaceExternalModels(registry);
  registry.insert<mlir::pallas::PallasDialect>();
  static bool passes = [] {
    mlir::registerAllPasses();
    mlir::pallas::registerPallasPasses();
    return true;
  }();
  (void)passes;
}

namespace {

int usage() {
  std::cerr << "usage: pallas-codegen --list\n"
               "       pallas-codegen --op NAME --print-kernel-ir\n"
               "       pallas-codegen --op NAME --out-dir DIR [--ptxas PATH] [--cuda-root DIR]\n"
               "                      [--archs sm_90a,sm_80] [--time-trace FILE]\n"
               "       pallas-codegen --emulate-gpu-module FILE.mlir -o OBJECT\n";
  return 2;
}

/// Writes `bytes` to `path` unless it already holds exactly them.
bool writeIfChanged(const std::string& path, const std::string& bytes) {
  if (auto existing = llvm::MemoryBuffer::getFile(path, /*IsText=*/false))
    if ((*existing)->getBuffer() == bytes) return true;
  llvm::sys::fs::create_directories(llvm::sys::path::parent_path(path));
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_None);
  if (ec) {
    std::cerr << "pallas-codegen: cannot write " << path << ": " << ec.message() << "\n";
    return false;
  }
  os << bytes;
  return true;
}

std::string printModule(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return text;
}

/// Compiles a module of hand-written gpu.func kernels to an emulator object:
/// `pallas_emu_kernel_<kernel>(void** args)` and `pallas_emu_kernel_<kernel>_shared_bytes`.
int emulateGpuModule(const std::string& file, const std::string& object) {
  if (object.empty()) return usage();
  mlir::DialectRegistry registry;
  registerPipelineDependencies(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceFile<mlir::ModuleOp>(file, &context);
  if (!module) return 1;
  llvm::LLVMContext llvmContext;
  std::string error, bytes;
  std::unique_ptr<llvm::Module> lowered = lowerGpuModuleForEmulator(*module, llvmContext, error);
  if (!lowered || !emitEmulatorObject(*lowered, bytes, error)) {
    std::cerr << "pallas-codegen: " << file << ": " << error << "\n";
    return 1;
  }
  return writeIfChanged(object, bytes) ? 0 : 1;
}

/// With --time-trace, profiles the codegen from construction and writes the
/// Chrome trace when it goes out of scope (on every return path, after the
/// phases' scopes have closed).
class TimeTraceSession {
 public:
  explicit TimeTraceSession(std::string file) : file_(std::move(file)) {
    if (!file_.empty())
      llvm::timeTraceProfilerInitialize(/*TimeTraceGranularity=*/100, "pallas-codegen");
  }
  ~TimeTraceSession() {
    if (file_.empty()) return;
    if (llvm::Error e = llvm::timeTraceProfilerWrite(file_, "pallas-codegen"))
      std::cerr << "pallas-codegen: cannot write " << file_ << ": " << llvm::toString(std::move(e))
                << "\n";
    llvm::timeTraceProfilerCleanup();
  }
  TimeTraceSession(const TimeTraceSession&) = delete;
  TimeTraceSession& operator=(const TimeTraceSession&) = delete;

 private:
  std::string file_;
};

}  // namespace

int codegenMain(int argc, char** argv) {
  std::string op, outDir, gpuModuleFile, objectFile, timeTraceFile;
  bool list = false, printIR = false;
  GpuOptions gpu;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--list")
      list = true;
    else if (a == "--print-kernel-ir")
      printIR = true;
    else if (a == "--op")
      op = next();
    else if (a == "--out-dir")
      outDir = next();
    else if (a == "--emulate-gpu-module")
      gpuModuleFile = next();
    else if (a == "-o")
      objectFile = next();
    else if (a == "--ptxas")
      gpu.ptxas = next();
    else if (a == "--cuda-root")
      gpu.cuda_root = next();
    else if (a == "--time-trace")
      timeTraceFile = next();
    else if (a == "--archs") {
      gpu.archs.clear();
      llvm::SmallVector<llvm::StringRef> parts;
      llvm::StringRef(next()).split(parts, ',', -1, false);
      for (auto p : parts) gpu.archs.push_back(p.str());
    } else {
      std::cerr << "pallas-codegen: unknown argument '" << a << "'\n";
      return usage();
    }
  }
  TimeTraceSession timeTrace(timeTraceFile);
  if (!gpuModuleFile.empty()) return emulateGpuModule(gpuModuleFile, objectFile);
  auto specs = edsl::registered_specs();
  if (list) {
    for (const auto& s : specs) std::cout << s.op << "\n";
    return 0;
  }
  if (op.empty() || (!printIR && outDir.empty())) return usage();
  const edsl::Registration* reg = nullptr;
  for (const auto& s : specs)
    if (op == s.op) reg = &s;
  if (!reg) {
    std::cerr << "pallas-codegen: no kernel spec named '" << op << "'; known:";
    for (const auto& s : specs) std::cerr << " " << s.op;
    std::cerr << "\n";
    return 1;
  }

  mlir::DialectRegistry registry;
  registerPipelineDependencies(registry);
  mlir::MLIRContext context(registry);
  context.loadAllAvailableDialects();

  std::vector<edsl::TracedKernel> kernels;
  try {
    llvm::TimeTraceScope scope("Trace spec", op);
    kernels = edsl::trace_spec(reg->op, reg->fn, context);
  } catch (const edsl::SpecError& e) {
    std::cerr << reg->file << ": error: " << e.what() << "\n";
    return 1;
  }
  std::string specFile = llvm::sys::path::filename(reg->file).str();
  specFile = "kernel_specs/" + specFile;

  std::string kernelIR;
  for (auto& k : kernels) kernelIR += printModule(*k.module) + "\n";
  if (printIR) {
    std::cout << kernelIR;
    return 0;
  }

  std::vector<CompiledInstance> compiled;
  llvm::LLVMContext llvmContext;
  // The op's CPU code, two objects: the host forms and the cubins (<op>_host.o, optimized),
  // and the emulator forms (<op>_emulator.o, not optimized: see emitEmulatorObject).
  std::unique_ptr<llvm::Module> host = std::make_unique<llvm::Module>(op + "_host", llvmContext);
  std::unique_ptr<llvm::Module> emulator =
      std::make_unique<llvm::Module>(op + "_emulator", llvmContext);
  host->setSourceFileName(specFile);
  emulator->setSourceFileName(specFile);
  auto linkInto = [](llvm::Module& into, std::unique_ptr<llvm::Module> form) {
    return !llvm::Linker::linkModules(into, std::move(form));
  };
  for (auto& k : kernels) {
    llvm::TimeTraceScope instanceScope("Instance", k.instance);
    std::string error;
    CompiledInstance inst{&k, {}, false};
    auto fail = [&](const char* form) {
      std::cerr << "pallas-codegen: " << k.instance << form << ": " << error << "\n";
      return 1;
    };
    // A staged kernel copies with TMA from sm_90 on, and with cp.async on
    // older targets (a lowering of its own: sm_80 has no TMA); a kernel with
    // a dot multiplies with wgmma from sm_90a on, otherwise without.
    bool hasDot = false;
    k.module->walk([&](mlir::pallas::DotOp) { hasDot = true; });
    const bool staged = k.spec->has_staged_blocks() || hasDot;
    auto before90 = [](const std::string& arch) {
      return arch.size() < 5 || std::atoi(arch.c_str() + 3) < 90;
    };
    GpuOptions targets = gpu, older = gpu;
    // A kernel without staged blocks is the same code on every target, but it is compiled once
    // per arch group all the same: the sm_90 form opens with griddepcontrol (programmatic
    // dependent launch, GpuPipeline.cpp), which sm_80 has not.
    const bool both_groups = std::any_of(gpu.archs.begin(), gpu.archs.end(), before90) &&
                             !std::all_of(gpu.archs.begin(), gpu.archs.end(), before90);
    // The sm_8x lowering of a staged kernel copies with cp.async; it is also the one that
    // knows sm_80 has no clusters (%cluster_* read as one program), which a kernel clustered
    // along its first axis needs whether it stages blocks or not.
    const bool clustered = k.spec->cluster_first_axis_max() > 0;
    const bool sm8x_lowering = staged || clustered;
    if (staged || both_groups || clustered) {
      std::erase_if(targets.archs, before90);
      std::erase_if(older.archs, [&](const std::string& a) { return !before90(a); });
      older.cp_async = sm8x_lowering;
    }

    // Kernel IR -> NVVM-dialect kernels, once per lowering (TMA and wgmma; cp.async and
    // mma.sync for sm_8x): each serves its cubins and its emulator form alike.
    struct NvvmForm {
      mlir::OwningOpRef<mlir::ModuleOp> module;
      SharedPlan plan;
    };
    auto lowerToGpu = [&](bool cpAsync, NvvmForm& form) {
      form.module = mlir::OwningOpRef<mlir::ModuleOp>(mlir::ModuleOp(*k.module).clone());
      return lowerToGpuFuncs(*form.module, cpAsync, form.plan, error);
    };
    auto compile = [&](const NvvmForm& form, const GpuOptions& options) {
      mlir::OwningOpRef<mlir::ModuleOp> copy(mlir::ModuleOp(*form.module).clone());
      return compileForGpu(*copy, options, form.plan, inst.gpu, error);
    };
    NvvmForm tma;
    if (!lowerToGpu(/*cpAsync=*/false, tma) || !lowerGpuFuncsToNVVM(*tma.module, error))
      return fail("");
    if (!targets.archs.empty() && !compile(tma, targets)) return fail("");
    // A cp.async form that needs more shared memory per block than any sm_8x part has
    // (sm_80 / sm_87: 163 KiB; sm_86 / sm_89: 99 KiB) could never launch (a generic sm_80
    // cubin runs on sm_8x only): it is not built, cubin nor emulator form, and such a device
    // runs the direct twin (tma_path_unavailable). E.g. matmul's 128 x 256 tiles in four
    // stages (196704 bytes) and its `decode` instance's eleven (224020 bytes), which the
    // entry point gives sm_8x parts no shapes for. The plan is known from the lowering to
    // gpu.func: such a form costs nothing more.
    constexpr int kLargestSm8xBlockShared = 163 * 1024;
    NvvmForm cpAsync;
    bool cp_async_built = false;
    if (sm8x_lowering && (staged || !older.archs.empty())) {
      if (!lowerToGpu(/*cpAsync=*/true, cpAsync)) return fail(" (cp.async)");
      cp_async_built = !staged || cpAsync.plan.bytes <= kLargestSm8xBlockShared;
      if (cp_async_built && !lowerGpuFuncsToNVVM(*cpAsync.module, error))
        return fail(" (cp.async)");
    }
    inst.sm80_form = staged && cp_async_built;
    if ((staged || both_groups || clustered) && !older.archs.empty()) {
      if (!sm8x_lowering && !compile(tma, older)) return fail(" (sm_8x)");
      if (cp_async_built && !compile(cpAsync, older)) return fail(" (cp.async)");
    }
    // The lowering's block size (read from each cubin) and the spec's, which
    // the emulator's sm_80 form launches with, must agree.
    for (const GpuBinary& bin : inst.gpu)
      if (bin.threads != k.spec->launch_threads(/*tma_copies=*/!staged || bin.sm >= 90)) {
        std::cerr << "pallas-codegen: " << k.instance << ": the " << bin.arch
                  << " cubin is built for " << bin.threads << " threads, the spec launches "
                  << k.spec->launch_threads(!staged || bin.sm >= 90) << "\n";
        return 1;
      }

    // The CPU forms: the host form (none for a staged instance: see
    // CompiledInstance::host_form) and the emulator's, from the cubins' NVVM.
    inst.host_form = !k.spec->has_staged_blocks();
    if (inst.host_form) {
      mlir::OwningOpRef<mlir::ModuleOp> hostModule(mlir::ModuleOp(*k.module).clone());
      llvm::TimeTraceScope scope("Host form");
      std::unique_ptr<llvm::Module> lowered = lowerForHost(*hostModule, llvmContext, error);
      if (!lowered) return fail("");
      if (!linkInto(*host, std::move(lowered))) {
        error = "cannot link it with the op's other host forms";
        return fail(": host form");
      }
    }
    auto addEmulatorForm = [&](NvvmForm& form, const char* name) {
      llvm::TimeTraceScope scope(name);
      std::unique_ptr<llvm::Module> emulated = lowerForEmulator(*form.module, llvmContext, error);
      if (!emulated) return false;
      if (!linkInto(*emulator, std::move(emulated))) {
        error = "cannot link it with the op's other emulator forms";
        return false;
      }
      return true;
    };
    if (!addEmulatorForm(tma, "Emulator form")) return fail(": emulator form");
    if (inst.sm80_form) {  // the sm_80 (cp.async) form too: pallas_emu_kernel_<instance>_cp_async
      cpAsync.module->walk([](mlir::LLVM::LLVMFuncOp f) {
        if (f->hasAttr(mlir::NVVM::NVVMDialect::getKernelFuncAttrName()))
          f.setSymName((f.getSymName() + "_cp_async").str());
      });
      if (!addEmulatorForm(cpAsync, "Emulator form (cp.async)"))
        return fail(": emulator cp.async form");
    }
    compiled.push_back(std::move(inst));
  }
  // The cubins, as constants of the host object (Emitter.h, cubinSymbol).
  for (const CompiledInstance& inst : compiled)
    for (const GpuBinary& bin : inst.gpu) {
      auto* bytes = llvm::ConstantDataArray::getString(llvmContext, bin.cubin, /*AddNull=*/false);
      auto* global = new llvm::GlobalVariable(*host, bytes->getType(), /*isConstant=*/true,
                                              llvm::GlobalValue::ExternalLinkage, bytes,
                                              cubinSymbol(inst.kernel->instance, bin.arch));
      global->setAlignment(llvm::Align(16));  // ELF images are read in place
    }
  std::string hostObject, emulatorObject, error;
  {
    llvm::TimeTraceScope scope("Host object", op);
    if (!emitHostObject(*host, hostObject, error)) {
      std::cerr << "pallas-codegen: " << op << ": " << error << "\n";
      return 1;
    }
  }
  {
    llvm::TimeTraceScope scope("Emulator object", op);
    if (!emitEmulatorObject(*emulator, emulatorObject, error)) {
      std::cerr << "pallas-codegen: " << op << ": " << error << "\n";
      return 1;
    }
  }

  bool ok = writeIfChanged(outDir + "/include/pallas/kernels/" + op + ".h",
                           emitHeader(op, specFile, compiled)) &&
            writeIfChanged(outDir + "/" + op + ".cc", emitSource(op, specFile, compiled)) &&
            writeIfChanged(outDir + "/" + op + "_host.o", hostObject) &&
            writeIfChanged(outDir + "/" + op + "_emulator.o", emulatorObject) &&
            writeIfChanged(outDir + "/" + op + ".kernel.mlir", kernelIR);
  // Beside the PTX, the staged instances (the SASS report's TMA / cp.async
  // rules apply to them; a shared direct twin does not name them all).
  std::string staged;
  for (const auto& inst : compiled) {
    for (const auto& bin : inst.gpu)
      ok = ok && writeIfChanged(outDir + "/ptx/" + inst.kernel->instance + "." + bin.arch + ".ptx",
                                bin.ptx);
    if (inst.kernel->spec->has_staged_blocks() && !inst.kernel->spec->direct())
      staged += inst.kernel->instance + "\n";
  }
  if (!staged.empty()) ok = ok && writeIfChanged(outDir + "/ptx/" + op + ".staged.txt", staged);
  return ok ? 0 : 1;
}

}  // namespace pallas::codegen

//===- HostPipeline.cpp - kernel IR -> CPU loops -> LLVM IR -> object -----===//

#include "pallas/Codegen/Pipelines.h"

#include "pallas/Codegen/DiagnosticCollector.h"
#include "pallas/Transforms/Passes.h"

#include "llvm/IR/IRBuilder.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Passes/StandardInstrumentations.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/TimeProfiler.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Target/LLVMIR/Export.h"

namespace pallas::codegen {

namespace {

/// Adds `void <wrapperPrefix><k>(void** args[, i64 g0, i64 g1, i64 g2])` around
/// each lowered function `<prefix><k>(params...[, g0, g1, g2])`: args[i]
/// points at parameter i, exactly the array the CUDA launch receives.
void addArgvWrappers(llvm::Module& module, llvm::StringRef prefix, llvm::StringRef wrapperPrefix,
                     unsigned gridParams) {
  std::vector<llvm::Function*> kernels;
  for (llvm::Function& f : module)
    if (!f.isDeclaration() && f.getName().starts_with(prefix)) kernels.push_back(&f);
  llvm::LLVMContext& ctx = module.getContext();
  auto* ptr = llvm::PointerType::getUnqual(ctx);
  auto* i64 = llvm::Type::getInt64Ty(ctx);
  for (llvm::Function* impl : kernels) {
    std::string name = (wrapperPrefix + impl->getName().drop_front(prefix.size())).str();
    impl->setName(impl->getName() + "_impl");
    impl->setLinkage(llvm::GlobalValue::InternalLinkage);
    std::vector<llvm::Type*> params = {ptr};
    params.insert(params.end(), gridParams, i64);
    auto* type = llvm::FunctionType::get(llvm::Type::getVoidTy(ctx), params, false);
    auto* wrapper = llvm::Function::Create(type, llvm::GlobalValue::ExternalLinkage, name, module);
    llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", wrapper));
    std::vector<llvm::Value*> args;
    unsigned numParams = impl->arg_size() - gridParams;
    for (unsigned i = 0; i < numParams; ++i) {
      llvm::Value* slot = b.CreateConstGEP1_64(ptr, wrapper->getArg(0), i);
      llvm::Value* param = b.CreateLoad(ptr, slot);
      // A byval parameter (a TMA descriptor) is passed by its address.
      args.push_back(impl->getArg(i)->hasByValAttr()
                         ? param
                         : b.CreateLoad(impl->getArg(i)->getType(), param));
    }
    for (unsigned g = 1; g <= gridParams; ++g) args.push_back(wrapper->getArg(g));
    // The call carries the parameters' attributes: the x86 backend places a
    // byval argument by the call site's alignment (64 for a descriptor) and
    // the callee reads it by its own, so without them the two disagree
    // whenever the stack arguments before it are not a multiple of 64 bytes.
    llvm::CallInst* call = b.CreateCall(impl, args);
    call->setAttributes(impl->getAttributes());
    call->setCallingConv(impl->getCallingConv());
    b.CreateRetVoid();
  }
}

/// x86 backends without native bf16 keep bf16 values in float registers and
/// round them back with a call to `__truncsfbf2`, which libgcc provides only
/// from GCC 13 on. Each host object therefore carries its own (weak, hidden)
/// definition: round to nearest even, NaNs stay quiet NaNs of the same sign.
void addBFloat16TruncationHelper(llvm::Module& module) {
  llvm::LLVMContext& ctx = module.getContext();
  if (module.getFunction("__truncsfbf2")) return;
  auto* i32 = llvm::Type::getInt32Ty(ctx);
  auto* type =
      llvm::FunctionType::get(llvm::Type::getBFloatTy(ctx), {llvm::Type::getFloatTy(ctx)}, false);
  auto* f = llvm::Function::Create(type, llvm::GlobalValue::WeakAnyLinkage, "__truncsfbf2", module);
  f->setVisibility(llvm::GlobalValue::HiddenVisibility);
  llvm::IRBuilder<> b(llvm::BasicBlock::Create(ctx, "entry", f));
  llvm::Value* x = f->getArg(0);
  llvm::Value* bits = b.CreateBitCast(x, i32);
  llvm::Value* lsb = b.CreateAnd(b.CreateLShr(bits, 16), 1);
  llvm::Value* rounded = b.CreateLShr(b.CreateAdd(bits, b.CreateAdd(lsb, b.getInt32(0x7fff))), 16);
  llvm::Value* quietNaN = b.CreateOr(b.CreateLShr(bits, 16), b.getInt32(0x40));
  llvm::Value* result = b.CreateSelect(b.CreateFCmpUNO(x, x), quietNaN, rounded);
  b.CreateRet(b.CreateBitCast(b.CreateTrunc(result, b.getInt16Ty()), llvm::Type::getBFloatTy(ctx)));
}

/// The target machine for generic x86-64 (the library runs on any machine of the
/// architecture), one per code generation level: Default for the host forms, None for the
/// emulator forms (see emitEmulatorObject).
llvm::TargetMachine* hostTargetMachine(llvm::CodeGenOptLevel level, std::string& error) {
  static std::unique_ptr<llvm::TargetMachine> machines[4];  // by CodeGenOptLevel (0..3)
  std::unique_ptr<llvm::TargetMachine>& machine = machines[static_cast<int>(level)];
  if (machine) return machine.get();
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  llvm::Triple triple(llvm::sys::getDefaultTargetTriple());
  const llvm::Target* target = llvm::TargetRegistry::lookupTarget(triple, error);
  if (!target) return nullptr;
  llvm::TargetOptions options;
  machine.reset(target->createTargetMachine(triple, "generic", "", options, llvm::Reloc::PIC_,
                                            std::nullopt, level));
  return machine.get();
}

/// Runs `pipeline` then the common CPU tail, translates to LLVM IR and wraps
/// every function named `<prefix>...` in its argv form.
std::unique_ptr<llvm::Module> lowerToCpu(mlir::ModuleOp module, const std::string& pipeline,
                                         bool emulator, llvm::LLVMContext& context,
                                         std::string& error) {
  mlir::MLIRContext* ctx = module.getContext();
  DiagnosticCollector diagnostics(ctx);
  // bf16 casts become integer code (no libgcc helper exists for them); math
  // ops become LLVM intrinsics where LLVM has them, libm calls otherwise.
  std::string cpuTail = emulator ? "convert-nvvm-to-emulator"
                                 : "canonicalize,cse,func.func(arith-expand{include-bf16=true}),"
                                   "convert-math-to-llvm,convert-math-to-libm,convert-scf-to-cf,"
                                   "expand-strided-metadata,convert-vector-to-llvm,convert-to-llvm,"
                                   "reconcile-unrealized-casts";
  if (!runPipeline(module, pipeline + "," + cpuTail, "CPU lowering", error)) return nullptr;
  std::unique_ptr<llvm::Module> llvmModule = mlir::translateModuleToLLVMIR(module, context);
  if (!llvmModule) {
    error = "translation to LLVM IR failed:\n" + diagnostics.text();
    return nullptr;
  }
  if (emulator) {
    addArgvWrappers(*llvmModule, "pallas_emu_thread_", "pallas_emu_kernel_", /*gridParams=*/0);
  } else {
    addArgvWrappers(*llvmModule, "pallas_host_", "pallas_host_", /*gridParams=*/3);
  }
  addBFloat16TruncationHelper(*llvmModule);
  return llvmModule;
}

}  // namespace

std::unique_ptr<llvm::Module> lowerForHost(mlir::ModuleOp module, llvm::LLVMContext& context,
                                           std::string& error) {
  return lowerToCpu(module, "pallas-expand-wgmma,pallas-sink-broadcasts,convert-pallas-to-loops",
                    /*emulator=*/false, context, error);
}

// The emulator passes TMA descriptors as plain byval pointers (no __grid_constant__).
constexpr const char* kEmulatorDescriptorParams =
    "pallas-mark-tma-descriptor-params{grid-constant=false}";

std::unique_ptr<llvm::Module> lowerForEmulator(mlir::ModuleOp module, llvm::LLVMContext& context,
                                               std::string& error) {
  return lowerToCpu(module, kEmulatorDescriptorParams, /*emulator=*/true, context, error);
}

std::unique_ptr<llvm::Module> lowerGpuModuleForEmulator(mlir::ModuleOp module,
                                                        llvm::LLVMContext& context,
                                                        std::string& error) {
  return lowerToCpu(module, gpuModuleToNVVMPipeline() + "," + kEmulatorDescriptorParams,
                    /*emulator=*/true, context, error);
}

namespace {

/// `module` to a relocatable object by `machine`'s code generator.
bool emitObject(llvm::Module& module, llvm::TargetMachine& machine, std::string& object,
                std::string& error) {
  llvm::SmallString<0> buffer;
  llvm::raw_svector_ostream os(buffer);
  llvm::legacy::PassManager codegen;
  if (machine.addPassesToEmitFile(codegen, os, nullptr, llvm::CodeGenFileType::ObjectFile)) {
    error = "the host target cannot emit object files";
    return false;
  }
  codegen.run(module);
  object.assign(buffer.begin(), buffer.end());
  return true;
}

}  // namespace

bool emitHostObject(llvm::Module& module, std::string& object, std::string& error) {
  llvm::TargetMachine* machine = hostTargetMachine(llvm::CodeGenOptLevel::Default, error);
  if (!machine) return false;
  module.setDataLayout(machine->createDataLayout());
  module.setTargetTriple(machine->getTargetTriple());

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cam;
  llvm::ModuleAnalysisManager mam;
  // No loop unrolling: LoopUnrollPass took 19 of the 25 s that O2 spent on the gemm op's
  // host object (then with its emulator forms) and made its code generation 60% longer,
  // while ops.host ran no slower without it (59.4 s either way). Vectorization stays.
  llvm::PipelineTuningOptions tuning;
  tuning.LoopUnrolling = false;
  // The standard instrumentation adds per-pass entries to pallas-codegen's --time-trace.
  llvm::PassInstrumentationCallbacks instrumentation;
  llvm::StandardInstrumentations standard(module.getContext(), /*DebugLogging=*/false);
  standard.registerCallbacks(instrumentation, &mam);
  llvm::PassBuilder pb(machine, tuning, std::nullopt, &instrumentation);
  pb.registerModuleAnalyses(mam);
  pb.registerCGSCCAnalyses(cam);
  pb.registerFunctionAnalyses(fam);
  pb.registerLoopAnalyses(lam);
  pb.crossRegisterProxies(lam, fam, cam, mam);
  {
    llvm::TimeTraceScope scope("Optimize host object (O2)");
    pb.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2).run(module, mam);
  }
  llvm::TimeTraceScope scope("Machine code for host object");
  return emitObject(module, *machine, object, error);
}

bool emitEmulatorObject(llvm::Module& module, std::string& object, std::string& error) {
  // No IR passes and the code generator at -O0 (fast instruction selection, the fast register
  // allocator): the emulator forms' time goes to the SIMT runtime they call for every access,
  // barrier and collective, not to their own instructions. (Measured on the gemm op when its
  // emulator forms were optnone functions in the O2 host object: 23.5 s at O2, 12.5 s with
  // optnone, while ops.emulator ran 73 s against 76 s.) At the default code generation level
  // the gemm_bt op's emulator forms (28 instances, 48 forms) took 9.5 s of machine code, at
  // -O0 3.8 s, while ops.emulator ran 210 s against 216 s and
  // features.emulator 72 s against 74 s. The frames double (the fast register allocator
  // spills every value): splitk_deep's 35 KiB -> 74 KiB, hence the emulator's 256 KiB stacks.
  llvm::TargetMachine* machine = hostTargetMachine(llvm::CodeGenOptLevel::None, error);
  if (!machine) return false;
  module.setDataLayout(machine->createDataLayout());
  module.setTargetTriple(machine->getTargetTriple());
  llvm::TimeTraceScope scope("Machine code for emulator object");
  return emitObject(module, *machine, object, error);
}

}  // namespace pallas::codegen

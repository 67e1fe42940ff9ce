//===- GpuToThreadLoops.cpp - GPU kernels as sequential CPU thread loops --===//
//
// The emulator backend's lowering: the code each GPU thread runs (after
// convert-pallas-to-gpu, so the thread layout, index formulas, masks and
// vector accesses are exactly those of the cubin) executed on the CPU for
// every program and thread in turn. See ConvertGPUToThreadLoops in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "pallas/Transforms/Passes.h"

#include "mlir/IR/IRMapping.h"

namespace mlir::pallas {
#define GEN_PASS_DEF_CONVERTGPUTOTHREADLOOPS
#include "pallas/Transforms/Passes.h.inc"

namespace {

int dimIndex(gpu::Dimension d) {
  return d == gpu::Dimension::x ? 0 : d == gpu::Dimension::y ? 1 : 2;
}

LogicalResult lowerKernel(gpu::GPUFuncOp kernel, ModuleOp module) {
  if (!kernel.getBody().hasOneBlock())
    return kernel.emitOpError("emulator lowering needs a single-block kernel");
  if (!kernel.getWorkgroupAttributions().empty() || !kernel.getPrivateAttributions().empty())
    return kernel.emitOpError("uses workgroup memory; the sequential emulator cannot run it");
  std::optional<DenseI32ArrayAttr> known = kernel.getKnownBlockSizeAttr();
  if (!known || (*known)[1] != 1 || (*known)[2] != 1)
    return kernel.emitOpError("emulator lowering needs a known 1-D block size");
  WalkResult communicates = kernel.walk([](Operation* op) {
    if (isa<gpu::BarrierOp, gpu::ShuffleOp>(op)) return WalkResult::interrupt();
    return WalkResult::advance();
  });
  if (communicates.wasInterrupted())
    return kernel.emitOpError("has cross-thread operations; the sequential emulator cannot run it");

  Location loc = kernel.getLoc();
  OpBuilder b = OpBuilder::atBlockEnd(module.getBody());
  SmallVector<Type> args(kernel.getArgumentTypes());
  for (int i = 0; i < 3; ++i) args.push_back(b.getIndexType());
  auto func = func::FuncOp::create(b, loc, ("pallas_emu_" + kernel.getName()).str(),
                                   b.getFunctionType(args, {}));
  Block* entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value grid[3], block[3];
  for (int i = 0; i < 3; ++i) grid[i] = entry->getArgument(kernel.getNumArguments() + i);
  Value zero = arith::ConstantIndexOp::create(b, loc, 0);
  Value one = arith::ConstantIndexOp::create(b, loc, 1);
  for (int axis = 2; axis >= 0; --axis) {  // programs, z outermost
    auto loop = scf::ForOp::create(b, loc, zero, grid[axis], one);
    block[axis] = loop.getInductionVar();
    b.setInsertionPoint(loop.getBody()->getTerminator());
  }
  Value threads = arith::ConstantIndexOp::create(b, loc, (*known)[0]);
  auto threadLoop = scf::ForOp::create(b, loc, zero, threads, one);
  Value tid = threadLoop.getInductionVar();
  b.setInsertionPoint(threadLoop.getBody()->getTerminator());

  IRMapping map;
  for (auto [from, to] : llvm::zip(kernel.getArguments(), entry->getArguments())) map.map(from, to);
  for (Operation& op : kernel.getBody().front()) {
    if (isa<gpu::ReturnOp>(op)) continue;
    Value replacement;
    if (auto t = dyn_cast<gpu::ThreadIdOp>(op))
      replacement = dimIndex(t.getDimension()) == 0 ? tid : zero;
    else if (auto bid = dyn_cast<gpu::BlockIdOp>(op))
      replacement = block[dimIndex(bid.getDimension())];
    else if (auto gd = dyn_cast<gpu::GridDimOp>(op))
      replacement = grid[dimIndex(gd.getDimension())];
    else if (auto bd = dyn_cast<gpu::BlockDimOp>(op))
      replacement = dimIndex(bd.getDimension()) == 0 ? threads : one;
    if (replacement) {
      map.map(op.getResult(0), replacement);
      continue;
    }
    if (op.getDialect() && isa<gpu::GPUDialect>(op.getDialect()))
      return op.emitOpError("no emulator rule for this GPU op");
    b.clone(op, map);
  }
  b.setInsertionPointToEnd(entry);
  func::ReturnOp::create(b, loc);
  return success();
}

struct ConvertGPUToThreadLoopsPass
    : impl::ConvertGPUToThreadLoopsBase<ConvertGPUToThreadLoopsPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<gpu::GPUModuleOp> gpuModules(module.getOps<gpu::GPUModuleOp>());
    for (gpu::GPUModuleOp gm : gpuModules) {
      for (auto kernel : gm.getOps<gpu::GPUFuncOp>())
        if (kernel.isKernel() && failed(lowerKernel(kernel, module))) return signalPassFailure();
      gm.erase();
    }
    module->removeAttr(gpu::GPUDialect::getContainerModuleAttrName());
  }
};

}  // namespace
}  // namespace mlir::pallas

//===- WaitForPrerequisiteGrids.cpp - griddepcontrol at every kernel's entry -===//
//
// See PallasWaitForPrerequisiteGrids in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "pallas/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::pallas {
#define GEN_PASS_DEF_PALLASWAITFORPREREQUISITEGRIDS
#include "pallas/Transforms/Passes.h.inc"

namespace {

struct WaitForPrerequisiteGridsPass
    : impl::PallasWaitForPrerequisiteGridsBase<WaitForPrerequisiteGridsPass> {
  void runOnOperation() override {
    getOperation().walk([&](LLVM::LLVMFuncOp f) {
      if (!f->hasAttr(NVVM::NVVMDialect::getKernelFuncAttrName()) || f.isExternal()) return;
      OpBuilder b = OpBuilder::atBlockBegin(&f.getBody().front());
      NVVM::GriddepcontrolOp::create(b, f.getLoc(), NVVM::GridDepActionKind::wait);
      NVVM::GriddepcontrolOp::create(b, f.getLoc(), NVVM::GridDepActionKind::launch_dependents);
    });
  }
};

}  // namespace
}  // namespace mlir::pallas

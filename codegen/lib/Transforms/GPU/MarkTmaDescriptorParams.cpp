//===- MarkTmaDescriptorParams.cpp - TMA descriptors as byval kernel params -===//
//
// See PallasMarkTmaDescriptorParams in Passes.td.
//
//===----------------------------------------------------------------------===//

#include "pallas/Dialect/PallasDialect.h"
#include "pallas/Transforms/Passes.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"

namespace mlir::pallas {
#define GEN_PASS_DEF_PALLASMARKTMADESCRIPTORPARAMS
#include "pallas/Transforms/Passes.h.inc"

namespace {

/// CUtensorMap: 128 bytes, 64-byte aligned.
constexpr int64_t kDescriptorBytes = 128, kDescriptorAlign = 64;

struct MarkTmaDescriptorParamsPass
    : impl::PallasMarkTmaDescriptorParamsBase<MarkTmaDescriptorParamsPass> {
  using Base::Base;
  void runOnOperation() override {
    getOperation().walk([&](LLVM::LLVMFuncOp f) {
      auto count = f->getAttrOfType<IntegerAttr>(kTmaParamsAttrName);
      if (!count) return;
      OpBuilder b(f.getContext());
      auto byval = LLVM::LLVMArrayType::get(b.getI8Type(), kDescriptorBytes);
      const unsigned n = f.getNumArguments();
      for (unsigned i = n - static_cast<unsigned>(count.getInt()); i < n; ++i) {
        f.setArgAttr(i, LLVM::LLVMDialect::getByValAttrName(), TypeAttr::get(byval));
        f.setArgAttr(i, LLVM::LLVMDialect::getAlignAttrName(),
                     b.getI64IntegerAttr(kDescriptorAlign));
        if (gridConstant)
          f.setArgAttr(i, NVVM::NVVMDialect::getGridConstantAttrName(), b.getUnitAttr());
      }
    });
  }
};

}  // namespace
}  // namespace mlir::pallas

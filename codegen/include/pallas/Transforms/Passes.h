//===- Passes.h - pallas lowering passes --------------------------*- C++ -*-===//
#ifndef PALLAS_TRANSFORMS_PASSES_H
#define PALLAS_TRANSFORMS_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/Pass/Pass.h"

namespace mlir::pallas {

#define GEN_PASS_DECL
#include "pallas/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "pallas/Transforms/Passes.h.inc"

}  // namespace mlir::pallas

#endif  // PALLAS_TRANSFORMS_PASSES_H

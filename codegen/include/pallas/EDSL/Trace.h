//===- Trace.h - tracing kernel specs into kernel IR --------------*- C++ -*-===//
#ifndef PALLAS_EDSL_TRACE_H
#define PALLAS_EDSL_TRACE_H

#include "pallas/EDSL/Spec.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

namespace pallas::edsl {

/// One traced kernel instance: its declarations and its kernel IR (a module
/// holding one `func.func` marked `pallas.kernel`, named after the instance).
struct TracedKernel {
  std::string instance;
  std::shared_ptr<KernelSpec> spec;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

/// Traces every instance of `spec_fn` (one per dtype combination), validating
/// declarations and body. Throws SpecError naming the spec, operand and dim.
std::vector<TracedKernel> trace_spec(const char* op, SpecFn spec_fn, mlir::MLIRContext& context);

/// The MLIR element type of an operand dtype.
mlir::Type to_mlir_type(DType dtype, mlir::MLIRContext& context);

}  // namespace pallas::edsl

#endif  // PALLAS_EDSL_TRACE_H

//===- DiagnosticCollector.h - MLIR diagnostics as error text -----*- C++ -*-===//
#ifndef PALLAS_CODEGEN_DIAGNOSTICCOLLECTOR_H
#define PALLAS_CODEGEN_DIAGNOSTICCOLLECTOR_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <string>

namespace pallas::codegen {

/// While alive, collects every diagnostic MLIR emits in `context` as
/// "location: message" lines, for the codegen tool's error messages.
class DiagnosticCollector {
 public:
  explicit DiagnosticCollector(mlir::MLIRContext* context)
      : handler_(context, [this](mlir::Diagnostic& d) {
          llvm::raw_string_ostream(text_) << d.getLocation() << ": " << d << "\n";
          return mlir::success();
        }) {}
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  mlir::ScopedDiagnosticHandler handler_;
};

}  // namespace pallas::codegen

#endif  // PALLAS_CODEGEN_DIAGNOSTICCOLLECTOR_H

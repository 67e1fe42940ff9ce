//===- DiagnosticCollector.h - MLIR diagnostics as error text -----*- C++ -*-===//
#ifndef PALLAS_CODEGEN_DIAGNOSTICCOLLECTOR_H
#define PALLAS_CODEGEN_DIAGNOSTICCOLLECTOR_H

#include "llvm/Support/raw_ostream.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/MLIRContext.h"

#include <string>

namespace pallas::codegen {

/// While alive, collects every diagnostic MLIR emits in `context` as
/// "location: message" lines, for the codegen tool's error messages. Traced
/// ops carry the spec line that made them: "kernel_specs/softmax.cc:42:7: ...".
class DiagnosticCollector {
 public:
  explicit DiagnosticCollector(mlir::MLIRContext* context)
      : handler_(context, [this](mlir::Diagnostic& d) {
          llvm::raw_string_ostream os(text_);
          if (auto at = mlir::dyn_cast<mlir::FileLineColLoc>(d.getLocation()))
            os << at.getFilename().getValue() << ":" << at.getLine() << ":" << at.getColumn();
          else
            os << d.getLocation();
          os << ": " << d << "\n";
          return mlir::success();
        }) {}
  const std::string& text() const { return text_; }

 private:
  std::string text_;
  mlir::ScopedDiagnosticHandler handler_;
};

}  // namespace pallas::codegen

#endif  // PALLAS_CODEGEN_DIAGNOSTICCOLLECTOR_H

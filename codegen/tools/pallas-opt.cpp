//===- pallas-opt.cpp - mlir-opt with the pallas dialect and passes -------===//
#include "pallas/Codegen/Pipelines.h"

#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char** argv) {
  mlir::DialectRegistry registry;
  pallas::codegen::registerPipelineDependencies(registry);
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "pallas optimizer driver\n", registry));
}

//===- Driver.h - the pallas-codegen command line -------------------*- C++ -*-===//
#ifndef PALLAS_CODEGEN_DRIVER_H
#define PALLAS_CODEGEN_DRIVER_H

namespace pallas::codegen {
/// pallas-codegen's main: see `pallas-codegen --help`.
int codegenMain(int argc, char** argv);
}  // namespace pallas::codegen

#endif  // PALLAS_CODEGEN_DRIVER_H

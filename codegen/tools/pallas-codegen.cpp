//===- pallas-codegen.cpp - kernel specs to cubins, host code and C++ -----===//
#include "pallas/Codegen/Driver.h"

int main(int argc, char** argv) { return pallas::codegen::codegenMain(argc, argv); }

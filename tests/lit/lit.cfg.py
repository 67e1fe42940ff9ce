# lit configuration for pallas-opt / pallas-codegen FileCheck tests.
import os
import lit.formats

config.name = "pallas"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.pallas_binary_dir, "tests", "lit")
# pallas-codegen-test (tests/kernels: the codegen with the test-only kernels) beside the tools.
config.environment["PATH"] = os.pathsep.join(
    [config.pallas_tools_dir, os.path.join(config.pallas_binary_dir, "tests", "kernels"),
     config.llvm_tools_dir, config.environment.get("PATH", "")])
config.substitutions.append(("%ptxas", config.ptxas))
config.substitutions.append(("%cuda_root", config.cuda_root))

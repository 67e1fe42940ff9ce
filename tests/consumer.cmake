# Installs the library into a scratch prefix and builds two projects outside
# the tree against it, as a user's would be: examples/ (find_package(
# PallasKernels), the prebuilt ops; runs the quickstart) and
# examples/custom_kernel/ (COMPONENTS Codegen: declares its own kernel, whose
# codegen it builds and runs; runs it on host and emulator against a reference).
# Any failing step, or a program that finds a wrong result, fails the test.
# Usage: cmake -DBUILD_DIR=... -DSOURCE_DIR=... -DWORK=... -P consumer.cmake
file(REMOVE_RECURSE ${WORK})
macro(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
endmacro()
run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/install)

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples -B ${WORK}/build
    -DCMAKE_PREFIX_PATH=${WORK}/install -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK}/build)
run(${WORK}/build/quickstart)
set(quickstart "${out}")

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/examples/custom_kernel -B ${WORK}/custom
    -DCMAKE_PREFIX_PATH=${WORK}/install -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK}/custom)
run(${WORK}/custom/custom_kernel)
message(STATUS "quickstart:\n${quickstart}\ncustom_kernel:\n${out}")

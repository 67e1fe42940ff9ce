# Installs the library into a scratch prefix, builds examples/ as an external
# project with find_package(PallasKernels), and runs its quickstart.
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
message(STATUS "${out}")

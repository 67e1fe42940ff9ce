# Runs pallas-codegen twice on the same op into two directories and requires
# byte-identical outputs. Usage: cmake -DCODEGEN=... -DOP=... -DWORK=... -P determinism.cmake
file(REMOVE_RECURSE ${WORK})
foreach(run a b)
  execute_process(COMMAND ${CODEGEN} --op ${OP} --out-dir ${WORK}/${run} ${EXTRA_ARGS}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pallas-codegen --op ${OP} failed (${rc})")
  endif()
endforeach()
file(GLOB_RECURSE files RELATIVE ${WORK}/a ${WORK}/a/*)
list(LENGTH files count)
if(count LESS 5)
  message(FATAL_ERROR "expected at least 5 outputs, got ${count}: ${files}")
endif()
foreach(f IN LISTS files)
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/a/${f} ${WORK}/b/${f}
                  RESULT_VARIABLE differ)
  if(differ)
    message(FATAL_ERROR "codegen output ${f} differs between two runs")
  endif()
endforeach()
message(STATUS "${count} outputs byte-identical across two runs")

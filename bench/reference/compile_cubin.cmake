# cmake -DNVCC=... -DARCH=sm_90a -DSRC=reference_kernels.cu -DOUT=<path stem> -P compile_cubin.cmake
#
# Compiles the reference kernels to OUT.cubin for one arch and keeps ptxas' -v
# report (registers, spills, shared memory per kernel) in OUT.ptxas.txt; both
# are read by bench/sass_report.py.
execute_process(
  COMMAND ${NVCC} -std=c++17 -O3 -arch=${ARCH} -cubin -Xptxas -v ${SRC} -o ${OUT}.cubin
  OUTPUT_VARIABLE out ERROR_VARIABLE out RESULT_VARIABLE rc)
file(WRITE ${OUT}.ptxas.txt "${out}")
if(NOT rc EQUAL 0)
  file(REMOVE ${OUT}.cubin)
  message(FATAL_ERROR "nvcc failed for ${ARCH}:\n${out}")
endif()

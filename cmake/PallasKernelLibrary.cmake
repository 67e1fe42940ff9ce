# pallas_add_kernel_library(<target> CODEGEN <pallas-codegen target> OPS <op>...)
#
# Runs the codegen tool once per op (Halide's one-command-per-generator
# pattern) into ${CMAKE_CURRENT_BINARY_DIR} and builds a static library of the
# generated entry points and host objects. Headers land in
# ${CMAKE_CURRENT_BINARY_DIR}/include/pallas/kernels/<op>.h; the codegen's
# inspection outputs (<op>.kernel.mlir, ptx/*.ptx) sit beside them.
function(pallas_add_kernel_library target)
  cmake_parse_arguments(ARG "" "CODEGEN" "OPS" ${ARGN})
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR})
  string(REPLACE ";" "," archs "${PALLAS_CUDA_ARCHS}")
  # The toolkit root holds nvvm/libdevice, linked into kernels using math functions.
  get_filename_component(cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
  set(sources)
  foreach(op IN LISTS ARG_OPS)
    set(outputs ${gen_dir}/include/pallas/kernels/${op}.h ${gen_dir}/${op}.cc
                ${gen_dir}/${op}_host.o ${gen_dir}/${op}.kernel.mlir)
    # Outputs are rewritten only when their bytes change; the stamp records the run.
    add_custom_command(
      OUTPUT ${gen_dir}/${op}.stamp
      BYPRODUCTS ${outputs}
      COMMAND ${ARG_CODEGEN} --op ${op} --out-dir ${gen_dir}
              --ptxas ${CUDAToolkit_BIN_DIR}/ptxas --cuda-root ${cuda_root} --archs ${archs}
      COMMAND ${CMAKE_COMMAND} -E touch ${gen_dir}/${op}.stamp
      DEPENDS ${ARG_CODEGEN}
      COMMENT "${ARG_CODEGEN} --op ${op}"
      VERBATIM)
    set_source_files_properties(${gen_dir}/${op}_host.o PROPERTIES EXTERNAL_OBJECT TRUE
                                                                   GENERATED TRUE)
    list(APPEND sources ${gen_dir}/${op}.stamp ${gen_dir}/${op}.cc ${gen_dir}/${op}_host.o)
  endforeach()
  add_library(${target} STATIC ${sources})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${gen_dir}/include>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # The host forms call libm (tanhf, erff, ...); the CUDA path needs cudart.
  target_link_libraries(${target} PUBLIC CUDA::cudart_static m)
endfunction()

# pallas_add_kernel_library(<target> SPECS <file>... [OPS <op>...] [TARGETS <arch>...])
#
# A user's kernels (Halide's generator pattern): compiles the spec files into
# a codegen of their own (<target>_codegen: pallas-codegen's driver, the spec
# EDSL, and the specs' PALLAS_KERNEL registrations), runs it once per op, and
# builds a static library of the generated entry points, linked to the runtime
# of the prebuilt ops (PallasKernels::pallaskernels: one runtime per process).
# OPS defaults to every PALLAS_KERNEL(name) the spec files declare; TARGETS to
# PALLAS_CUDA_ARCHS (sm_90a and sm_80).
#
# pallas_add_kernel_library(<target> CODEGEN <codegen target> OPS <op>...)
#
# This project's own form: a codegen target built in the tree (the prebuilt
# ops, the test kernels).
#
# Either way the codegen runs into ${CMAKE_CURRENT_BINARY_DIR}: headers land in
# include/pallas/kernels/<op>.h; the inspection outputs (<op>.kernel.mlir,
# ptx/*.ptx) sit beside them.
function(pallas_add_kernel_library target)
  cmake_parse_arguments(ARG "" "CODEGEN" "SPECS;OPS;TARGETS" ${ARGN})
  if(ARG_SPECS AND ARG_CODEGEN)
    message(FATAL_ERROR "pallas_add_kernel_library(${target}): give SPECS or CODEGEN, not both")
  endif()
  if(NOT ARG_SPECS AND NOT ARG_CODEGEN)
    message(FATAL_ERROR "pallas_add_kernel_library(${target}): no SPECS (the kernel spec files)")
  endif()
  if(ARG_SPECS)
    if(NOT TARGET PallasKernels::PallasCodegen)
      message(FATAL_ERROR "pallas_add_kernel_library(${target}): SPECS need the Codegen "
                          "component: find_package(PallasKernels REQUIRED COMPONENTS Codegen)")
    endif()
    set(specs)
    foreach(spec IN LISTS ARG_SPECS)
      get_filename_component(spec "${spec}" ABSOLUTE)
      list(APPEND specs "${spec}")
    endforeach()
    if(NOT ARG_OPS)  # every PALLAS_KERNEL(name) of the spec files
      foreach(spec IN LISTS specs)
        file(STRINGS "${spec}" lines REGEX "^[ \t]*PALLAS_KERNEL\\([A-Za-z_][A-Za-z0-9_]*\\)")
        foreach(line IN LISTS lines)
          string(REGEX REPLACE "^[ \t]*PALLAS_KERNEL\\(([A-Za-z0-9_]+)\\).*" "\\1" op "${line}")
          list(APPEND ARG_OPS ${op})
        endforeach()
      endforeach()
      if(NOT ARG_OPS)
        message(FATAL_ERROR "pallas_add_kernel_library(${target}): no PALLAS_KERNEL(name) in "
                            "${ARG_SPECS}; name the ops with OPS")
      endif()
    endif()
    # Re-run CMake when a spec file changes (its op list may have).
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${specs})
    set(ARG_CODEGEN ${target}_codegen)
    add_executable(${ARG_CODEGEN} ${PALLAS_CODEGEN_MAIN} ${specs})
    target_link_libraries(${ARG_CODEGEN} PRIVATE PallasKernels::PallasCodegen)
    target_compile_features(${ARG_CODEGEN} PRIVATE cxx_std_20)
  endif()
  if(NOT ARG_TARGETS)
    set(ARG_TARGETS ${PALLAS_CUDA_ARCHS})
  endif()
  foreach(arch IN LISTS ARG_TARGETS)
    if(NOT arch MATCHES "^sm_(90a|80)$")
      message(FATAL_ERROR "pallas_add_kernel_library(${target}): target '${arch}'; "
                          "pallas-codegen builds sm_90a and sm_80")
    endif()
  endforeach()
  set(gen_dir ${CMAKE_CURRENT_BINARY_DIR})
  string(REPLACE ";" "," archs "${ARG_TARGETS}")
  # The toolkit root holds nvvm/libdevice, linked into kernels using math functions.
  get_filename_component(cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
  set(sources)
  foreach(op IN LISTS ARG_OPS)
    set(outputs ${gen_dir}/include/pallas/kernels/${op}.h ${gen_dir}/${op}.cc
                ${gen_dir}/${op}_host.o ${gen_dir}/${op}_emulator.o ${gen_dir}/${op}.kernel.mlir)
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
    set_source_files_properties(${gen_dir}/${op}_host.o ${gen_dir}/${op}_emulator.o
                                PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
    # The entry points are cold code (argument checks, the instance choice, a
    # launch): optimized for size they compile in about half the time of -O3
    # (layer_norm_residual.cc, 18 instances: 9.9 s -> 5.6 s) and are smaller.
    set_source_files_properties(${gen_dir}/${op}.cc PROPERTIES COMPILE_OPTIONS -Os)
    list(APPEND sources ${gen_dir}/${op}.stamp ${gen_dir}/${op}.cc ${gen_dir}/${op}_host.o
                        ${gen_dir}/${op}_emulator.o)
  endforeach()
  add_library(${target} STATIC ${sources})
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${gen_dir}/include>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # The host forms call libm (tanhf, erff, ...); the CUDA path needs cudart.
  target_link_libraries(${target} PUBLIC CUDA::cudart_static m)
  # A user's kernels call the prebuilt ops' runtime (entry point checks, launches, the
  # emulator): one copy of it, in libpallaskernels.a.
  if(ARG_SPECS)
    target_link_libraries(${target} PUBLIC PallasKernels::pallaskernels)
  endif()
endfunction()

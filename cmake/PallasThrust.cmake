# PallasKernels::thrust: what <pallas/thrust.h> needs, the CUDA toolkit's Thrust
# headers (in include/cccl since CUDA 13) and the library. Included by the
# project and by the installed package's config.
if(NOT TARGET PallasKernels::thrust)
  find_path(PALLAS_THRUST_INCLUDE_DIR thrust/device_vector.h
            HINTS ${CUDAToolkit_INCLUDE_DIRS}/cccl ${CUDAToolkit_INCLUDE_DIRS} NO_DEFAULT_PATH)
  if(PALLAS_THRUST_INCLUDE_DIR)
    add_library(PallasKernels::thrust INTERFACE IMPORTED)
    set_target_properties(PallasKernels::thrust PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES "${PALLAS_THRUST_INCLUDE_DIR};${CUDAToolkit_INCLUDE_DIRS}"
      INTERFACE_LINK_LIBRARIES PallasKernels::pallaskernels)
  endif()
endif()

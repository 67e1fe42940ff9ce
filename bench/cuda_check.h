// CHECK_CUDA(call): the bench programs' CUDA runtime error check; a failing
// call prints file:line, the call and CUDA's message, and exits.
#ifndef PALLAS_BENCH_CUDA_CHECK_H
#define PALLAS_BENCH_CUDA_CHECK_H

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(call)                                                                         \
  do {                                                                                           \
    cudaError_t e = (call);                                                                      \
    if (e != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

#endif  // PALLAS_BENCH_CUDA_CHECK_H

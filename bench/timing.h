// median_ms(launch, reps): the bench programs' timer. Runs `launch(i)` `warmup`
// times, then `reps` times each between its own pair of CUDA events, and
// returns the median milliseconds.
#ifndef PALLAS_BENCH_TIMING_H
#define PALLAS_BENCH_TIMING_H

#include "cuda_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <vector>

inline double median_ms(const std::function<void(int)>& launch, int reps, int warmup = 5) {
  for (int i = 0; i < warmup; ++i) launch(i);
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    launch(i);
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

#endif  // PALLAS_BENCH_TIMING_H

// median_ms(launch, reps): the bench programs' timer. Runs `launch(i)` `warmup`
// times, then `reps` times each between its own pair of CUDA events (waiting for each), and
// returns the median milliseconds: a launch's whole cost, its time on the host included.
#ifndef PALLAS_BENCH_TIMING_H
#define PALLAS_BENCH_TIMING_H

#include "cuda_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
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

// back_to_back_ms(launch, reps): the mean milliseconds of `reps` launches enqueued back to back
// between one pair of CUDA events (after one untimed pass of as many, which also grows any pool
// a launch draws on to the depth of the queue). The host enqueues while the device runs, so
// the time a launch spends on the host (argument checks, descriptors, the launch call) and the
// gap between kernels are hidden where the kernel outlasts them: the device's time, as a
// model's stream of launches (or a CUDA graph) sees it. median_ms, which waits for each
// launch, counts them: for short kernels the two differ by the launch's own cost.
// `host_us`, if given, receives the host's microseconds a launch (the enqueueing loop's wall
// time over `reps`): what a launch costs the caller's thread.
inline double back_to_back_ms(const std::function<void(int)>& launch, int reps,
                              double* host_us = nullptr) {
  for (int i = 0; i < reps; ++i) launch(i);
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start));
  const auto host_start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) launch(i);
  const std::chrono::duration<double, std::micro> host =
      std::chrono::steady_clock::now() - host_start;
  if (host_us) *host_us = host.count() / reps;
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return ms / reps;
}

#endif  // PALLAS_BENCH_TIMING_H

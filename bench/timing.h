// The bench programs' timers.
//
// median_ms(launch, reps): runs `launch(i)` `warmup` times, then `reps` times each between its
// own pair of CUDA events, waiting for each, and returns the median milliseconds: a launch's
// whole cost as a caller that waits for it sees it, its time on the host included (the start
// event is recorded on an idle device, before the launch is enqueued). `host_us`, if given,
// receives the median microseconds the `launch(i)` call itself took on the host: the part of
// that cost spent before (and after) the kernel was enqueued.
//
// back_to_back_ms(launch, reps): the mean milliseconds of `reps` launches enqueued back to back
// between one pair of CUDA events (after one untimed pass of as many, which also grows any pool
// a launch draws on to the depth of the queue). The host enqueues while the device runs, so
// the time a launch spends on the host and the gap between kernels are hidden where the kernel
// outlasts them: the device's time, as a model's stream of launches (or a CUDA graph) sees it.
// For short kernels the two differ by the launch's own cost.
//
// graph_ms(launch, reps, stream): `reps` launches (launch(i) enqueuing on `stream`) captured
// into one CUDA graph, replayed once untimed, then once between two events: the mean
// milliseconds a launch. The device's time as a captured model sees it (a decode loop replays
// one graph a step): no host path at all, only the graph's own gaps between kernels. NaN, the
// reason on stderr, where a capture step fails; `launch` reports its own failures through
// `failed` (set true) rather than exiting, since a failed call leaves the capture to end.
#ifndef PALLAS_BENCH_TIMING_H
#define PALLAS_BENCH_TIMING_H

#include "cuda_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <vector>

template <typename T>
T median_of(std::vector<T> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

inline double median_ms(const std::function<void(int)>& launch, int reps, int warmup = 5,
                        double* host_us = nullptr) {
  for (int i = 0; i < warmup; ++i) launch(i);
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> times;
  std::vector<double> host;
  for (int i = 0; i < reps; ++i) {
    CHECK_CUDA(cudaEventRecord(start));
    const auto host_start = std::chrono::steady_clock::now();
    launch(i);
    host.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - host_start)
            .count());
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  if (host_us) *host_us = median_of(host);
  return median_of(times);
}

inline double back_to_back_ms(const std::function<void(int)>& launch, int reps) {
  for (int i = 0; i < reps; ++i) launch(i);
  CHECK_CUDA(cudaDeviceSynchronize());
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventRecord(start));
  for (int i = 0; i < reps; ++i) launch(i);
  CHECK_CUDA(cudaEventRecord(stop));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  return ms / reps;
}

inline double graph_ms(const std::function<void(int)>& launch, int reps, cudaStream_t stream,
                       const bool& failed) {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  auto give_up = [&](const char* step, cudaError_t e) {
    std::fprintf(stderr, "graph_ms: %s failed: %s\n", step,
                 e == cudaSuccess ? "the launch failed" : cudaGetErrorString(e));
    (void)cudaGetLastError();
    if (exec) (void)cudaGraphExecDestroy(exec);
    if (graph) (void)cudaGraphDestroy(graph);
    return NAN;
  };
  if (cudaError_t e = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal); e != cudaSuccess)
    return give_up("cudaStreamBeginCapture", e);
  for (int i = 0; i < reps && !failed; ++i) launch(i);
  if (cudaError_t e = cudaStreamEndCapture(stream, &graph); e != cudaSuccess)
    return give_up("cudaStreamEndCapture", e);
  if (failed) return give_up("a captured launch", cudaSuccess);
  if (cudaError_t e = cudaGraphInstantiate(&exec, graph, 0); e != cudaSuccess)
    return give_up("cudaGraphInstantiate", e);
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaGraphLaunch(exec, stream));  // untimed: uploads the graph
  CHECK_CUDA(cudaEventRecord(start, stream));
  CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return ms / reps;
}

#endif  // PALLAS_BENCH_TIMING_H

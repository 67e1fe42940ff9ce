// Hand-written CUDA reference kernels for the row-wise bf16 ops: a yardstick
// for pallaskernels' generated code (bench/sass_report.py compares their SASS
// statically) and timing peers for pallas_bench on a GPU.
//
// All of them take contiguous row-major [rows, cols] bf16 arrays, keep their
// statistics in f32, and launch on `stream` without synchronizing. They return
// the launch's error (cudaGetLastError), cudaErrorInvalidValue for negative
// sizes, and cudaSuccess without launching when there is nothing to do.
//
// The fast paths need 16-byte aligned pointers and cols % 8 == 0 (every row
// then starts on a 16-byte boundary); otherwise the softmax and norm kernels
// fall back to a scalar loop over the row, and row_sum/cross_entropy peel an
// unaligned head and tail per row instead. Declared for a host C++ compiler
// too (cuda_bf16.h defines __nv_bfloat16 for host code).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace pallas_ref {

/// y[r, :] = softmax(x[r, :]).
cudaError_t softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols,
                         cudaStream_t stream);

/// y[r, :] = log_softmax(x[r, :]) = x - max - log(sum(exp(x - max))).
cudaError_t log_softmax_bf16(const __nv_bfloat16* x, __nv_bfloat16* y, int rows, int cols,
                             cudaStream_t stream);

/// y = x * rsqrt(mean(x^2) + eps) * w, w of [cols].
cudaError_t rms_norm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                          int rows, int cols, float eps, cudaStream_t stream);

/// y = (x - mean) * rsqrt(var + eps) * w + b (biased variance), w and b of [cols].
cudaError_t layer_norm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* b,
                            __nv_bfloat16* y, int rows, int cols, float eps, cudaStream_t stream);

/// y[r] = sum(x[r, :]) in f32, rows of any length and alignment.
cudaError_t row_sum_bf16(const __nv_bfloat16* x, float* y, int rows, int cols, cudaStream_t stream);

/// loss[r] = logsumexp(logits[r, :]) - logits[r, labels[r]]; NaN for a label
/// outside [0, vocab).
cudaError_t cross_entropy_bf16(const __nv_bfloat16* logits, const int32_t* labels, float* loss,
                               int rows, int vocab, cudaStream_t stream);

}  // namespace pallas_ref

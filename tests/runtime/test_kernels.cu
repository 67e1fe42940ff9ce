// Hand-written kernels for runtime_cuda_test, compiled to one cubin per target and embedded
// the way generated kernels are. They follow the ABI of generated kernels: extern "C" entry
// symbols, parameters passed through launch_kernel's `void** args`.

// z = x + y, one thread per element, 1-D grid.
extern "C" __global__ void pallas_test_add(const float* x, const float* y, float* z, long long n) {
  const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) z[i] = x[i] + y[i];
}

// Fills `words` ints of dynamic shared memory (more than the 48 KiB default), then program p
// of the 3-D grid writes buf[words - 1] + p = words - 1 + p to out[p].
extern "C" __global__ void pallas_test_smem(int* out, int words) {
  extern __shared__ int buf[];
  for (int i = threadIdx.x; i < words; i += blockDim.x) buf[i] = i;
  __syncthreads();
  if (threadIdx.x == 0) {
    const int p = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    out[p] = buf[words - 1] + p;
  }
}

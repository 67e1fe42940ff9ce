// Clusters of s CTAs resident at once, for a kernel of one CTA an SM (all of the opt-in
// shared memory) and of two, s = 1..16: the GPCs' shape as cluster launches see it.
#include <cuda_runtime.h>
#include <cstdio>
__global__ void k(int* p) {
  extern __shared__ int s[];
  if (p) p[0] = s[threadIdx.x];
}
int main() {
  int dev = 0, optin = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  printf("SMs %d, opt-in shared %d\n", sms, optin);
  cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
  for (int per_sm : {1, 2}) {
    printf("%d CTA(s) an SM:", per_sm);
    for (int s = 1; s <= 16; ++s) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(s * 64);
      cfg.blockDim = dim3(384);
      cfg.dynamicSmemBytes = per_sm == 1 ? optin : optin / 2 - 2048;
      cudaLaunchAttribute at;
      at.id = cudaLaunchAttributeClusterDimension;
      at.val.clusterDim.x = s;
      at.val.clusterDim.y = 1;
      at.val.clusterDim.z = 1;
      cfg.attrs = &at;
      cfg.numAttrs = 1;
      int n = -1;
      cudaError_t e = cudaOccupancyMaxActiveClusters(&n, (void*)k, &cfg);
      if (e != cudaSuccess) {
        printf(" %d:%s", s, cudaGetErrorName(e));
        cudaGetLastError();
      } else
        printf(" %d:%d(%d)", s, n, n * s);
    }
    printf("\n");
  }
}

// ZERO_HD marks math shared by the CPU kernels and the CUDA kernels: the same
// inline function compiles for host and device, so CPU tests check the very
// arithmetic the GPU runs.
#ifndef ZERO_KERNELS_HD_H_
#define ZERO_KERNELS_HD_H_

#if defined(__CUDACC__)
#define ZERO_HD __host__ __device__ __forceinline__
#else
#define ZERO_HD inline
#endif

#endif  // ZERO_KERNELS_HD_H_

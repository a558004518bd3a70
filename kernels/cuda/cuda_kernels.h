// Host API of the CUDA kernels: plain C++, no CUDA headers needed to include
// it. Every Launch* call is asynchronous on `stream` (a cudaStream_t passed as
// void*; nullptr is the legacy default stream) and returns the cudaError_t of
// the launch as an int (0 = success). Pointers are device pointers unless
// stated otherwise. The per-element arithmetic of every kernel is a function
// of kernels/*_math.h (see kernels/fused_math.h), so the CPU tests of those
// bodies check what the GPU computes.
#ifndef ZERO_KERNELS_CUDA_CUDA_KERNELS_H_
#define ZERO_KERNELS_CUDA_CUDA_KERNELS_H_

#include <stddef.h>
#include <stdint.h>

#include "kernels/adam_math.h"
#include "kernels/dtype.h"
#include "kernels/optim_math.h"

namespace zero {
namespace cuda {

using Stream = void*;

const char* ErrorString(int err);

// One tensor (or shard slice) for the fused optimizer: fp32 master `param`,
// Adam moments `exp_avg`/`exp_avg_sq`, the raw gradient `grad` (of the
// grad_type given to the launch) and an optional working copy (`working`,
// of working_type; nullptr to skip) rewritten from the updated master in the
// same pass. `n` elements each.
struct AdamTensor {
  float* param;
  float* exp_avg;
  float* exp_avg_sq;
  const void* grad;
  void* working;
  int64_t n;
};

// Adam/AdamW (math::AdamUpdate, scalars from math::MakeAdamScalars; the
// gradient is multiplied by s.grad_scale) over `count` tensors with few
// launches (multi-tensor apply). `tensors` is a host array.
int LaunchMultiTensorAdam(const AdamTensor* tensors, int count,
                          DType grad_type, DType working_type,
                          const math::AdamScalars& s, Stream stream);

// dst[i] = cast(src[i]) for n elements (round to nearest even; any pair of
// types; src == dst allowed only when the types have the same size).
int LaunchCast(const void* src, DType src_type, void* dst,
               DType dst_type, int64_t n, Stream stream);

// dst[i] = src[i] * factor (math::UnscaleElement) and, in the same pass,
// *nonfinite_flag = 1 (a device int) when any src[i] or product is inf/NaN;
// the flag is never cleared here. src == dst allowed (same type).
int LaunchUnscale(const void* src, DType src_type, void* dst,
                  DType dst_type, int64_t n, float factor,
                  int* nonfinite_flag, Stream stream);

// Doubles of workspace LaunchSquaredNorm needs.
constexpr int kSquaredNormWorkspace = 1024;

// *out = sum of x[i]^2 accumulated in double (math::SquaredTerm), or
// *out += that sum when `accumulate`. Deterministic: a fixed grid writes
// per-block partials to `workspace` (kSquaredNormWorkspace doubles), which a
// second one-block kernel sums in a fixed order.
int LaunchSquaredNorm(const void* x, DType type, int64_t n,
                      double* workspace, double* out, bool accumulate,
                      Stream stream);

// Gradient accumulation: dst[i] = dst[i] + src[i] (both `type`, summed in
// fp32; math::AccumulateElement).
int LaunchAccumulate(void* dst, const void* src, DType type, int64_t n,
                     Stream stream);

// dst[i] = dst[i] + src[i] * scale for an fp32 src (math::
// AccumulateScaledElement).
int LaunchAccumulateScaled(void* dst, DType type, const float* src,
                           float scale, int64_t n, Stream stream);

// One step of the optimizer `s.kind` names (kernels/optim_math.h) over fp32
// param, s1, s2 (the optimizer's state layout; unused ones may be null) with
// the raw gradient of `grad_type`; the updated param also goes to `working`
// as working_type when non-null. Adam runs the multi-tensor kernel above.
int LaunchOptimizerStep(const math::OptimScalars& s, const void* grad, DType grad_type,
                        float* param, float* s1, float* s2, void* working,
                        DType working_type, int64_t n, Stream stream);
// Adam over packed moments (kernels/moments_format_math.h, `format` bf16 or
// 8-bit; n counts from a block start): what LaunchOptimizerStep runs when
// s.moments_format is not fp32, with s1 as `moments`.
int LaunchAdamPacked(const math::AdamScalars& s, int format, const void* grad, DType grad_type,
                     float* param, void* moments, void* working, DType working_type, int64_t n,
                     Stream stream);

// SGD (math::SgdUpdate) on fp32 param with raw fp32 grad; momentum_buf may
// be null (momentum 0); the updated param is also written to `working` as
// working_type when that is non-null.
int LaunchSgd(const float* grad, float* param, float* momentum_buf,
              void* working, DType working_type, int64_t n,
              const math::SgdScalars& s, Stream stream);

// One byte range to copy; `n` is in bytes.
struct CopyChunk {
  const void* src;
  void* dst;
  int64_t n;
};

// Copies every chunk (multi-tensor copy; few launches). Host array.
int LaunchMultiTensorCopy(const CopyChunk* chunks, int count, Stream stream);

// Bucket flatten: srcs[i] (bytes[i] bytes each) back to back into `flat`.
int LaunchFlatten(const void* const* srcs, const int64_t* bytes, int count,
                  void* flat, Stream stream);

// Inverse of LaunchFlatten: `flat` back out into dsts[i].
int LaunchUnflatten(const void* flat, void* const* dsts, const int64_t* bytes,
                    int count, Stream stream);

// Block-wise quantization (kernels/quant_math.h): x[0, n) packed into `out`
// (math::QuantPackedBytes(n, bits, block) bytes, device memory); bits 8 or 4.
// Bitwise equal to cpu::QuantizePiece.
int LaunchQuantize(const float* x, int64_t n, int bits, int block, uint8_t* out,
                   Stream stream);

// out[i] = code_i * scale (or out[i] += that when `accumulate`, in fp32).
// Bitwise equal to cpu::DequantizePiece / cpu::DequantizeAdd.
int LaunchDequantize(const uint8_t* in, int64_t n, int bits, int block, float* out,
                     bool accumulate, Stream stream);

}  // namespace cuda
}  // namespace zero

#endif  // ZERO_KERNELS_CUDA_CUDA_KERNELS_H_

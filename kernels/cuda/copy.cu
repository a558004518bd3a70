// Multi-tensor copy (bucket flatten / unflatten): one launch per batch of up
// to kMaxTensors byte ranges, each range copied with the widest access (16,
// 8, 4, 2 or 1 bytes) that both its source and destination allow.
#include <vector>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/multi_tensor.h"

namespace zero {
namespace cuda {
namespace {

constexpr int kMaxTensors = 128;
constexpr int64_t kChunkBytes = kThreads * 16 * 8;  // bytes per block
using CopyBatch = TensorBatch<CopyChunk, kMaxTensors>;
static_assert(sizeof(CopyBatch) < 4000, "kernel parameters under 4 KiB");

template <typename W>
__device__ __forceinline__ void CopyRange(const char* src, char* dst,
                                          int64_t len) {
  const int64_t words = len / (int64_t)sizeof(W);
  const W* s = reinterpret_cast<const W*>(src);
  W* d = reinterpret_cast<W*>(dst);
  for (int64_t i = threadIdx.x; i < words; i += kThreads) d[i] = s[i];
  for (int64_t i = words * (int64_t)sizeof(W) + threadIdx.x; i < len;
       i += kThreads) {
    dst[i] = src[i];
  }
}

__global__ void __launch_bounds__(kThreads) CopyKernel(CopyBatch batch) {
  const int t = FindTensor(batch.chunk_start, batch.count, blockIdx.x);
  const CopyChunk c = batch.tensors[t];
  const int64_t begin =
      (int64_t)(blockIdx.x - batch.chunk_start[t]) * kChunkBytes;
  const int64_t len =
      c.n - begin < kChunkBytes ? c.n - begin : kChunkBytes;
  const char* src = static_cast<const char*>(c.src) + begin;
  char* dst = static_cast<char*>(c.dst) + begin;
  const uintptr_t a = (uintptr_t)src | (uintptr_t)dst;
  if (a % 16 == 0) {
    CopyRange<uint4>(src, dst, len);
  } else if (a % 8 == 0) {
    CopyRange<uint2>(src, dst, len);
  } else if (a % 4 == 0) {
    CopyRange<uint32_t>(src, dst, len);
  } else if (a % 2 == 0) {
    CopyRange<uint16_t>(src, dst, len);
  } else {
    CopyRange<uint8_t>(src, dst, len);
  }
}

}  // namespace

int LaunchMultiTensorCopy(const CopyChunk* chunks, int count, Stream stream) {
  return ForEachBatch<CopyChunk, kMaxTensors>(
      chunks, count, kChunkBytes, INT32_MAX,
      [&](const CopyBatch& b, int32_t blocks) {
        CopyKernel<<<blocks, kThreads, 0, AsStream(stream)>>>(b);
        return LastError();
      });
}

int LaunchFlatten(const void* const* srcs, const int64_t* bytes, int count,
                  void* flat, Stream stream) {
  std::vector<CopyChunk> chunks(count);
  int64_t off = 0;
  for (int i = 0; i < count; ++i) {
    chunks[i] = CopyChunk{srcs[i], static_cast<char*>(flat) + off, bytes[i]};
    off += bytes[i];
  }
  return LaunchMultiTensorCopy(chunks.data(), count, stream);
}

int LaunchUnflatten(const void* flat, void* const* dsts, const int64_t* bytes,
                    int count, Stream stream) {
  std::vector<CopyChunk> chunks(count);
  int64_t off = 0;
  for (int i = 0; i < count; ++i) {
    chunks[i] =
        CopyChunk{static_cast<const char*>(flat) + off, dsts[i], bytes[i]};
    off += bytes[i];
  }
  return LaunchMultiTensorCopy(chunks.data(), count, stream);
}

}  // namespace cuda
}  // namespace zero

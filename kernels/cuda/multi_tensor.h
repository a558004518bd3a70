// Multi-tensor apply: many tensors, few launches. Tensors are grouped into
// batches of at most kMax; each batch is one launch whose block b works on
// chunk b - chunk_start[t] of tensor t, the t with
// chunk_start[t] <= b < chunk_start[t+1]. The batch travels as a kernel
// argument (kept under the 4 KiB parameter limit), so no descriptor copies.
// Host-testable: the planner and the block lookup compile without CUDA.
#ifndef ZERO_KERNELS_CUDA_MULTI_TENSOR_H_
#define ZERO_KERNELS_CUDA_MULTI_TENSOR_H_

#include <stdint.h>

#include "kernels/hd.h"

namespace zero {
namespace cuda {

template <typename T, int kMax>
struct TensorBatch {
  T tensors[kMax];
  int32_t chunk_start[kMax + 1];
  int32_t count;
};

// The tensor that owns `block`: the largest t with chunk_start[t] <= block
// (so tensors with zero chunks are never chosen for a block they don't own).
ZERO_HD int FindTensor(const int32_t* chunk_start, int count, int32_t block) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (chunk_start[mid] <= block) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// Calls launch(batch, blocks) for consecutive batches covering tensors
// [0, count) (T has an int64_t field `n`, in units of `chunk`'s elements).
// A batch closes when it holds kMax tensors or when adding the next tensor
// would exceed max_blocks chunks. Returns the first nonzero launch result,
// or -1 when one tensor alone needs more than max_blocks chunks.
template <typename T, int kMax, typename Launch>
int ForEachBatch(const T* tensors, int count, int64_t chunk,
                 int64_t max_blocks, Launch launch) {
  TensorBatch<T, kMax> b;
  b.count = 0;
  int64_t blocks = 0;
  for (int i = 0; i < count; ++i) {
    int64_t c = (tensors[i].n + chunk - 1) / chunk;
    if (c > max_blocks) return -1;
    if (b.count == kMax || blocks + c > max_blocks) {
      b.chunk_start[b.count] = (int32_t)blocks;
      if (blocks > 0) {
        int r = launch(b, (int32_t)blocks);
        if (r != 0) return r;
      }
      b.count = 0;
      blocks = 0;
    }
    b.tensors[b.count] = tensors[i];
    b.chunk_start[b.count] = (int32_t)blocks;
    ++b.count;
    blocks += c;
  }
  b.chunk_start[b.count] = (int32_t)blocks;
  if (blocks > 0) return launch(b, (int32_t)blocks);
  return 0;
}

}  // namespace cuda
}  // namespace zero

#endif  // ZERO_KERNELS_CUDA_MULTI_TENSOR_H_

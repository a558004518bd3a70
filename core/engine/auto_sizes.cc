#include "core/engine/auto_sizes.h"

#include <algorithm>

namespace zero {

int64_t AutoSizeHidden(const std::vector<SizingParam>& params) {
  int64_t n = 0, hidden = 0;
  for (const SizingParam& p : params) {
    if (p.trainable && p.matrix && p.numel > n) {
      n = p.numel;
      hidden = p.min_dim;
    }
  }
  return hidden;
}

void ResolveAutoSizes(const std::vector<SizingParam>& params, Config* c) {
  const int64_t hidden = AutoSizeHidden(params);
  if (hidden == 0) return;
  const int64_t hidden2 = hidden * hidden;
  if (c->reduce_bucket_size_auto) c->reduce_bucket_size = std::min<int64_t>(hidden2, 500000000);
  if (c->stage3_prefetch_bucket_size_auto) {
    c->stage3_prefetch_bucket_size = static_cast<int64_t>(0.9 * static_cast<double>(hidden2));
  }
  if (c->stage3_param_persistence_threshold_auto) {
    c->stage3_param_persistence_threshold = 10 * hidden;
  }
}

}  // namespace zero

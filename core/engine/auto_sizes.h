// The "auto" buffer sizes (HF's rule, as its DeepSpeed integration fills
// them): hidden^2 from the model, where hidden is the smaller dimension of
// the largest 2-D trainable param. One rule for the engine (Engine::Finalize)
// and the memory estimator, so an estimate sizes what the engine allocates.
#ifndef ZERO_CORE_ENGINE_AUTO_SIZES_H_
#define ZERO_CORE_ENGINE_AUTO_SIZES_H_

#include <cstdint>
#include <vector>

#include "core/config/config.h"

namespace zero {

// What the rule reads of one param.
struct SizingParam {
  int64_t numel = 0;
  bool trainable = true;
  bool matrix = false;   // 2-D
  int64_t min_dim = 0;   // a matrix's smaller dimension
};

// The hidden size: the smaller dimension of the largest 2-D trainable param
// (the first of equal size); 0 when there is none.
int64_t AutoSizeHidden(const std::vector<SizingParam>& params);

// Fills the sizes that were "auto" or absent from the ds_config
// (Config::reduce_bucket_size_auto and its siblings): buckets of hidden^2
// elements, never above DeepSpeed's fixed 5e8; prefetch 0.9 hidden^2;
// persistence below 10 hidden. A param larger than a bucket gets a gradient
// buffer of its own (GradientReducer), so buffers do not follow the
// embedding or the model. A model with no 2-D trainable param keeps the
// fixed defaults.
void ResolveAutoSizes(const std::vector<SizingParam>& params, Config* config);

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_AUTO_SIZES_H_

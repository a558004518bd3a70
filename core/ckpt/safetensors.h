// Export of a checkpoint to one safetensors file (huggingface/safetensors:
// u64 little-endian header length, a JSON header mapping each tensor name to
// {dtype, shape, data_offsets}, then the raw little-endian data). Offline: it
// reads the rank files directly, param by param, so memory stays bounded by
// the largest param, and every section read is verified.
#ifndef ZERO_CORE_CKPT_SAFETENSORS_H_
#define ZERO_CORE_CKPT_SAFETENSORS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/shard_view.h"
#include "core/common/dtype.h"

namespace zero {
namespace ckpt {

// Every param (trainable and frozen, registration order) of DIR/TAG (TAG
// empty: latest) as fp32 master values, or rounded to bf16 / fp16, into
// `out_path` (written through a temporary name, then renamed).
absl::Status ExportSafetensors(const std::string& dir, const std::string& tag,
                               const std::string& out_path, DType dtype,
                               const ProgressFn& progress = nullptr);

// One safetensors file of `params` (of `ck`, in this order, master values
// as `dtype`), with `metadata` as its __metadata__: read and written one
// param at a time (memory: the largest param), through a temporary name.
absl::Status WriteSafetensors(Checkpoint* ck, const std::vector<const ParamRecord*>& params,
                              const std::string& out_path, DType dtype,
                              const std::vector<std::pair<std::string, std::string>>& metadata,
                              Progress* progress);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_SAFETENSORS_H_

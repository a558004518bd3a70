// Export of a checkpoint in the Hugging Face layout, for `from_pretrained`:
// model.safetensors, or model-0000N-of-0000M.safetensors with
// model.safetensors.index.json, plus the model's config.json. The same
// layout as zero.torch's engine.save_pretrained (bindings/python/zero/torch/
// hf_export.py) writes from a live engine, by the same rules: params in
// registration order (the names the model gives them, a tied param once
// under its first name), cut greedily into files of at most max_shard_bytes
// (a larger param gets a file of its own). Offline; one param in memory at a
// time, so peak memory is the largest param, not a shard and not the model.
#ifndef ZERO_CORE_CKPT_HF_EXPORT_H_
#define ZERO_CORE_CKPT_HF_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/ckpt/shard_view.h"
#include "core/common/dtype.h"

namespace zero {
namespace ckpt {

constexpr char kHfIndexName[] = "model.safetensors.index.json";
constexpr char kHfSingleName[] = "model.safetensors";
// Files of a Hugging Face model's configuration, copied when present.
constexpr const char* kHfConfigNames[] = {"config.json", "generation_config.json"};

struct HfExportOptions {
  // The values' dtype; unset: the saving run's working dtype, as
  // save_pretrained's default.
  bool dtype_set = false;
  DType dtype = DType::kF32;
  int64_t max_shard_bytes = 5'000'000'000;  // HF's default "5GB"
  // Where config.json / generation_config.json are; empty: DIR/TAG, where
  // zero.torch's save_checkpoint writes them.
  std::string config_dir;
  ProgressFn progress;
};

struct HfExport {
  std::vector<std::string> files;   // written, in order (index last)
  std::vector<std::string> configs;  // config files copied
};

// "5GB", "200MB", "10KiB", "4096" as HF's max_shard_size (decimal KB/MB/GB,
// binary KiB/MiB/GiB, plain bytes).
absl::StatusOr<int64_t> ParseShardSize(const std::string& text);

// Indices 0..n-1 of params of `bytes` each, in order, cut into files of at
// most `limit` bytes; a param larger than `limit` gets a file of its own.
std::vector<std::vector<int>> PlanShards(const std::vector<int64_t>& bytes, int64_t limit);

// DIR/TAG (TAG empty: latest) into `out_dir` (created).
absl::StatusOr<HfExport> ExportHf(const std::string& dir, const std::string& tag,
                                  const std::string& out_dir, const HfExportOptions& options);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_HF_EXPORT_H_

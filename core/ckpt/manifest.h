// manifest.json: what a checkpoint holds (docs/ARCHITECTURE.md, "Checkpoints"). Written
// by rank 0 once every rank's file is safely on disk, so a tag directory
// without a manifest is an unfinished save. Also the `latest` file that
// names the newest finished tag.
#ifndef ZERO_CORE_CKPT_MANIFEST_H_
#define ZERO_CORE_CKPT_MANIFEST_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ckpt/shard_view.h"
#include "core/common/dtype.h"
#include "core/optim/loss_scaler.h"

namespace zero {
namespace ckpt {

constexpr int kFormatVersion = 1;
constexpr char kManifestName[] = "manifest.json";
constexpr char kLatestName[] = "latest";

struct ParamRecord {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  bool trainable = true;
  int64_t numel = 0;
  std::vector<RankSlice> slices;  // frozen: one slice on rank 0
};

struct FileRecord {
  int rank = 0;
  std::string file;      // relative to the tag directory
  int64_t bytes = 0;
  uint64_t index_xxh3 = 0;  // of the file's section index
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string tag;
  int world_size = 1;
  int stage = 0;
  DType dtype = DType::kF32;     // working dtype of the saving run
  std::string optimizer;         // adam | adamw | sgd
  std::vector<int> states;       // optimizer states beyond master
  int64_t sub_group_size = 0;
  int64_t global_step = 0, skipped_steps = 0, micro_step = 0;
  bool scaler_dynamic = false;
  LossScalerState scaler;
  std::string config_json = "{}";  // summary of the saving run's config
  // Saved with SaveOptions::exclude_frozen: the saving run's frozen params
  // are not in `params`.
  bool frozen_excluded = false;
  std::vector<ParamRecord> params;  // registration order
  std::vector<FileRecord> files;    // one per rank

  const ParamRecord* Find(const std::string& name) const;
  bool HasState(int kind) const;
};

std::string RankFileName(int rank);  // rank_00003.bin
std::string DTypeText(DType t);      // fp32 | fp16 | bf16
absl::StatusOr<DType> ParseDType(const std::string& s);

// Fills everything but params' slices, files and tag from a view.
Manifest ManifestFromView(const ShardView& view);

std::string ManifestToJson(const Manifest& m);
// Parses and checks consistency (shapes against element counts, slices
// covering each param exactly once, one file per rank). Errors name `path`
// and the offending param or key.
absl::StatusOr<Manifest> ParseManifest(const std::string& text,
                                       const std::string& path);

// The tag to use: `tag` itself, or the content of DIR/latest when empty.
absl::StatusOr<std::string> ResolveTag(const std::string& dir,
                                       const std::string& tag);
// Tags are file names: non-empty, no '/', not starting with '.', not "latest".
absl::Status CheckTagName(const std::string& tag);

std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_MANIFEST_H_

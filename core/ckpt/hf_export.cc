#include "core/ckpt/hf_export.h"

#include <cctype>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/file_util.h"
#include "core/ckpt/safetensors.h"
#include "core/common/status_macros.h"

namespace zero {
namespace ckpt {

absl::StatusOr<int64_t> ParseShardSize(const std::string& text) {
  static const std::pair<const char*, double> kUnits[] = {
      {"KIB", 1024.0}, {"MIB", 1024.0 * 1024}, {"GIB", 1024.0 * 1024 * 1024},
      {"KB", 1e3},     {"MB", 1e6},            {"GB", 1e9},
      {"B", 1.0}};
  std::string t;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) t += static_cast<char>(std::toupper(c));
  }
  double scale = 1.0;
  for (const auto& [unit, factor] : kUnits) {
    const std::string u = unit;
    if (t.size() > u.size() && t.compare(t.size() - u.size(), u.size(), u) == 0) {
      t.resize(t.size() - u.size());
      scale = factor;
      break;
    }
  }
  char* end = nullptr;
  const double v = t.empty() ? -1 : std::strtod(t.c_str(), &end);
  if (t.empty() || *end != '\0' || !(v * scale >= 1) || v * scale > 9e18) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max shard size '", text, "': expected bytes or a size such as \"5GB\" or \"200MiB\""));
  }
  return static_cast<int64_t>(v * scale);
}

std::vector<std::vector<int>> PlanShards(const std::vector<int64_t>& bytes, int64_t limit) {
  std::vector<std::vector<int>> files(1);
  int64_t used = 0;
  for (int i = 0; i < static_cast<int>(bytes.size()); ++i) {
    if (!files.back().empty() && used + bytes[i] > limit) {
      files.emplace_back();
      used = 0;
    }
    files.back().push_back(i);
    used += bytes[i];
  }
  return files;
}

namespace {

absl::Status CopyFile(const std::string& from, const std::string& to) {
  ASSIGN_OR_RETURN(std::string data, ReadFile(from));
  return WriteFileAtomic(to, data);
}

}  // namespace

absl::StatusOr<HfExport> ExportHf(const std::string& dir, const std::string& tag,
                                  const std::string& out_dir, const HfExportOptions& options) {
  ASSIGN_OR_RETURN(auto ck, Checkpoint::Open(dir, tag));
  const Manifest& m = ck->manifest();
  const DType dtype = options.dtype_set ? options.dtype : m.dtype;
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  std::vector<int64_t> bytes;
  int64_t read_total = 0, total_size = 0;
  for (const ParamRecord& p : m.params) {
    bytes.push_back(p.numel * es);
    total_size += p.numel * es;
    read_total += ck->RangeBytes(p, 0, p.numel);
  }
  const std::vector<std::vector<int>> plan = PlanShards(bytes, options.max_shard_bytes);
  std::vector<std::string> names;
  for (size_t k = 0; k < plan.size(); ++k) {
    names.push_back(plan.size() == 1 ? std::string(kHfSingleName)
                                     : absl::StrFormat("model-%05d-of-%05d.safetensors", k + 1,
                                                       plan.size()));
  }
  RETURN_IF_ERROR(MakeDirs(out_dir));
  HfExport out;
  Progress progress(options.progress, read_total);
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t k = 0; k < plan.size(); ++k) {
    std::vector<const ParamRecord*> params;
    for (int i : plan[k]) {
      params.push_back(&m.params[i]);
      weight_map[m.params[i].name] = names[k];
    }
    const std::string path = JoinPath(out_dir, names[k]);
    RETURN_IF_ERROR(WriteSafetensors(ck.get(), params, path, dtype, {{"format", "pt"}}, &progress));
    out.files.push_back(path);
  }
  if (plan.size() > 1) {
    nlohmann::json index = {{"metadata", {{"total_size", total_size}}},
                            {"weight_map", weight_map}};
    const std::string path = JoinPath(out_dir, kHfIndexName);
    RETURN_IF_ERROR(WriteFileAtomic(path, index.dump(2) + "\n"));
    out.files.push_back(path);
  }
  const std::string config_dir = options.config_dir.empty() ? ck->path() : options.config_dir;
  for (const char* name : kHfConfigNames) {
    const std::string from = JoinPath(config_dir, name);
    if (!Exists(from)) continue;
    RETURN_IF_ERROR(CopyFile(from, JoinPath(out_dir, name)));
    out.configs.push_back(name);
  }
  return out;
}

}  // namespace ckpt
}  // namespace zero

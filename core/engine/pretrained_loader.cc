#include "core/engine/pretrained_loader.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ckpt/agree.h"
#include "core/ckpt/safetensors_reader.h"
#include "core/common/status_macros.h"
#include "core/engine/optimizer_state_store.h"
#include "core/engine/param_coordinator.h"
#include "core/engine/sharded_state.h"

namespace zero {
namespace {

using ckpt::SafetensorsSet;
using ckpt::SafetensorsTensor;

// fp32 elements converted per piece (4 MiB).
constexpr int64_t kPieceElements = ckpt::kSafetensorsChunkBytes / 4;

std::string List(const std::vector<std::string>& names) {
  constexpr size_t kShown = 8;
  std::vector<std::string> q;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) q.push_back("'" + names[i] + "'");
  std::string s = absl::StrJoin(q, ", ");
  if (names.size() > kShown) absl::StrAppend(&s, " and ", names.size() - kShown, " more");
  return s;
}

// Every param's tensor (null: missing), or the first problem.
absl::Status Validate(const PretrainedTargets& t, const std::string& path,
                      const PretrainedOptions& o, std::unique_ptr<SafetensorsSet>* set,
                      std::vector<const SafetensorsTensor*>* found, PretrainedStats* stats) {
  ASSIGN_OR_RETURN(*set, SafetensorsSet::Open(path));
  std::map<std::string, const SafetensorsTensor*> by_param;
  for (const auto& [name, tensor] : (*set)->tensors()) {
    std::string mapped = name;
    if (!o.prefix_strip.empty() && absl::StartsWith(mapped, o.prefix_strip)) {
      mapped = mapped.substr(o.prefix_strip.size());
    }
    mapped = o.prefix_add + mapped;
    auto [it, fresh] = by_param.emplace(mapped, &tensor);
    if (!fresh) {
      return absl::InvalidArgumentError(absl::StrCat(
          "load_safetensors ", path, ": tensors '", it->second->name, "' and '", name,
          "' both map to param '", mapped, "' (prefix_strip '", o.prefix_strip,
          "', prefix_add '", o.prefix_add, "')"));
    }
  }
  const auto& all = t.params->all();
  found->assign(all.size(), nullptr);
  std::vector<std::string> missing;
  for (size_t id = 0; id < all.size(); ++id) {
    const ParamRecord& p = all[id];
    auto it = by_param.find(p.name);
    if (it == by_param.end()) {
      missing.push_back(p.name);
      continue;
    }
    const SafetensorsTensor& st = *it->second;
    const std::string& file = (*set)->file_path(st.file);
    if (st.shape != p.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "load_safetensors: tensor '", st.name, "' in ", file, " has shape ",
          ShapeText(st.shape), ", param '", p.name, "' has shape ", ShapeText(p.shape)));
    }
    if (!SafetensorsSet::Convertible(st.dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "load_safetensors: tensor '", st.name, "' in ", file, " has dtype ", st.dtype,
          "; param '", p.name, "' loads from F32, F16 or BF16"));
    }
    (*found)[id] = &st;
    by_param.erase(it);
  }
  if (!missing.empty() && !o.allow_missing) {
    return absl::NotFoundError(absl::StrCat(
        "load_safetensors ", path, ": no tensor for param", missing.size() > 1 ? "s " : " ",
        List(missing), " (allow_missing keeps their values; prefix_strip/prefix_add map names)"));
  }
  stats->missing = std::move(missing);
  for (const auto& [mapped, tensor] : by_param) stats->extra.push_back(tensor->name);
  return absl::OkStatus();
}

// Param `id`'s elements this rank holds, from `st`.
absl::Status WriteParam(const PretrainedTargets& t, const SafetensorsSet& set,
                        const SafetensorsTensor& st, int id, std::vector<float>* buf,
                        int64_t* bytes_read) {
  const ParamRecord& p = t.params->at(id);
  EngineContext* ctx = t.ctx;
  int64_t a = 0, b = p.numel;  // the range read
  int64_t olo = 0, ohi = 0;    // the owned master range, param-relative
  int g = -1;
  int64_t owned_begin = 0;
  const bool persistent = t.coordinator != nullptr && t.coordinator->persistent(id);
  if (p.trainable) {
    const ParamPlace& pl = ctx->layout.place(p.li);
    const GroupShard& gs = t.sharded->group(pl.group);
    g = pl.group;
    owned_begin = gs.owned_begin - pl.offset;
    olo = std::max<int64_t>(0, owned_begin);
    ohi = std::min<int64_t>(p.numel, owned_begin + gs.owned_len);
    if (ohi < olo) ohi = olo;
    if (ctx->stage() == 3 && !persistent) a = olo, b = ohi;
  }
  for (int64_t c = a; c < b;) {
    const int64_t k = std::min(kPieceElements, b - c);
    RETURN_IF_ERROR(set.ReadF32(st, c, k, buf->data(), bytes_read));
    const float* v = buf->data();
    if (!p.trainable) {
      t.sharded->WriteFrozenRange(id, c, k, v);
    } else {
      const int64_t lo = std::max(c, olo), hi = std::min(c + k, ohi);
      if (hi > lo) RETURN_IF_ERROR(t.store->Write(g, 0, lo - owned_begin, hi - lo, v + (lo - c)));
      RETURN_IF_ERROR(t.sharded->WriteWorkingRange(p.li, c, k, v));
      if (persistent) t.coordinator->WritePersistentRange(id, c, k, v);
    }
    c += k;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadPretrained(const PretrainedTargets& t, const std::string& path,
                            const PretrainedOptions& options, const absl::Status& pre,
                            PretrainedStats* stats) {
  EngineContext* ctx = t.ctx;
  PretrainedStats local;
  std::unique_ptr<SafetensorsSet> set;
  std::vector<const SafetensorsTensor*> found;
  absl::Status v = pre;
  if (v.ok()) v = Validate(t, path, options, &set, &found, &local);
  RETURN_IF_ERROR(ckpt::Agree(ctx->ctrl, v));  // nothing written yet

  absl::Status w;
  std::vector<float> buf(kPieceElements);
  for (size_t id = 0; id < found.size() && w.ok(); ++id) {
    if (found[id] == nullptr) continue;
    w = WriteParam(t, *set, *found[id], static_cast<int>(id), &buf, &local.bytes_read);
    if (w.ok()) ++local.loaded;
  }
  ctx->device->Synchronize();
  absl::Status agreed = ckpt::Agree(ctx->ctrl, w);
  if (!agreed.ok()) {
    return ctx->Fail(absl::Status(agreed.code(), absl::StrCat(
        "load_safetensors: failed after it began writing params (the engine is unusable): ",
        agreed.message())));
  }
  if (ctx->rank == 0 && !local.extra.empty()) {
    std::fprintf(stderr, "[zero] load_safetensors %s: %zu tensor%s no param took: %s\n",
                 path.c_str(), local.extra.size(), local.extra.size() > 1 ? "s" : "",
                 List(local.extra).c_str());
  }
  if (stats != nullptr) *stats = std::move(local);
  return absl::OkStatus();
}

}  // namespace zero

#include "core/ckpt/manifest.h"

#include <algorithm>
#include <cinttypes>
#include <climits>
#include <cstdint>
#include <stdexcept>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "core/ckpt/file_util.h"
#include "core/ckpt/json_int.h"
#include "core/optim/optimizer.h"

namespace zero {
namespace ckpt {

using nlohmann::ordered_json;

const char* StateName(int kind) {
  switch (kind) {
    case kMaster: return "master";
    case kExpAvg: return "exp_avg";
    case kExpAvgSq: return "exp_avg_sq";
    case kMomentum: return "momentum";
  }
  return "?";
}

int StateFromName(const std::string& name) {
  for (int k = 0; k < kNumStates; ++k) {
    if (name == StateName(k)) return k;
  }
  return -1;
}

const ParamRecord* Manifest::Find(const std::string& name) const {
  for (const ParamRecord& p : params) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

bool Manifest::HasState(int kind) const {
  return kind == kMaster || std::find(states.begin(), states.end(), kind) != states.end();
}

std::string RankFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank_%05d.bin", rank);
  return buf;
}

std::string DTypeText(DType t) { return DTypeName(t); }

absl::StatusOr<DType> ParseDType(const std::string& s) {
  if (s == "fp32") return DType::kF32;
  if (s == "fp16") return DType::kF16;
  if (s == "bf16") return DType::kBF16;
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", s, "'"));
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

namespace {

std::string Hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

}  // namespace

Manifest ManifestFromView(const ShardView& v) {
  Manifest m;
  m.world_size = v.world;
  m.stage = v.stage;
  m.dtype = v.dtype;
  m.states = v.states;
  m.global_step = v.global_step;
  m.skipped_steps = v.skipped_steps;
  m.micro_step = v.micro_step;
  m.scaler_dynamic = v.scaler_dynamic;
  m.scaler = v.scaler;
  if (v.config) {
    const Config& c = *v.config;
    m.optimizer = MakeOptimizer(c)->name();
    m.sub_group_size = c.sub_group_size;
    ordered_json j;
    j["stage"] = c.stage;
    j["dtype"] = DTypeText(c.dtype);
    j["optimizer"] = m.optimizer;
    j["lr"] = c.lr;
    j["betas"] = {c.beta1, c.beta2};
    j["eps"] = c.eps;
    j["weight_decay"] = c.weight_decay;
    j["momentum"] = c.momentum;
    j["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
    j["gradient_clipping"] = c.gradient_clipping;
    j["sub_group_size"] = c.sub_group_size;
    j["loss_scale"] = c.loss_scale;
    j["train_batch_size"] = c.train_batch_size;
    m.config_json = j.dump();
  }
  return m;
}

std::string ManifestToJson(const Manifest& m) {
  ordered_json j;
  j["format"] = "zero-checkpoint";
  j["format_version"] = m.format_version;
  j["tag"] = m.tag;
  j["world_size"] = m.world_size;
  j["stage"] = m.stage;
  j["dtype"] = DTypeText(m.dtype);
  j["optimizer"] = m.optimizer;
  ordered_json states = ordered_json::array();
  for (int k : m.states) states.push_back(StateName(k));
  j["optimizer_states"] = states;
  j["sub_group_size"] = m.sub_group_size;
  j["global_step"] = m.global_step;
  j["skipped_steps"] = m.skipped_steps;
  j["micro_step"] = m.micro_step;
  j["loss_scaler"] = {{"dynamic", m.scaler_dynamic},
                      {"cur_scale", m.scaler.cur_scale},
                      {"cur_iter", m.scaler.cur_iter},
                      {"last_overflow_iter", m.scaler.last_overflow_iter},
                      {"cur_hysteresis", m.scaler.cur_hysteresis}};
  j["config"] = ordered_json::parse(m.config_json);
  if (m.frozen_excluded) j["frozen_params"] = "excluded";
  // One line per param and per file, so a large model's manifest stays
  // readable (and diffable).
  std::string out = j.dump(1);
  out.resize(out.rfind('}'));
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  out += ",\n \"params\": [";
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamRecord& p = m.params[i];
    ordered_json jp;
    jp["name"] = p.name;
    jp["shape"] = p.shape;
    jp["dtype"] = DTypeText(p.dtype);
    jp["trainable"] = p.trainable;
    jp["numel"] = p.numel;
    ordered_json sl = ordered_json::array();
    for (const RankSlice& s : p.slices) sl.push_back({s.rank, s.offset, s.numel});
    jp["slices"] = sl;  // [rank, first element, count]
    absl::StrAppend(&out, i ? ",\n  " : "\n  ", jp.dump());
  }
  out += "\n ],\n \"files\": [";
  for (size_t i = 0; i < m.files.size(); ++i) {
    const FileRecord& f = m.files[i];
    ordered_json jf = {{"rank", f.rank},
                       {"file", f.file},
                       {"bytes", f.bytes},
                       {"index_xxh3", Hex(f.index_xxh3)}};
    absl::StrAppend(&out, i ? ",\n  " : "\n  ", jf.dump());
  }
  out += "\n ]\n}\n";
  return out;
}

namespace {

// Integers from the manifest: a float or an out-of-range value is an error
// (nlohmann's conversion of one would be undefined behaviour).
int64_t I64(const ordered_json& v) { return JsonInt(v); }

int I32(const ordered_json& v) { return static_cast<int>(JsonInt(v, INT32_MIN, INT32_MAX)); }

}  // namespace

absl::StatusOr<Manifest> ParseManifest(const std::string& text,
                                       const std::string& path) {
  auto bad = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return bad("not valid JSON");
  Manifest m;
  std::string where = "format_version";
  try {
    if (j.value("format", "") != "zero-checkpoint") return bad("not a zero checkpoint manifest");
    m.format_version = I32(j.at("format_version"));
    if (m.format_version != kFormatVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          path, ": format_version ", m.format_version, " is not supported (this build reads ",
          kFormatVersion, ")"));
    }
    where = "header";
    m.tag = j.at("tag").get<std::string>();
    m.world_size = I32(j.at("world_size"));
    m.stage = I32(j.at("stage"));
    auto dt = ParseDType(j.at("dtype").get<std::string>());
    if (!dt.ok()) return bad(absl::StrCat("dtype: ", dt.status().message()));
    m.dtype = *dt;
    m.optimizer = j.at("optimizer").get<std::string>();
    for (const auto& s : j.at("optimizer_states")) {
      int k = StateFromName(s.get<std::string>());
      if (k <= kMaster) return bad(absl::StrCat("optimizer_states: unknown state ", s.dump()));
      m.states.push_back(k);
    }
    m.sub_group_size = I64(j.at("sub_group_size"));
    m.global_step = I64(j.at("global_step"));
    m.skipped_steps = I64(j.at("skipped_steps"));
    m.micro_step = I64(j.at("micro_step"));
    where = "loss_scaler";
    const auto& ls = j.at("loss_scaler");
    m.scaler_dynamic = ls.at("dynamic").get<bool>();
    m.scaler.cur_scale = ls.at("cur_scale").get<double>();
    m.scaler.cur_iter = I64(ls.at("cur_iter"));
    m.scaler.last_overflow_iter = I64(ls.at("last_overflow_iter"));
    m.scaler.cur_hysteresis = I32(ls.at("cur_hysteresis"));
    m.config_json = j.value("config", ordered_json::object()).dump();
    where = "frozen_params";
    const std::string frozen = j.value("frozen_params", std::string("saved"));
    if (frozen != "saved" && frozen != "excluded") {
      return bad(absl::StrCat("frozen_params: '", frozen, "' is neither 'saved' nor 'excluded'"));
    }
    m.frozen_excluded = frozen == "excluded";
    where = "params";
    for (const auto& jp : j.at("params")) {
      ParamRecord p;
      p.name = jp.at("name").get<std::string>();
      where = absl::StrCat("param '", p.name, "'");
      for (const auto& d : jp.at("shape")) p.shape.push_back(I64(d));
      auto pd = ParseDType(jp.at("dtype").get<std::string>());
      if (!pd.ok()) return bad(absl::StrCat(where, ": ", pd.status().message()));
      p.dtype = *pd;
      p.trainable = jp.at("trainable").get<bool>();
      p.numel = I64(jp.at("numel"));
      for (const auto& s : jp.at("slices")) {
        if (!s.is_array() || s.size() != 3) return bad(absl::StrCat(where, ": slice ", s.dump(), " is not [rank, offset, numel]"));
        p.slices.push_back({I32(s[0]), I64(s[1]), I64(s[2])});
      }
      m.params.push_back(std::move(p));
    }
    where = "files";
    for (const auto& jf : j.at("files")) {
      FileRecord f;
      f.rank = I32(jf.at("rank"));
      f.file = jf.at("file").get<std::string>();
      f.bytes = I64(jf.at("bytes"));
      f.index_xxh3 = JsonHex64(jf.at("index_xxh3"));
      m.files.push_back(f);
    }
  } catch (const std::exception& e) {
    return bad(absl::StrCat(where, ": ", e.what()));
  }
  // Consistency.
  if (m.world_size < 1) return bad(absl::StrCat("world_size ", m.world_size, " < 1"));
  if (static_cast<int>(m.files.size()) != m.world_size) {
    return bad(absl::StrCat("lists ", m.files.size(), " rank files for world_size ", m.world_size));
  }
  for (int r = 0; r < m.world_size; ++r) {
    if (m.files[r].rank != r || m.files[r].file.empty() ||
        m.files[r].file.find('/') != std::string::npos) {
      return bad(absl::StrCat("files[", r, "] is not rank ", r, "'s file"));
    }
  }
  for (size_t i = 0; i < m.params.size(); ++i) {
    const ParamRecord& p = m.params[i];
    int64_t n = 1;
    for (int64_t d : p.shape) {
      if (d < 1) return bad(absl::StrCat("param '", p.name, "': shape ", ShapeString(p.shape), " has a dimension < 1"));
      if (__builtin_mul_overflow(n, d, &n)) {
        return bad(absl::StrCat("param '", p.name, "': shape ", ShapeString(p.shape),
                                " has more elements than a 64-bit count holds"));
      }
    }
    if (n != p.numel) {
      return bad(absl::StrCat("param '", p.name, "': shape ", ShapeString(p.shape), " has ", n,
                              " elements but numel is ", p.numel));
    }
    for (size_t k = 0; k < i; ++k) {
      if (m.params[k].name == p.name) return bad(absl::StrCat("param '", p.name, "' listed twice"));
    }
    std::vector<RankSlice> s = p.slices;
    std::sort(s.begin(), s.end(), [](const RankSlice& a, const RankSlice& b) { return a.offset < b.offset; });
    int64_t at = 0;
    for (const RankSlice& r : s) {
      if (r.rank < 0 || r.rank >= m.world_size || r.offset != at || r.numel < 1 ||
          r.numel > p.numel - at) {
        return bad(absl::StrCat("param '", p.name, "': slices do not cover [0, ", p.numel,
                                ") exactly once (slice [rank ", r.rank, ", offset ", r.offset,
                                ", numel ", r.numel, "])"));
      }
      at += r.numel;
    }
    if (at != p.numel) {
      return bad(absl::StrCat("param '", p.name, "': slices cover ", at, " of ", p.numel, " elements"));
    }
  }
  return m;
}

absl::Status CheckTagName(const std::string& tag) {
  if (tag.empty() || tag.find('/') != std::string::npos || tag[0] == '.' ||
      tag == kLatestName) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint tag '", tag, "': must be a non-empty file name without '/', "
        "not starting with '.', and not 'latest'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveTag(const std::string& dir, const std::string& tag) {
  if (!tag.empty()) {
    absl::Status s = CheckTagName(tag);
    if (!s.ok()) return s;
    return tag;
  }
  const std::string path = JoinPath(dir, kLatestName);
  auto text = ReadFile(path);
  if (!text.ok()) {
    return absl::NotFoundError(absl::StrCat("no checkpoint tag given and ", path,
                                            " cannot be read: ", text.status().message()));
  }
  std::string t(absl::StripAsciiWhitespace(*text));
  absl::Status s = CheckTagName(t);
  if (!s.ok()) return absl::DataLossError(absl::StrCat(path, ": ", s.message()));
  return t;
}

}  // namespace ckpt
}  // namespace zero

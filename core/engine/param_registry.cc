#include "core/engine/param_registry.h"

#include <algorithm>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/common/errors.h"
#include "core/common/status_macros.h"

namespace zero {

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

bool MuonDefault(const std::string& name, const std::vector<int64_t>& shape) {
  const std::string lower = absl::AsciiStrToLower(name);
  return shape.size() >= 2 && lower.find("embed") == std::string::npos &&
         lower.find("lm_head") == std::string::npos;
}

absl::StatusOr<int> ParamRegistry::Register(const ParamSpec& spec) {
  if (spec.name.empty()) {
    return absl::InvalidArgumentError("register_param: empty name");
  }
  if (by_name_.count(spec.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("register_param '", spec.name, "': name already registered"));
  }
  if (spec.shape.size() > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register_param '", spec.name, "': ndim ", spec.shape.size(), " > ", kMaxDims));
  }
  int64_t numel = 1;
  for (int64_t d : spec.shape) {
    if (d < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "register_param '", spec.name, "': shape ", ShapeText(spec.shape),
          " has a dimension < 1"));
    }
    numel *= d;
  }
  if (spec.trainable && spec.dtype != working_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register_param '", spec.name, "': dtype ", DTypeName(spec.dtype),
        " but trainable params must use the engine's working dtype ",
        DTypeName(working_), " (fp16.enabled / bf16.enabled)"));
  }
  ParamRecord p;
  p.name = spec.name;
  p.shape = spec.shape;
  p.dtype = spec.dtype;
  p.numel = numel;
  p.trainable = spec.trainable;
  if (spec.use_muon < -1 || spec.use_muon > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register_param '", spec.name, "': use_muon ", spec.use_muon,
        " (expected -1: the default rule, 0 or 1)"));
  }
  if (spec.use_muon == 1 && spec.shape.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register_param '", spec.name, "': use_muon on a ", spec.shape.size(),
        "-D param (shape ", ShapeText(spec.shape),
        "); Muon orthogonalises matrices, at least 2-D"));
  }
  p.use_muon_flag = spec.use_muon;
  p.use_muon = spec.use_muon == -1 ? MuonDefault(spec.name, spec.shape) : spec.use_muon == 1;
  const int sources = (spec.init != nullptr) + (spec.init_spec != nullptr) + (spec.fill != nullptr);
  if (sources > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register_param '", spec.name, "': give one init source (values, spec or fill callback)"));
  }
  if (spec.init) {
    p.source = InitSource::kValues;
    p.init.assign(spec.init, spec.init + numel);
  } else if (spec.fill) {
    p.source = InitSource::kFill;
    p.fill = spec.fill;
    p.fill_user = spec.fill_user;
  } else {
    // No source is zeros: the spec's default, generated where needed.
    p.source = InitSource::kSpec;
    if (spec.init_spec) {
      RETURN_IF_ERROR(ValidateInitSpec(*spec.init_spec, spec.name, spec.shape));
      p.spec = *spec.init_spec;
    }
    p.name_hash = ParamNameHash(spec.name);
  }
  params_.push_back(std::move(p));
  by_name_[spec.name] = size() - 1;
  return size() - 1;
}

absl::StatusOr<int> ParamRegistry::Find(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return absl::NotFoundError(absl::StrCat("no param named '", name, "'"));
  }
  return it->second;
}

absl::Status ParamRegistry::CheckId(int id, const char* call) const {
  if (id < 0 || id >= size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": no param with id ", id, " (", size(), " registered)"));
  }
  return absl::OkStatus();
}

ParamSpec ParamRegistry::Info(int id) const {
  const ParamRecord& p = params_[id];
  ParamSpec s;
  s.name = p.name;
  s.shape = p.shape;
  s.dtype = p.dtype;
  s.trainable = p.trainable;
  s.use_muon = p.use_muon_flag;
  return s;
}

std::vector<LayoutParam> ParamRegistry::AssignLayout() {
  std::vector<LayoutParam> lps;
  trainable_ids_.clear();
  for (int id = 0; id < size(); ++id) {
    ParamRecord& p = params_[id];
    if (!p.trainable) continue;
    p.li = static_cast<int>(lps.size());
    lps.push_back({id, p.numel, p.dtype});
    trainable_ids_.push_back(id);
  }
  return lps;
}

std::vector<SizingParam> ParamRegistry::SizingParams() const {
  std::vector<SizingParam> out;
  out.reserve(params_.size());
  for (const ParamRecord& p : params_) {
    const bool matrix = p.shape.size() == 2;
    out.push_back({p.numel, p.trainable, matrix, matrix ? std::min(p.shape[0], p.shape[1]) : 0});
  }
  return out;
}

void ParamRegistry::DropInitValues() {
  for (ParamRecord& p : params_) {
    std::vector<float>().swap(p.init);
    p.fill = nullptr;
    p.fill_user = nullptr;
  }
}

void ParamRegistry::ProduceInit(const ParamRecord& p, int64_t offset, int64_t count,
                                const InitSink& fn) const {
  if (count <= 0) return;
  if (p.source == InitSource::kValues) {
    // In pieces of at most kInitChunk like the other sources: sinks size
    // their staging by it (the stage-3 NVMe param path casts into one).
    for (int64_t done = 0; done < count; done += kInitChunk) {
      fn(done, std::min(kInitChunk, count - done), p.init.data() + offset + done);
    }
    return;
  }
  std::vector<float> buf(static_cast<size_t>(std::min(count, kInitChunk)));
  for (int64_t done = 0; done < count; done += kInitChunk) {
    const int64_t n = std::min(kInitChunk, count - done);
    if (p.source == InitSource::kSpec) {
      GenerateInit(p.spec, p.name_hash, p.shape, offset + done, n, buf.data());
    } else {
      int32_t rc = init_error_.ok() ? p.fill(p.fill_user, p.name.c_str(), offset + done, n, buf.data())
                                    : 0;
      if (rc != 0) {
        init_error_ = absl::InvalidArgumentError(absl::StrCat(
            "finalize: the fill callback of param '", p.name, "' returned ", rc,
            " for elements [", offset + done, ", ", offset + done + n, ")"));
      }
      if (!init_error_.ok()) std::fill(buf.begin(), buf.begin() + n, 0.0f);
    }
    fn(done, n, buf.data());
  }
}

int64_t ParamRegistry::init_bytes() const {
  int64_t n = 0;
  for (const ParamRecord& p : params_) n += static_cast<int64_t>(p.init.capacity() * sizeof(float));
  return n;
}

bool ParamRegistry::has_fill() const {
  for (const ParamRecord& p : params_) {
    if (p.source == InitSource::kFill) return true;
  }
  return false;
}

absl::Status ParamRegistry::AgreeInitErrors(Communicator* ctrl, CommStream* stream) const {
  if (ctrl->world_size() == 1 || !has_fill()) return init_error_;
  const int world = ctrl->world_size(), rank = ctrl->rank();
  auto h = stream->Submit([&]() -> absl::Status {
    ScopedCountingKind k(ctrl, CollectiveKind::kControl);
    double who = -static_cast<double>(init_error_.ok() ? world : rank);
    RETURN_IF_ERROR(ctrl->AllReduce(&who, 1, ReduceOp::kMax));
    const int culprit = static_cast<int>(-who);
    if (culprit == world) return absl::OkStatus();
    std::string msg = rank == culprit ? std::string(init_error_.message()) : std::string();
    int64_t len = static_cast<int64_t>(msg.size());
    RETURN_IF_ERROR(ctrl->Broadcast(&len, sizeof(len), culprit));
    msg.resize(len);
    if (len > 0) RETURN_IF_ERROR(ctrl->Broadcast(&msg[0], len, culprit));
    return absl::InvalidArgumentError(absl::StrCat(msg, " on rank ", culprit));
  });
  absl::Status s = stream->Wait(h);
  (void)stream->Drain();
  return s;
}

absl::Status ParamRegistry::VerifyRanksAgree(Communicator* ctrl, CommStream* stream) const {
  const int world = ctrl->world_size(), rank = ctrl->rank();
  if (world == 1) return absl::OkStatus();
  std::vector<std::string> mine;
  for (const ParamRecord& p : params_) {
    mine.push_back(absl::StrCat(p.name, " ", ShapeText(p.shape), " ",
                                DTypeName(p.dtype),
                                p.trainable ? " trainable" : " frozen",
                                p.source == InitSource::kFill ? " fill" : "",
                                p.use_muon_flag == -1 ? ""
                                                      : absl::StrCat(" use_muon=", p.use_muon_flag)));
  }
  const std::string text = absl::StrJoin(mine, "\n");
  constexpr size_t kNone = std::numeric_limits<int32_t>::max();
  auto h = stream->Submit([&]() -> absl::Status {
    ScopedCountingKind k(ctrl, CollectiveKind::kControl);
    int64_t len = static_cast<int64_t>(text.size());
    RETURN_IF_ERROR(ctrl->Broadcast(&len, sizeof(len), 0));
    std::string root(len, '\0');
    if (rank == 0) root = text;
    if (len > 0) RETURN_IF_ERROR(ctrl->Broadcast(&root[0], len, 0));
    std::vector<std::string> theirs =
        root.empty() ? std::vector<std::string>{} : absl::StrSplit(root, '\n');
    const size_t n = std::min(theirs.size(), mine.size());
    size_t first = kNone;
    for (size_t i = 0; i < n; ++i) {
      if (theirs[i] != mine[i]) {
        first = i;
        break;
      }
    }
    if (first == kNone && theirs.size() != mine.size()) first = n;
    double v = -static_cast<double>(first);
    RETURN_IF_ERROR(ctrl->AllReduce(&v, 1, ReduceOp::kMax));
    const size_t earliest = static_cast<size_t>(-v);
    if (earliest == kNone) return absl::OkStatus();
    // The lowest rank that differs there names its entry on every rank.
    double who = -static_cast<double>(first == earliest ? rank : world);
    RETURN_IF_ERROR(ctrl->AllReduce(&who, 1, ReduceOp::kMax));
    const int culprit = static_cast<int>(-who);
    auto at = [](const std::vector<std::string>& l, size_t i) {
      return i < l.size() ? absl::StrCat("'", l[i], "'") : std::string("nothing");
    };
    std::string entry = rank == culprit ? at(mine, earliest) : std::string();
    int64_t elen = static_cast<int64_t>(entry.size());
    RETURN_IF_ERROR(ctrl->Broadcast(&elen, sizeof(elen), culprit));
    entry.resize(elen);
    if (elen > 0) RETURN_IF_ERROR(ctrl->Broadcast(&entry[0], elen, culprit));
    return MismatchError(absl::StrCat(
        "finalize: ranks registered different params; first difference at "
        "param #", earliest, ": rank 0 has ", at(theirs, earliest), ", rank ",
        culprit, " has ", entry));
  });
  absl::Status s = stream->Wait(h);
  (void)stream->Drain();
  return s;
}

}  // namespace zero

#include "core/ckpt/checkpoint_reader.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/ckpt/agree.h"
#include "core/ckpt/file_util.h"
#include "core/common/status_macros.h"
#include "core/optim/optimizer.h"
#include "kernels/cast_math.h"

namespace zero {
namespace ckpt {

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir,
                                                             const std::string& tag) {
  ASSIGN_OR_RETURN(std::string t, ResolveTag(dir, tag));
  std::unique_ptr<Checkpoint> c(new Checkpoint());
  c->path_ = JoinPath(dir, t);
  const std::string mpath = JoinPath(c->path_, kManifestName);
  auto text = ReadFile(mpath);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat(
          "checkpoint ", c->path_, " has no ", kManifestName,
          Exists(c->path_) ? " (an unfinished save?)" : " (no such tag)"));
    }
    return text.status();
  }
  ASSIGN_OR_RETURN(c->m_, ParseManifest(*text, mpath));
  return c;
}

absl::StatusOr<const ShardFileReader*> Checkpoint::File(int rank) {
  auto it = files_.find(rank);
  if (it != files_.end()) return it->second.get();
  if (rank < 0 || rank >= static_cast<int>(m_.files.size())) {
    return absl::DataLossError(absl::StrCat(path_, ": no file for rank ", rank));
  }
  const FileRecord& f = m_.files[rank];
  ASSIGN_OR_RETURN(auto r, ShardFileReader::Open(JoinPath(path_, f.file), f.bytes, f.index_xxh3));
  const ShardFileReader* p = r.get();
  files_[rank] = std::move(r);
  return p;
}

int64_t Checkpoint::RangeBytes(const ParamRecord& p, int64_t lo, int64_t hi) const {
  int64_t n = 0;
  for (const RankSlice& s : p.slices) {
    if (std::max(lo, s.offset) < std::min(hi, s.offset + s.numel)) n += s.numel * 4;
  }
  return n;
}

absl::Status Checkpoint::ReadRange(const ParamRecord& p, int kind, int64_t lo, int64_t hi,
                                   float* dst, Progress* progress) {
  return ReadRange(p, kind, lo, hi, [dst](int64_t first, const float* src, int64_t n) {
    std::memcpy(dst + first, src, static_cast<size_t>(n) * 4);
  }, progress);
}

absl::Status Checkpoint::ReadRange(const ParamRecord& p, int kind, int64_t lo, int64_t hi,
                                   const ShardFileReader::Sink& sink, Progress* progress) {
  for (const RankSlice& s : p.slices) {
    const int64_t a = std::max(lo, s.offset), b = std::min(hi, s.offset + s.numel);
    if (a >= b) continue;
    ASSIGN_OR_RETURN(const ShardFileReader* f, File(s.rank));
    const SectionInfo* sec = f->Find(p.name, kind, s.offset);
    if (sec == nullptr || sec->numel != s.numel) {
      return absl::DataLossError(absl::StrCat(
          f->path(), ": no section '", p.name, "/", StateName(kind), "' for elements [",
          s.offset, ", ", s.offset + s.numel, ") that the manifest places there"));
    }
    const int64_t shift = a - lo;
    RETURN_IF_ERROR(f->Read(*sec, a, b, [&](int64_t first, const float* src, int64_t n) {
      sink(shift + first, src, n);
    }, progress));
  }
  return absl::OkStatus();
}

int64_t Checkpoint::TotalBytes() const {
  int64_t n = 0;
  for (const FileRecord& f : m_.files) n += f.bytes;
  return n;
}

absl::Status Checkpoint::Verify(const ProgressFn& progress_fn) {
  int64_t total = 0;
  for (int r = 0; r < m_.world_size; ++r) {
    ASSIGN_OR_RETURN(const ShardFileReader* f, File(r));
    for (const SectionInfo& s : f->sections()) total += s.numel * 4;
  }
  Progress progress(progress_fn, total);
  for (int r = 0; r < m_.world_size; ++r) {
    ASSIGN_OR_RETURN(const ShardFileReader* f, File(r));
    for (const SectionInfo& s : f->sections()) {
      RETURN_IF_ERROR(f->Read(s, 0, 0, nullptr, &progress));  // sink never runs
    }
  }
  for (const ParamRecord& p : m_.params) {
    std::vector<int> kinds = {kMaster};
    if (p.trainable) kinds.insert(kinds.end(), m_.states.begin(), m_.states.end());
    for (const RankSlice& s : p.slices) {
      ASSIGN_OR_RETURN(const ShardFileReader* f, File(s.rank));
      for (int k : kinds) {
        const SectionInfo* sec = f->Find(p.name, k, s.offset);
        if (sec == nullptr || sec->numel != s.numel) {
          return absl::DataLossError(absl::StrCat(f->path(), ": missing section '", p.name, "/",
                                                  StateName(k), "' for elements [", s.offset,
                                                  ", ", s.offset + s.numel, ")"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// ---- Load into a running engine --------------------------------------------

namespace {

// Host fp32 -> view memory (device memory when the view has a device).
void Upload(Device* d, const float* host, void* dst, DType t, int64_t n) {
  if (d != nullptr) {
    d->UploadF32(host, dst, t, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    switch (t) {
      case DType::kF32: static_cast<float*>(dst)[i] = host[i]; break;
      case DType::kF16: static_cast<uint16_t*>(dst)[i] = math::FloatToHalf(host[i]); break;
      case DType::kBF16: static_cast<uint16_t*>(dst)[i] = math::FloatToBf16(host[i]); break;
    }
  }
}

// The element range of `p` this rank fills.
void Needed(const ParamView& p, int64_t* lo, int64_t* hi) {
  *lo = p.trainable ? p.own_offset : 0;
  *hi = p.trainable ? p.own_offset + p.own_numel : p.numel;
}

std::string List(const std::vector<std::string>& v) {
  const size_t kMax = 10;
  std::vector<std::string> head(v.begin(), v.begin() + std::min(v.size(), kMax));
  std::string s = absl::StrJoin(head, ", ");
  if (v.size() > kMax) absl::StrAppend(&s, ", ... (", v.size(), " in all)");
  return s;
}

// Matches the engine's params with the checkpoint's by name and shape.
absl::Status Match(const ShardView& v, const Manifest& m, const std::string& path,
                   const LoadOptions& o, std::vector<const ParamRecord*>* recs) {
  std::vector<std::string> missing, extra, reshaped;
  std::set<std::string> names;
  bool any_trainable = false;
  for (const ParamView& p : v.params) {
    names.insert(p.name);
    const ParamRecord* r = m.Find(p.name);
    recs->push_back(r);
    if (r == nullptr) {
      missing.push_back(absl::StrCat("'", p.name, "'"));
    } else if (r->shape != p.shape) {
      reshaped.push_back(absl::StrCat("'", p.name, "' (checkpoint ", ShapeString(r->shape),
                                      ", engine ", ShapeString(p.shape), ")"));
    } else if (r->trainable && p.trainable) {
      any_trainable = true;
    }
  }
  for (const ParamRecord& r : m.params) {
    if (!names.count(r.name)) extra.push_back(absl::StrCat("'", r.name, "'"));
  }
  std::vector<std::string> problems;
  if (!missing.empty() && !o.allow_missing) {
    problems.push_back(absl::StrCat("params missing from the checkpoint (allow_missing to skip): ",
                                    List(missing)));
    if (m.frozen_excluded) {
      problems.back() += " (it was saved without its frozen params, exclude_frozen: load it "
                         "with allow_missing onto the base model they come from)";
    }
  }
  if (!extra.empty()) {
    problems.push_back(absl::StrCat("params in the checkpoint but not in the engine: ", List(extra)));
  }
  if (!reshaped.empty()) problems.push_back(absl::StrCat("params with another shape: ", List(reshaped)));
  // Adam and AdamW keep the same states; any other two optimizers' states
  // mean different things even where their section names agree.
  auto family = [](const std::string& n) { return n == "adamw" ? std::string("adam") : n; };
  const std::string engine_opt = v.config ? MakeOptimizer(*v.config)->name() : m.optimizer;
  if (o.load_optimizer_states && any_trainable && !m.optimizer.empty() &&
      family(engine_opt) != family(m.optimizer)) {
    problems.push_back(absl::StrCat("the checkpoint holds optimizer '", m.optimizer,
                                    "' states and the engine runs optimizer '", engine_opt,
                                    "' (load with load_optimizer_states = 0)"));
  } else if (o.load_optimizer_states && any_trainable) {
    for (int k : v.states) {
      if (!m.HasState(k)) {
        problems.push_back(absl::StrCat("the engine's optimizer needs '", StateName(k),
                                        "' state, which a checkpoint saved with optimizer '",
                                        m.optimizer, "' lacks (load with load_optimizer_states = 0)"));
      }
    }
  }
  if (problems.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "load ", path, ": the checkpoint does not match the engine: ", absl::StrJoin(problems, "; ")));
}

}  // namespace

absl::StatusOr<Manifest> LoadCheckpoint(const ShardView& v, Communicator* comm,
                                        const std::string& dir, const std::string& tag,
                                        const LoadOptions& o, bool* touched) {
  *touched = false;
  // 1. Manifest, and the match by name and shape; nothing written yet.
  std::unique_ptr<Checkpoint> ck;
  std::vector<const ParamRecord*> recs;
  absl::Status s;
  {
    auto c = Checkpoint::Open(dir, tag);
    if (c.ok()) {
      ck = std::move(*c);
      s = Match(v, ck->manifest(), ck->path(), o, &recs);
    } else {
      s = c.status();
    }
  }
  RETURN_IF_ERROR(Agree(comm, s));

  // 2. Open and check every file this rank reads from; count the bytes.
  int64_t total = 0;
  auto open_files = [&]() -> absl::Status {
    for (size_t i = 0; i < v.params.size(); ++i) {
      const ParamView& p = v.params[i];
      const ParamRecord* r = recs[i];
      if (r == nullptr) continue;
      int64_t lo, hi;
      Needed(p, &lo, &hi);
      if (hi <= lo) continue;
      int kinds = 1;
      if (p.trainable && r->trainable && o.load_optimizer_states) kinds += static_cast<int>(v.states.size());
      total += kinds * ck->RangeBytes(*r, lo, hi);
      for (const RankSlice& sl : r->slices) {
        if (std::max(lo, sl.offset) < std::min(hi, sl.offset + sl.numel)) {
          RETURN_IF_ERROR(ck->File(sl.rank).status());
        }
      }
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(Agree(comm, open_files()));

  // 3. Read: this writes the engine's state.
  *touched = true;
  Progress progress(o.progress, total);
  auto read = [&]() -> absl::Status {
    for (size_t i = 0; i < v.params.size(); ++i) {
      const ParamView& p = v.params[i];
      const ParamRecord* r = recs[i];
      if (r == nullptr) continue;  // allow_missing: keeps its values
      int64_t lo, hi;
      Needed(p, &lo, &hi);
      if (hi <= lo) continue;
      if (!p.trainable) {
        std::vector<float> f(static_cast<size_t>(p.numel));
        RETURN_IF_ERROR(ck->ReadRange(*r, kMaster, 0, p.numel, f.data(), &progress));
        Upload(v.device, f.data(), p.whole, p.dtype, p.numel);
        continue;
      }
      if (p.state[kMaster] == nullptr && p.io) {
        // Streamed into where the state lives (NVMe), chunk by chunk.
        absl::Status wrote;
        const int64_t base = lo - p.own_offset;
        auto into_io = [&](int k) {
          return [&, k](int64_t first, const float* src, int64_t n) {
            if (wrote.ok()) wrote = p.io(k, base + first, n, const_cast<float*>(src), true);
          };
        };
        RETURN_IF_ERROR(ck->ReadRange(*r, kMaster, lo, hi, into_io(kMaster), &progress));
        RETURN_IF_ERROR(wrote);
        for (int k : v.states) {
          if (o.load_optimizer_states && r->trainable) {
            RETURN_IF_ERROR(ck->ReadRange(*r, k, lo, hi, into_io(k), &progress));
            RETURN_IF_ERROR(wrote);
            continue;
          }
          std::vector<float> zeros(static_cast<size_t>(std::min<int64_t>(hi - lo, 1 << 20)), 0.0f);
          for (int64_t a = lo; a < hi; a += static_cast<int64_t>(zeros.size())) {
            const int64_t n = std::min<int64_t>(static_cast<int64_t>(zeros.size()), hi - a);
            RETURN_IF_ERROR(p.io(k, a - p.own_offset, n, zeros.data(), true));
          }
        }
        continue;
      }
      auto into = [&](float* dst) {
        return [&v, dst](int64_t first, const float* src, int64_t n) {
          Upload(v.state_device, src, dst + first, DType::kF32, n);
        };
      };
      RETURN_IF_ERROR(ck->ReadRange(*r, kMaster, lo, hi, into(p.state[kMaster]), &progress));
      for (int k : v.states) {
        if (o.load_optimizer_states && r->trainable) {
          RETURN_IF_ERROR(ck->ReadRange(*r, k, lo, hi, into(p.state[k]), &progress));
        } else if (v.state_device != nullptr) {
          v.state_device->Memset0(p.state[k], static_cast<size_t>(hi - lo) * 4);
        } else {
          std::memset(p.state[k], 0, static_cast<size_t>(hi - lo) * 4);
        }
      }
    }
    return absl::OkStatus();
  };
  s = read();
  if (v.device != nullptr) v.device->Synchronize();
  if (v.state_device != nullptr) v.state_device->Synchronize();
  if (!s.ok()) {
    s = absl::Status(s.code(), absl::StrCat("load ", ck->path(), ": ", s.message()));
  }
  RETURN_IF_ERROR(Agree(comm, s));
  return ck->manifest();
}

}  // namespace ckpt
}  // namespace zero

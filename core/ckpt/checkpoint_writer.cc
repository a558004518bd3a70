#include "core/ckpt/checkpoint_writer.h"

#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ckpt/agree.h"
#include "core/ckpt/file_util.h"
#include "core/ckpt/retention.h"
#include "core/ckpt/shard_file.h"
#include "core/ckpt/snapshot.h"
#include "core/common/status_macros.h"

namespace zero {
namespace ckpt {
namespace {

// View memory (device memory when the view has a device) -> host fp32.
void Download(Device* d, const void* src, DType t, float* host, int64_t n) {
  if (d != nullptr) {
    d->DownloadF32(src, t, host, n);
  } else {
    HostToF32(src, t, host, n);
  }
}

std::vector<int> Kinds(const ShardView& v) {
  std::vector<int> k = {kMaster};
  k.insert(k.end(), v.states.begin(), v.states.end());
  return k;
}

int64_t BytesOnRank(const ShardView& v) {
  int64_t n = 0;
  const int64_t kinds = static_cast<int64_t>(Kinds(v).size());
  for (const ParamView& p : v.params) {
    if (!p.trainable) {
      if (v.rank == 0) n += p.numel * 4;
      continue;
    }
    for (const RankSlice& s : p.slices) {
      if (s.rank == v.rank) n += s.numel * 4 * kinds;
    }
  }
  return n;
}

absl::StatusOr<ShardFileWriter::Done> WriteRankFile(const ShardView& v,
                                                    const std::string& path,
                                                    Progress* progress) {
  ASSIGN_OR_RETURN(auto w, ShardFileWriter::Create(path, v.rank, v.world, progress));
  const std::vector<int> kinds = Kinds(v);
  for (const ParamView& p : v.params) {
    if (!p.trainable) {
      if (v.rank != 0) continue;
      if (p.whole_f32 != nullptr) {  // a snapshot's fp32 copy
        RETURN_IF_ERROR(w->Add(p.name, kMaster, 0, p.numel, p.whole_f32));
        continue;
      }
      std::vector<float> f(static_cast<size_t>(p.numel));
      Download(v.device, p.whole, p.dtype, f.data(), p.numel);
      RETURN_IF_ERROR(w->Add(p.name, kMaster, 0, p.numel, f.data()));
      continue;
    }
    for (const RankSlice& s : p.slices) {
      if (s.rank != v.rank) continue;
      if (s.offset < p.own_offset || s.offset + s.numel > p.own_offset + p.own_numel) {
        return absl::InternalError(absl::StrCat("save: param '", p.name, "': slice of rank ",
                                                v.rank, " is not held by it"));
      }
      for (int k : kinds) {
        if (p.state[k] == nullptr && p.io) {
          // Streamed from where the state lives, one chunk at a time.
          absl::Status read;
          const int64_t base = s.offset - p.own_offset;
          RETURN_IF_ERROR(w->Add(p.name, k, s.offset, s.numel,
                                 [&](int64_t first, int64_t n, float* host) {
                                   if (read.ok()) read = p.io(k, base + first, n, host, false);
                                 }));
          RETURN_IF_ERROR(read);
          continue;
        }
        if (p.state[k] == nullptr) {
          return absl::InternalError(absl::StrCat("save: param '", p.name, "' has no ",
                                                  StateName(k), " state"));
        }
        const float* src = p.state[k] + (s.offset - p.own_offset);
        RETURN_IF_ERROR(w->Add(p.name, k, s.offset, s.numel,
                               [&v, src](int64_t first, int64_t n, float* host) {
                                 Download(v.state_device, src + first, DType::kF32, host, n);
                               }));
      }
    }
  }
  return w->Finish();
}

}  // namespace

ShardView SavedView(const ShardView& view, const SaveOptions& options) {
  if (!options.exclude_frozen) return view;
  ShardView out = view;
  out.params.clear();
  for (const ParamView& p : view.params) {
    if (p.trainable) out.params.push_back(p);
  }
  return out;
}

std::string StagingDir(const std::string& dir, const std::string& tag) {
  return JoinPath(dir, absl::StrCat(".", tag, ".partial"));
}

absl::Status PublishTag(const std::string& dir, const std::string& tag,
                        const std::string& staging, Manifest m) {
  m.tag = tag;
  RETURN_IF_ERROR(WriteFileAtomic(JoinPath(staging, kManifestName), ManifestToJson(m)));
  RETURN_IF_ERROR(FsyncDir(staging));
  RETURN_IF_ERROR(CommitDir(staging, JoinPath(dir, tag)));
  return WriteFileAtomic(JoinPath(dir, kLatestName), tag + "\n");
}

absl::Status SaveCheckpoint(const ShardView& view, Communicator* comm,
                            const std::string& dir, const std::string& tag,
                            const SaveOptions& options) {
  const ShardView v = SavedView(view, options);
  const std::string staging = StagingDir(dir, tag);
  // 1. Preconditions, and rank 0 prepares an empty staging directory.
  absl::Status s = CheckTagName(tag);
  if (s.ok() && v.micro_step != 0) {
    s = absl::FailedPreconditionError(absl::StrCat(
        "save: in the middle of gradient accumulation (micro-step ", v.micro_step,
        " of ", v.config ? v.config->gradient_accumulation_steps : 0,
        "); save after the step() that ends an accumulation"));
  }
  if (s.ok() && v.rank == 0) {
    s = MakeDirs(dir);
    if (s.ok()) s = RemoveTree(staging);
    if (s.ok()) s = MakeDirs(staging);
  }
  RETURN_IF_ERROR(Agree(comm, s));

  // 2. Every rank writes its file.
  Progress progress(options.progress, BytesOnRank(v));
  const std::string file = JoinPath(staging, RankFileName(v.rank));
  auto done = WriteRankFile(v, file, &progress);
  if (!done.ok()) {
    s = absl::Status(done.status().code(), absl::StrCat("save '", tag, "': writing ", file,
                                                        ": ", done.status().message()));
  }
  RETURN_IF_ERROR(Agree(comm, s));

  // 3. Rank 0 learns every file's size and index checksum, then publishes.
  Manifest m = ManifestFromView(v);
  m.frozen_excluded = options.exclude_frozen;
  for (int r = 0; r < v.world; ++r) {
    int64_t info[2] = {done->bytes, static_cast<int64_t>(done->index_xxh3)};
    if (v.world > 1) {
      ScopedCountingKind k(comm, CollectiveKind::kControl);
      RETURN_IF_ERROR(comm->Broadcast(info, sizeof(info), r));
    }
    FileRecord f;
    f.rank = r;
    f.file = RankFileName(r);
    f.bytes = info[0];
    f.index_xxh3 = static_cast<uint64_t>(info[1]);
    m.files.push_back(f);
  }
  for (const ParamView& p : v.params) {
    ParamRecord pr;
    pr.name = p.name;
    pr.shape = p.shape;
    pr.dtype = p.dtype;
    pr.trainable = p.trainable;
    pr.numel = p.numel;
    pr.slices = p.trainable ? p.slices : std::vector<RankSlice>{{0, 0, p.numel}};
    m.params.push_back(std::move(pr));
  }
  s = absl::OkStatus();
  if (v.rank == 0) s = PublishTag(dir, tag, staging, std::move(m));
  if (s.ok() && v.rank == 0 && options.keep_last > 0) {
    // The new tag is published: a failure here leaves it and `latest`
    // whole, so it is said, not returned.
    auto pruned = PruneTags(dir, options.keep_last, tag);
    if (!pruned.ok()) {
      std::fprintf(stderr, "zero: save '%s': keep_last %d: %s\n", tag.c_str(),
                   options.keep_last, std::string(pruned.status().message()).c_str());
    }
  }
  return Agree(comm, s);
}

}  // namespace ckpt
}  // namespace zero

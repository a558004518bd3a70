#include "core/ckpt/reshard.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/checkpoint_writer.h"
#include "core/ckpt/file_util.h"
#include "core/common/status_macros.h"
#include "core/partition/layout.h"

namespace zero {
namespace ckpt {

absl::Status ReshardCheckpoint(const std::string& dir, const std::string& tag,
                               const std::string& out_dir, int world,
                               const ProgressFn& progress_fn) {
  if (world < 1) {
    return absl::InvalidArgumentError(absl::StrCat("reshard: world size ", world, " < 1"));
  }
  ASSIGN_OR_RETURN(auto ck, Checkpoint::Open(dir, tag));
  Manifest m = ck->manifest();
  // The layout a `world`-rank engine would build (core/partition/layout.h).
  std::vector<LayoutParam> lps;
  std::vector<int> li_of(m.params.size(), -1);
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (!m.params[i].trainable) continue;
    li_of[i] = static_cast<int>(lps.size());
    lps.push_back({static_cast<int>(i), m.params[i].numel, m.dtype});
  }
  const int64_t sub_group = m.sub_group_size > 0 ? m.sub_group_size
                                                 : std::numeric_limits<int64_t>::max() / 4;
  Layout layout(lps, world, sub_group);
  std::vector<int> kinds = {kMaster};
  kinds.insert(kinds.end(), m.states.begin(), m.states.end());

  const std::string staging = StagingDir(out_dir, m.tag);
  RETURN_IF_ERROR(MakeDirs(out_dir));
  RETURN_IF_ERROR(RemoveTree(staging));
  RETURN_IF_ERROR(MakeDirs(staging));
  Manifest out = m;
  out.world_size = world;
  out.files.clear();
  for (size_t i = 0; i < m.params.size(); ++i) {
    ParamRecord& p = out.params[i];
    p.slices.clear();
    if (!p.trainable) {
      p.slices.push_back({0, 0, p.numel});
      continue;
    }
    for (int r = 0; r < world; ++r) {
      Slice s = layout.SliceOn(li_of[i], r);
      if (s.numel > 0) p.slices.push_back({r, s.param_offset, s.numel});
    }
  }
  int64_t total = 0;
  for (size_t i = 0; i < m.params.size(); ++i) {
    const int64_t nk = m.params[i].trainable ? static_cast<int64_t>(kinds.size()) : 1;
    for (const RankSlice& s : out.params[i].slices) {
      total += nk * ck->RangeBytes(m.params[i], s.offset, s.offset + s.numel);
    }
  }
  Progress progress(progress_fn, total);
  std::vector<float> buf;
  for (int r = 0; r < world; ++r) {
    ASSIGN_OR_RETURN(auto w, ShardFileWriter::Create(JoinPath(staging, RankFileName(r)), r,
                                                     world, nullptr));
    for (size_t i = 0; i < m.params.size(); ++i) {
      const ParamRecord& src = m.params[i];
      for (const RankSlice& s : out.params[i].slices) {
        if (s.rank != r) continue;
        buf.resize(static_cast<size_t>(s.numel));
        for (int k : kinds) {
          if (k != kMaster && !src.trainable) continue;
          RETURN_IF_ERROR(ck->ReadRange(src, k, s.offset, s.offset + s.numel, buf.data(), &progress));
          RETURN_IF_ERROR(w->Add(src.name, k, s.offset, s.numel, buf.data()));
        }
      }
    }
    ASSIGN_OR_RETURN(ShardFileWriter::Done d, w->Finish());
    out.files.push_back({r, RankFileName(r), d.bytes, d.index_xxh3});
  }
  return PublishTag(out_dir, m.tag, staging, std::move(out));
}

}  // namespace ckpt
}  // namespace zero

#include "core/ckpt/retention.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <tuple>

#include "core/ckpt/file_util.h"
#include "core/ckpt/manifest.h"
#include "core/common/io_fault.h"
#include "core/common/status_macros.h"

namespace zero {
namespace ckpt {
namespace {

struct TagAge {
  int64_t global_step = 0;
  int64_t mtime_ns = 0;
  std::string tag;
  bool operator<(const TagAge& o) const {
    return std::tie(global_step, mtime_ns, tag) < std::tie(o.global_step, o.mtime_ns, o.tag);
  }
};

}  // namespace

absl::StatusOr<std::vector<std::string>> PruneTags(const std::string& dir, int keep_last,
                                                   const std::string& published) {
  std::vector<std::string> deleted;
  if (keep_last <= 0) return deleted;
  std::vector<TagAge> tags;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoError("keep_last: listing", dir, errno);
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.empty() || name[0] == '.' || name == kLatestName) continue;
    names.push_back(name);
  }
  ::closedir(d);
  for (const std::string& name : names) {
    const std::string manifest = JoinPath(JoinPath(dir, name), kManifestName);
    struct stat st;
    if (::stat(manifest.c_str(), &st) != 0) continue;  // not a finished tag
    auto text = ReadFile(manifest);
    if (!text.ok()) continue;
    auto m = ParseManifest(*text, manifest);
    if (!m.ok()) continue;  // not ours to judge: left alone
    tags.push_back({m->global_step,
                    static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec,
                    name});
  }
  std::sort(tags.begin(), tags.end());
  auto latest = ResolveTag(dir, "");
  const std::string current = latest.ok() ? *latest : published;
  int keep = keep_last;
  for (auto it = tags.rbegin(); it != tags.rend(); ++it) {
    if (keep > 0 || it->tag == published || it->tag == current) {
      --keep;
      continue;
    }
    deleted.insert(deleted.begin(), it->tag);
  }
  for (const std::string& tag : deleted) {
    // Renamed out of the tags first (one atomic step), so a crash while
    // removing leaves no half-deleted tag behind, only a hidden directory.
    const std::string doomed = JoinPath(dir, "." + tag + ".deleting");
    RETURN_IF_ERROR(RemoveTree(doomed));
    if (io::Rename(JoinPath(dir, tag), doomed) != 0) {
      return ErrnoError("keep_last: renaming", JoinPath(dir, tag), errno);
    }
    RETURN_IF_ERROR(RemoveTree(doomed));
  }
  return deleted;
}

}  // namespace ckpt
}  // namespace zero

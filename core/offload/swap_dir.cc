#include "core/offload/swap_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/common/errno_status.h"

namespace zero {
namespace offload {
namespace {

constexpr char kPrefix[] = "zero_r";
constexpr char kLockSuffix[] = ".lock";

std::vector<std::string> List(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) out.push_back(e->d_name);
  ::closedir(d);
  return out;
}

// Removes the files of every claim under `dir` whose lock nobody holds.
std::string RemoveLeftovers(const std::string& dir) {
  const std::vector<std::string> names = List(dir);
  int64_t files = 0, bytes = 0;
  std::vector<std::string> stems;
  for (const std::string& n : names) {
    if (!absl::StartsWith(n, kPrefix) || !absl::EndsWith(n, kLockSuffix)) continue;
    const std::string lock = absl::StrCat(dir, "/", n);
    const int fd = ::open(lock.c_str(), O_RDWR | O_CLOEXEC);
    if (fd < 0) continue;
    // Held: a live engine (here or in another process). Not held: its
    // process died without destroying the engine.
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      continue;
    }
    const std::string stem = n.substr(0, n.size() - std::string(kLockSuffix).size());
    for (const std::string& f : names) {
      if (!absl::StartsWith(f, stem + "_")) continue;
      const std::string path = absl::StrCat(dir, "/", f);
      struct stat st;
      if (::stat(path.c_str(), &st) == 0) bytes += st.st_size;
      if (::unlink(path.c_str()) == 0) ++files;
    }
    ::unlink(lock.c_str());
    ::close(fd);
    stems.push_back(stem);
  }
  if (stems.empty()) return "";
  return absl::StrCat("removed ", files, " leftover swap file(s), ", bytes,
                      " bytes, of engine(s) whose process died without destroying them (",
                      absl::StrJoin(stems, ", "), ")");
}

}  // namespace

int64_t SwapDir::FreeBytes(const std::string& dir) {
  struct statvfs v;
  if (::statvfs(dir.c_str(), &v) != 0) return -1;
  return static_cast<int64_t>(v.f_bavail) * static_cast<int64_t>(v.f_frsize);
}

absl::StatusOr<std::unique_ptr<SwapDir>> SwapDir::Claim(const std::string& dir,
                                                        const std::string& key, int rank,
                                                        int64_t bytes) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return absl::NotFoundError(absl::StrCat(key, " '", dir, "' does not exist"));
    return ErrnoToStatus(err, absl::StrCat(key, " '", dir, "'"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(key, " '", dir, "' is not a directory"));
  }
  std::unique_ptr<SwapDir> s(new SwapDir());
  s->dir_ = dir;
  s->note_ = RemoveLeftovers(dir);
  static std::atomic<int> next{0};
  s->stem_ = absl::StrFormat("%s%d_p%d_%d", kPrefix, rank, static_cast<int>(::getpid()), next++);
  // Locked under a name the scan ignores, then renamed: a scan never sees
  // an unheld lock of a live claim.
  const std::string tmp = absl::StrCat(dir, "/.", s->stem_, ".tmp");
  s->lock_fd_ = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (s->lock_fd_ < 0) {
    return ErrnoToStatus(errno, absl::StrCat(key, ": cannot create a lock file in '", dir, "'"));
  }
  const std::string owner = absl::StrCat("pid ", ::getpid(), " rank ", rank, "\n");
  (void)!::write(s->lock_fd_, owner.data(), owner.size());
  if (::flock(s->lock_fd_, LOCK_EX) != 0 ||
      ::rename(tmp.c_str(), absl::StrCat(dir, "/", s->stem_, kLockSuffix).c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoToStatus(err, absl::StrCat(key, ": cannot lock in '", dir, "'"));
  }
  s->lock_path_ = absl::StrCat(dir, "/", s->stem_, kLockSuffix);
  if (bytes > 0) {
    const int64_t avail = FreeBytes(dir);
    if (avail >= 0 && avail < bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          key, " '", dir, "': rank ", rank, " needs ", bytes, " bytes for its NVMe state, ",
          avail, " bytes are free"));
    }
  }
  return s;
}

SwapDir::~SwapDir() {
  if (!lock_path_.empty()) ::unlink(lock_path_.c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

std::string SwapDir::Name(const std::string& name) const {
  return absl::StrCat(stem_, "_", name);
}

std::string SwapDir::Path(const std::string& name) const {
  return absl::StrCat(dir_, "/", Name(name));
}

}  // namespace offload
}  // namespace zero

#include "core/ckpt/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/errno_status.h"
#include "core/common/io_fault.h"

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

namespace zero {
namespace ckpt {

absl::Status ErrnoError(const std::string& what, const std::string& path, int err) {
  return ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

std::string JoinPath(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return absl::StrCat(a, "/", b);
}

namespace {

std::string Parent(const std::string& path) {
  size_t k = path.find_last_of('/');
  if (k == std::string::npos) return ".";
  if (k == 0) return "/";
  return path.substr(0, k);
}

}  // namespace

absl::Status FsyncDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return ErrnoError("open directory", path, errno);
  int rc = io::Fsync(fd, path);
  int err = errno;
  ::close(fd);
  // Some file systems cannot fsync a directory (EINVAL); that is not a loss.
  if (rc != 0 && err != EINVAL) return ErrnoError("fsync directory", path, err);
  return absl::OkStatus();
}

absl::Status WriteFileAtomic(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", tmp, errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = io::Write(fd, data.data() + done, data.size() - done, tmp);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoError("write", tmp, err);
    }
    done += static_cast<size_t>(n);
  }
  if (io::Fsync(fd, tmp) != 0) {
    int err = errno;
    ::close(fd);
    return ErrnoError("fsync", tmp, err);
  }
  if (::close(fd) != 0) return ErrnoError("close", tmp, errno);
  if (io::Rename(tmp, path) != 0) return ErrnoError("rename to", path, errno);
  return FsyncDir(Parent(path));
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path, errno);
  std::string out;
  char buf[1 << 16];
  while (true) {
    ssize_t n = io::Read(fd, buf, sizeof(buf), path);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return ErrnoError("read", path, err);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::StatusOr<int64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return ErrnoError("stat", path, errno);
  return static_cast<int64_t>(st.st_size);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

absl::Status MakeDirs(const std::string& path) {
  if (path.empty() || Exists(path)) return absl::OkStatus();
  const std::string parent = Parent(path);
  if (parent != path) {
    absl::Status s = MakeDirs(parent);
    if (!s.ok()) return s;
  }
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoError("mkdir", path, errno);
  }
  return absl::OkStatus();
}

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoError("stat", path, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    DIR* d = ::opendir(path.c_str());
    if (d == nullptr) return ErrnoError("opendir", path, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    for (const std::string& n : names) {
      absl::Status s = RemoveTree(JoinPath(path, n));
      if (!s.ok()) return s;
    }
    if (::rmdir(path.c_str()) != 0) return ErrnoError("rmdir", path, errno);
    return absl::OkStatus();
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("unlink", path, errno);
  return absl::OkStatus();
}

absl::Status CommitDir(const std::string& staging, const std::string& target) {
  if (Exists(target)) {
    if (io::RenameExchange(staging, target) != 0) {
      return ErrnoError(absl::StrCat("swap ", staging, " with"), target, errno);
    }
    absl::Status s = FsyncDir(Parent(target));
    if (!s.ok()) return s;
    return RemoveTree(staging);  // now holds the old contents
  }
  if (io::Rename(staging, target) != 0) {
    return ErrnoError(absl::StrCat("rename ", staging, " to"), target, errno);
  }
  return FsyncDir(Parent(target));
}

}  // namespace ckpt
}  // namespace zero

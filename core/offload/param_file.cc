#include "core/offload/param_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/errno_status.h"
#include "core/common/io_fault.h"

namespace zero {
namespace offload {
namespace {

constexpr int64_t kAlign = 4096;

// The most one O_DIRECT transfer of a param file moves (a multiple of kAlign).
constexpr int64_t kBounceBytes = 8 << 20;

// This thread's aligned bounce buffer, grown to `bytes` (<= kBounceBytes);
// one per thread that does param-file IO (the caller and the comm stream),
// kept for the thread's life: host memory stays bounded by the thread
// count, not by the model. Null when out of memory.
char* ThreadBounce(int64_t bytes) {
  struct Buf {
    ~Buf() { std::free(p); }
    char* p = nullptr;
    int64_t n = 0;
  };
  thread_local Buf buf;
  if (buf.n < bytes) {
    std::free(buf.p);
    buf.p = static_cast<char*>(std::aligned_alloc(kAlign, bytes));
    buf.n = buf.p == nullptr ? 0 : bytes;
  }
  return buf.p;
}

struct Bounce {
  explicit Bounce(int64_t n) : p(static_cast<char*>(std::aligned_alloc(kAlign, n))) {}
  ~Bounce() { std::free(p); }
  char* p;
};

// Full transfer or an error (a read past the end is a truncated file).
absl::Status Transfer(int fd, char* buf, int64_t len, int64_t off, bool write,
                      const std::string& path) {
  while (len > 0) {
    const ssize_t r = write ? io::Pwrite(fd, buf, len, off, path) : io::Pread(fd, buf, len, off, path);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      return ErrnoToStatus(errno, absl::StrCat(write ? "write to '" : "read from '", path,
                                             "' at offset ", off, " failed"));
    }
    if (r == 0) {
      return write ? absl::ResourceExhaustedError(absl::StrCat("write to '", path, "' made no progress"))
                   : absl::DataLossError(absl::StrCat(
                         "read from '", path, "' at offset ", off,
                         ": unexpected end of file (truncated outside the engine)"));
    }
    buf += r;
    off += r;
    len -= r;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParamFile>> ParamFile::Create(const std::string& dir,
                                                             const std::string& name,
                                                             int64_t bytes,
                                                             bool try_direct, int slots) {
  const std::string key = "offload_param.nvme_path";
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(key, " '", dir, "' does not exist"));
    return ErrnoToStatus(errno, absl::StrCat(key, " '", dir, "'"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(key, " '", dir, "' is not a directory"));
  }
  std::unique_ptr<ParamFile> f(new ParamFile());
  f->path_ = absl::StrCat(dir, "/", name);
  f->slot_ = std::max<int64_t>(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  f->slots_ = slots == 2 ? 2 : 1;
  const int64_t size = f->slots_ * f->slot_;
  const int base = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
  f->direct_ = try_direct;
  f->fd_ = ::open(f->path_.c_str(), base | (try_direct ? O_DIRECT : 0), 0600);
  if (f->fd_ < 0 && errno == EINVAL) {
    f->direct_ = false;
    f->fd_ = ::open(f->path_.c_str(), base, 0600);
  }
  if (f->fd_ < 0) {
    const int err = errno;
    f->path_.clear();  // not ours to unlink
    return ErrnoToStatus(err, absl::StrCat(key, ": cannot create '", dir, "/", name, "'"));
  }
  int rc = io::Fallocate(f->fd_, size, f->path_);
  if (rc == EOPNOTSUPP || rc == EINVAL) rc = ::ftruncate(f->fd_, size) == 0 ? 0 : errno;
  if (rc != 0) {
    struct statvfs v;
    const int64_t avail = ::statvfs(dir.c_str(), &v) == 0
        ? static_cast<int64_t>(v.f_bavail) * static_cast<int64_t>(v.f_frsize) : -1;
    return ErrnoToStatus(rc, absl::StrCat(key, ": cannot reserve ", size, " bytes for '",
                                        f->path_, "' (", avail, " bytes free)"));
  }
  if (f->direct_) {
    Bounce b(kAlign);
    std::memset(b.p, 0, kAlign);
    if (::pwrite(f->fd_, b.p, kAlign, 0) < 0 && errno == EINVAL) {
      f->direct_ = false;
      ::close(f->fd_);
      f->fd_ = ::open(f->path_.c_str(), O_RDWR | O_CLOEXEC);
      if (f->fd_ < 0) return ErrnoToStatus(errno, absl::StrCat(key, ": cannot reopen '", f->path_, "'"));
    }
  }
  return f;
}

ParamFile::~ParamFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!path_.empty()) ::unlink(path_.c_str());
}

absl::Status ParamFile::CheckSize() const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) return ErrnoToStatus(errno, absl::StrCat("stat '", path_, "'"));
  if (st.st_size != slots_ * slot_) {
    return absl::DataLossError(absl::StrCat(
        "nvme offload: '", path_, "' is ", st.st_size, " bytes, expected ", slots_ * slot_,
        " (truncated or modified outside the engine); the working params are lost"));
  }
  return absl::OkStatus();
}

absl::Status ParamFile::Io(int slot, int64_t offset, int64_t len, char* data, bool write) {
  if (len <= 0) return absl::OkStatus();
  std::lock_guard<std::mutex> l(mu_);
  absl::Status s = CheckSize();
  if (!s.ok()) return s;
  return Move(slot, offset, len, data, write);
}

absl::Status ParamFile::Move(int slot, int64_t offset, int64_t len, char* data, bool write) {
  absl::Status s;
  const int64_t base = slot * slot_;
  if (!direct_) return Transfer(fd_, data, len, base + offset, write, path_);
  // The aligned superset [a, b) moves through this thread's bounce buffer,
  // at most kBounceBytes at a time. One bounce the size of the transfer (a
  // whole 8192² bf16 param, 128 MiB) was allocated, faulted in while the
  // kernel pinned it, and unmapped on every gather: half the gather's time
  // (the ZeRO-Infinity profile, bench/README.md); sequential 8 MiB
  // transfers run at the raw rate.
  // A write reads the edge blocks first so the bytes around
  // [offset, offset+len) keep their values.
  const int64_t a = offset / kAlign * kAlign;
  const int64_t b = (offset + len + kAlign - 1) / kAlign * kAlign;
  // A read whose destination (a gather's own slice, the update's gradient
  // pieces, the norm pass's groups) or a write whose source (the update's
  // working-copy buffers, the gradient files' accumulate buffer) has the
  // file offset's alignment moves the aligned middle straight to or from
  // it, in one call: the kernel keeps the whole transfer in flight instead
  // of 8 MiB at a time, and nothing is copied. The edges still go through
  // the bounce (a write's read-modify-written, as below).
  const int64_t m0 = (offset + kAlign - 1) / kAlign * kAlign;
  const int64_t m1 = (offset + len) / kAlign * kAlign;
  if (m1 > m0 &&
      reinterpret_cast<uintptr_t>(data) % kAlign == static_cast<uintptr_t>(offset % kAlign)) {
    if (offset < m0) {
      s = Move(slot, offset, m0 - offset, data, write);  // the head, bounced (below)
      if (!s.ok()) return s;
    }
    s = Transfer(fd_, data + (m0 - offset), m1 - m0, base + m0, write, path_);
    if (!s.ok()) return s;
    if (m1 < offset + len) s = Move(slot, m1, offset + len - m1, data + (m1 - offset), write);
    return s;
  }
  char* bounce = ThreadBounce(std::min(b - a, kBounceBytes));
  if (bounce == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("nvme offload: no memory for the bounce buffer of '", path_, "'"));
  }
  for (int64_t ca = a; ca < b; ca += kBounceBytes) {
    const int64_t cb = std::min(b, ca + kBounceBytes);
    const int64_t lo = std::max(ca, offset), hi = std::min(cb, offset + len);
    char* user = data + (lo - offset);
    if (!write) {
      s = Transfer(fd_, bounce, cb - ca, base + ca, false, path_);
      if (!s.ok()) return s;
      std::memcpy(user, bounce + (lo - ca), hi - lo);
      continue;
    }
    if (lo != ca) s = Transfer(fd_, bounce, kAlign, base + ca, false, path_);
    if (s.ok() && hi != cb && !(lo != ca && cb - ca == kAlign)) {
      s = Transfer(fd_, bounce + (cb - ca - kAlign), kAlign, base + cb - kAlign, false, path_);
    }
    if (!s.ok()) return s;
    std::memcpy(bounce + (lo - ca), user, hi - lo);
    s = Transfer(fd_, bounce, cb - ca, base + ca, true, path_);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ParamFile::Read(int64_t offset, int64_t len, void* out) {
  return Io(committed_, offset, len, static_cast<char*>(out), false);
}

absl::Status ParamFile::Write(int64_t offset, int64_t len, const void* in) {
  return Io(slots_ == 2 ? committed_ ^ 1 : committed_, offset, len,
            const_cast<char*>(static_cast<const char*>(in)), true);
}

absl::Status ParamFile::WriteCommitted(int64_t offset, int64_t len, const void* in) {
  return Io(committed_, offset, len, const_cast<char*>(static_cast<const char*>(in)), true);
}

}  // namespace offload
}  // namespace zero

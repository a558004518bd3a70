#include "core/common/io_fault.h"

#include <fcntl.h>
#include <stdio.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace zero {
namespace io {
namespace {

enum class Op { kRead, kWrite, kFsync, kRename, kAlloc, kAny };
enum class Action { kErrno, kShort, kCrash };

struct Entry {
  Op op;
  int64_t nth = 1;
  bool onward = false;
  Action action = Action::kErrno;
  int err = 0;
  std::string substring;
  int64_t seen = 0;  // matching calls so far
};

std::mutex& Mu() {
  static std::mutex* mu = new std::mutex;
  return *mu;
}
std::vector<Entry>& Entries() {
  static std::vector<Entry>* e = new std::vector<Entry>;
  return *e;
}
std::atomic<bool> g_armed{false};
std::atomic<int64_t> g_injected{0};
std::once_flag g_env_once;

absl::Status Parse(const std::string& spec, std::vector<Entry>* out) {
  for (absl::string_view item : absl::StrSplit(spec, ';', absl::SkipWhitespace())) {
    std::vector<std::string> f = absl::StrSplit(item, absl::MaxSplits(':', 3));
    auto bad = [&](const std::string& why) {
      return absl::InvalidArgumentError(
          absl::StrCat(kIoFaultEnv, " entry '", item, "': ", why,
                       " (OP:N[+]:ACTION[:SUBSTRING], OP read|write|fsync|rename|alloc|any, "
                       "ACTION EIO|ENOSPC|EDQUOT|EROFS|short|crash)"));
    };
    if (f.size() < 3) return bad("needs at least three fields");
    Entry e;
    if (f[0] == "read") e.op = Op::kRead;
    else if (f[0] == "write") e.op = Op::kWrite;
    else if (f[0] == "fsync") e.op = Op::kFsync;
    else if (f[0] == "rename") e.op = Op::kRename;
    else if (f[0] == "alloc") e.op = Op::kAlloc;
    else if (f[0] == "any") e.op = Op::kAny;
    else return bad("unknown OP");
    std::string n = f[1];
    if (!n.empty() && n.back() == '+') {
      e.onward = true;
      n.pop_back();
    }
    if (!absl::SimpleAtoi(n, &e.nth) || e.nth < 1) return bad("N must be a count from 1");
    if (f[2] == "EIO") e.err = EIO;
    else if (f[2] == "ENOSPC") e.err = ENOSPC;
    else if (f[2] == "EDQUOT") e.err = EDQUOT;
    else if (f[2] == "EROFS") e.err = EROFS;
    else if (f[2] == "short") e.action = Action::kShort;
    else if (f[2] == "crash") e.action = Action::kCrash;
    else return bad("unknown ACTION");
    if (f.size() == 4) e.substring = f[3];
    out->push_back(e);
  }
  return absl::OkStatus();
}

void ArmFromEnv() {
  std::call_once(g_env_once, [] {
    const char* v = std::getenv(kIoFaultEnv);
    if (v == nullptr || *v == '\0') return;
    std::vector<Entry> entries;
    absl::Status s = Parse(v, &entries);
    if (!s.ok()) {
      std::fprintf(stderr, "[zero] %s\n", std::string(s.message()).c_str());
      std::abort();
    }
    std::lock_guard<std::mutex> l(Mu());
    Entries() = std::move(entries);
    g_armed = !Entries().empty();
  });
}

bool Matches(const Entry& e, Op op) { return e.op == Op::kAny || e.op == op; }

// The first armed entry this call triggers (counting the call for every
// entry it matches), or null.
const Entry* Hit(Op op, const std::string& path) {
  ArmFromEnv();
  if (!g_armed.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> l(Mu());
  const Entry* hit = nullptr;
  for (Entry& e : Entries()) {
    if (!Matches(e, op)) continue;
    if (!e.substring.empty() && path.find(e.substring) == std::string::npos) continue;
    ++e.seen;
    if (hit == nullptr && (e.seen == e.nth || (e.onward && e.seen > e.nth))) hit = &e;
  }
  return hit;
}

void Crash(const std::string& path) {
  std::fprintf(stderr, "[zero] %s: crashing before an IO on '%s'\n", kIoFaultEnv, path.c_str());
  std::fflush(stderr);
  ::kill(::getpid(), SIGKILL);
  ::_exit(137);
}

size_t ShortLen(int fd, size_t n) {
  size_t s = n / 2;
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0 && (fl & O_DIRECT)) s = s / 4096 * 4096;
  return s;  // 0: this transfer cannot be made short
}

// For a call of `op`: 0 to run it whole; an errno to fail it; -1 to run it
// short (transfers only).
int Check(Op op, const std::string& path) {
  const Entry* e = Hit(op, path);
  if (e == nullptr) return 0;
  if (e->action == Action::kCrash) Crash(path);
  if (e->action == Action::kShort) return -1;
  ++g_injected;
  return e->err;
}

ssize_t Transfer(Op op, int fd, size_t n, const std::string& path,
                 const std::function<ssize_t(size_t)>& call) {
  const int c = Check(op, path);
  if (c > 0) {
    errno = c;
    return -1;
  }
  size_t len = n;
  if (c < 0) {
    const size_t s = ShortLen(fd, n);
    if (s > 0 && s < n) {
      len = s;
      ++g_injected;
    }
  }
  return call(len);
}

}  // namespace

absl::Status SetIoFaults(const std::string& spec) {
  ArmFromEnv();
  std::vector<Entry> entries;
  absl::Status s = Parse(spec, &entries);
  if (!s.ok()) return s;
  std::lock_guard<std::mutex> l(Mu());
  Entries() = std::move(entries);
  g_armed = !Entries().empty();
  return absl::OkStatus();
}

int64_t IoFaultsInjected() { return g_injected.load(); }

int64_t IoFaultMatches() {
  std::lock_guard<std::mutex> l(Mu());
  return Entries().empty() ? 0 : Entries()[0].seen;
}

ssize_t Pread(int fd, void* buf, size_t n, off_t off, const std::string& path) {
  return Transfer(Op::kRead, fd, n, path, [&](size_t len) { return ::pread(fd, buf, len, off); });
}

ssize_t Pwrite(int fd, const void* buf, size_t n, off_t off, const std::string& path) {
  return Transfer(Op::kWrite, fd, n, path,
                  [&](size_t len) { return ::pwrite(fd, buf, len, off); });
}

ssize_t Read(int fd, void* buf, size_t n, const std::string& path) {
  return Transfer(Op::kRead, fd, n, path, [&](size_t len) { return ::read(fd, buf, len); });
}

ssize_t Write(int fd, const void* buf, size_t n, const std::string& path) {
  return Transfer(Op::kWrite, fd, n, path, [&](size_t len) { return ::write(fd, buf, len); });
}

int Fsync(int fd, const std::string& path) {
  const int c = Check(Op::kFsync, path);
  if (c > 0) {
    errno = c;
    return -1;
  }
  return ::fsync(fd);
}

int Rename(const std::string& from, const std::string& to) {
  const int c = Check(Op::kRename, to);
  if (c > 0) {
    errno = c;
    return -1;
  }
  return ::rename(from.c_str(), to.c_str());
}

int RenameExchange(const std::string& from, const std::string& to) {
  const int c = Check(Op::kRename, to);
  if (c > 0) {
    errno = c;
    return -1;
  }
  return ::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_EXCHANGE);
}

int Fallocate(int fd, off_t len, const std::string& path) {
  const int c = Check(Op::kAlloc, path);
  if (c > 0) return c;
  return ::posix_fallocate(fd, 0, len);
}

Decision Decide(bool write, int fd, size_t n, const std::string& path) {
  Decision d;
  d.n_out = n;
  const int c = Check(write ? Op::kWrite : Op::kRead, path);
  if (c > 0) {
    d.err = c;
  } else if (c < 0) {
    const size_t s = ShortLen(fd, n);
    if (s > 0 && s < n) {
      d.n_out = s;
      ++g_injected;
    }
  }
  return d;
}

}  // namespace io
}  // namespace zero

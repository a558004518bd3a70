#include "core/offload/nvme_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/common/errno_status.h"
#include "core/common/io_fault.h"
#include "core/common/status_macros.h"

namespace zero {
namespace offload {
namespace {

constexpr int64_t kAlign = 4096;

int64_t RoundUp(int64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

}  // namespace

int64_t NvmeTier::array_bytes(int a, int64_t n) const {
  return options_.array_bytes ? options_.array_bytes(a, n) : n * 4;
}

int64_t NvmeTier::region_offset(const Chunk& c, int a) const {
  int64_t off = 0;
  for (int b = 0; b < a; ++b) off += RoundUp(array_bytes(b, c.len));
  return off;
}

void NvmeTier::ArraysIn(const Chunk& c, char* buf, float** arrays) const {
  for (int a = 0; a < options_.num_arrays; ++a) {
    arrays[a] = reinterpret_cast<float*>(buf + region_offset(c, a));
  }
}

absl::StatusOr<std::unique_ptr<NvmeTier>> NvmeTier::Create(
    const NvmeTierOptions& options, const std::vector<int64_t>& group_lens) {
  const std::string& dir = options.dir;
  const std::string& key = options.key;
  std::unique_ptr<NvmeTier> t(new NvmeTier(options));
  t->options_.num_arrays = std::min(3, std::max(1, options.num_arrays));
  t->slots_ = options.atomic_step ? 2 : 1;
  const int64_t ce = std::max<int64_t>(1, options.chunk_elems);
  int64_t total = 0;
  for (size_t g = 0; g < group_lens.size(); ++g) {
    int64_t off = 0;
    for (int64_t b = 0; b < group_lens[g]; b += ce) {
      Chunk c{static_cast<int>(g), b, std::min(ce, group_lens[g] - b), off};
      off += t->chunk_bytes(c);
      t->chunks_.push_back(c);
    }
    t->slot_bytes_.push_back(off);
    total += t->slots_ * off;
  }
  ASSIGN_OR_RETURN(t->claim_, SwapDir::Claim(dir, key, options.rank, total));
  t->stats_.note = t->claim_->note();
  // Files: O_DIRECT where the file system takes it (tmpfs and overlay may
  // refuse with EINVAL, at open or at the first transfer); buffered otherwise.
  bool direct = options.try_direct;
  auto add_note = [&](const std::string& n) {
    t->stats_.note = t->stats_.note.empty() ? n : absl::StrCat(t->stats_.note, "; ", n);
  };
  for (size_t g = 0; g < group_lens.size(); ++g) {
    const std::string path = t->claim_->Path(absl::StrCat(options.tag, "_g", g, ".swp"));
    const int base = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = ::open(path.c_str(), base | (direct ? O_DIRECT : 0), 0600);
    if (fd < 0 && direct && errno == EINVAL) {
      direct = false;
      add_note(absl::StrCat("O_DIRECT refused under '", dir, "' (EINVAL at open): buffered IO"));
      fd = ::open(path.c_str(), base, 0600);
    }
    if (fd < 0) {
      return ErrnoToStatus(errno, absl::StrCat(key, ": cannot create '", path, "'"));
    }
    t->fds_.push_back(fd);
    t->paths_.push_back(path);
    const int64_t size = t->slots_ * t->slot_bytes_[g];
    if (size > 0) {
      // Blocks reserved now (no holes): a full disk fails here, not mid-step.
      int rc = io::Fallocate(fd, size, path);
      if (rc == EOPNOTSUPP || rc == EINVAL) {
        rc = ::ftruncate(fd, size) == 0 ? 0 : errno;
        if (rc == 0) add_note("fallocate unsupported: sparse files (a full disk fails mid-step)");
      }
      if (rc != 0) {
        return ErrnoToStatus(rc, absl::StrCat(key, ": cannot reserve ", size, " bytes for '", path,
                                              "' (rank ", options.rank, " needs ", total,
                                              " bytes in all; ", SwapDir::FreeBytes(dir),
                                              " bytes free)"));
      }
    }
    t->stats_.file_bytes += size;
    if (options.progress && !options.progress("nvme preallocate", t->stats_.file_bytes, total)) {
      return absl::CancelledError(absl::StrCat(key, ": preallocation cancelled by the progress "
                                               "callback after ", t->stats_.file_bytes, " of ",
                                               total, " bytes (rank ", options.rank, ")"));
    }
  }
  t->buffer_bytes_ = kAlign;
  for (const Chunk& c : t->chunks_) t->buffer_bytes_ = std::max(t->buffer_bytes_, t->chunk_bytes(c));
  const int nbuf = std::max<int>(
      1, std::min<int64_t>(std::max(2, options.buffer_count), static_cast<int64_t>(t->chunks_.size())));
  for (int i = 0; i < nbuf; ++i) {
    void* p = nullptr;
    char* aligned = nullptr;
    if (options.alloc_host) {
      absl::StatusOr<void*> h = options.alloc_host(static_cast<size_t>(t->buffer_bytes_ + kAlign));
      if (!h.ok()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "nvme offload: cannot allocate a ", t->buffer_bytes_, "-byte host buffer: ",
            h.status().message()));
      }
      p = *h;
      const uintptr_t a = reinterpret_cast<uintptr_t>(p);
      aligned = reinterpret_cast<char*>((a + kAlign - 1) / kAlign * kAlign);
    } else {
      p = std::aligned_alloc(kAlign, static_cast<size_t>(t->buffer_bytes_));
      aligned = static_cast<char*>(p);
    }
    if (p == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "nvme offload: cannot allocate a ", t->buffer_bytes_, "-byte host buffer"));
    }
    t->raw_buffers_.push_back(p);
    t->buffers_.push_back(aligned);
  }
  t->stats_.host_bytes = t->stats_.host_high_water = nbuf * t->buffer_bytes_;
  if (direct && !t->fds_.empty()) {
    // Probe one aligned transfer: some file systems accept O_DIRECT at open
    // and refuse the IO.
    std::memset(t->buffers_[0], 0, kAlign);
    if (::pwrite(t->fds_[0], t->buffers_[0], kAlign, 0) < 0 && errno == EINVAL) {
      direct = false;
      add_note(absl::StrCat("O_DIRECT refused under '", dir, "' (EINVAL at IO): buffered IO"));
      for (size_t g = 0; g < t->fds_.size(); ++g) {
        ::close(t->fds_[g]);
        t->fds_[g] = ::open(t->paths_[g].c_str(), O_RDWR | O_CLOEXEC);
        if (t->fds_[g] < 0) {
          return ErrnoToStatus(errno, absl::StrCat(key, ": cannot reopen '", t->paths_[g], "'"));
        }
      }
    }
  }
  t->stats_.direct_io = direct;
  std::string aio_note;
  t->aio_ = Aio::Create(options.aio, &aio_note);
  t->stats_.uring = t->aio_->uring();
  if (!aio_note.empty()) {
    t->stats_.note = t->stats_.note.empty() ? aio_note : absl::StrCat(t->stats_.note, "; ", aio_note);
  }
  return t;
}

NvmeTier::~NvmeTier() {
  aio_.reset();  // waits for IO in flight into the buffers
  for (int fd : fds_) ::close(fd);
  for (const std::string& p : paths_) ::unlink(p.c_str());
  for (void* b : raw_buffers_) {
    if (options_.free_host) {
      options_.free_host(b);
    } else {
      std::free(b);
    }
  }
  claim_.reset();  // the lock file last
}

NvmeTierStats NvmeTier::stats() const { return stats_; }

absl::Status NvmeTier::CheckSizes() const {
  if (!damaged_.ok()) return damaged_;
  for (size_t g = 0; g < fds_.size(); ++g) {
    struct stat st;
    if (::fstat(fds_[g], &st) != 0) {
      return ErrnoToStatus(errno, absl::StrCat("nvme offload: stat '", paths_[g], "'"));
    }
    if (st.st_size != slots_ * slot_bytes_[g]) {
      return absl::DataLossError(absl::StrCat(
          "nvme offload: '", paths_[g], "' is ", st.st_size, " bytes, expected ",
          slots_ * slot_bytes_[g], " (truncated or modified outside the engine); "
          "the optimizer state is lost"));
    }
    if (st.st_nlink == 0) {
      return absl::DataLossError(absl::StrCat(
          "nvme offload: '", paths_[g], "' was deleted outside the engine"));
    }
  }
  return absl::OkStatus();
}

Aio::Ticket NvmeTier::Io(const Chunk& c, int slot, char* buf, bool write) {
  const int64_t off = slot * slot_bytes_[c.group] + c.file_offset;
  const std::string& what = paths_[c.group];
  const size_t n = static_cast<size_t>(chunk_bytes(c));
  return write ? aio_->Write(fds_[c.group], buf, n, off, what)
               : aio_->Read(fds_[c.group], buf, n, off, what);
}

absl::Status NvmeTier::Initialize(const ChunkFn& fn) {
  const size_t B = buffers_.size();
  std::vector<Aio::Ticket> wr(chunks_.size(), 0);
  absl::Status first;
  int64_t total = 0, done = 0;
  for (const Chunk& c : chunks_) total += chunk_bytes(c);
  // Chunk j's write has completed: report it (a cancel stops the loop).
  auto written = [&](size_t j) {
    first.Update(aio_->Wait(wr[j]));
    wr[j] = 0;
    done += chunk_bytes(chunks_[j]);
    if (first.ok() && options_.progress && !options_.progress("nvme initialize", done, total)) {
      first = absl::CancelledError(absl::StrCat(
          options_.key, ": first write cancelled by the progress callback after ", done, " of ",
          total, " bytes (rank ", options_.rank, ")"));
    }
  };
  for (size_t k = 0; k < chunks_.size() && first.ok(); ++k) {
    if (k >= B) {
      written(k - B);
      if (!first.ok()) break;
    }
    const Chunk& c = chunks_[k];
    char* buf = buffers_[k % B];
    std::memset(buf, 0, static_cast<size_t>(chunk_bytes(c)));
    float* arrays[3];
    ArraysIn(c, buf, arrays);
    first.Update(fn(c, arrays));
    if (!first.ok()) break;
    wr[k] = Io(c, committed_, buf, true);
    stats_.bytes_written += chunk_bytes(c);
  }
  for (size_t j = 0; j < wr.size(); ++j) {
    if (wr[j]) written(j);
  }
  return first;
}

NvmeTier::Next NvmeTier::PeekNext() {
  Next next;
  const size_t j = update_k_ + 1;
  if (update_rd_ == nullptr || j >= chunks_.size() || (*update_rd_)[j] == 0) return next;
  // Read ahead keeps chunk k+1's read issued while fn(k) runs (ahead >= 1).
  peeked_ = j;
  peek_status_ = aio_->Wait((*update_rd_)[j]);
  (*update_rd_)[j] = 0;
  if (!peek_status_.ok()) return next;
  const Chunk& c = chunks_[j];
  char* buf = buffers_[j % buffers_.size()];
  next.chunk = &c;
  ArraysIn(c, buf, next.arrays);
  return next;
}

absl::Status NvmeTier::Update(
    const ChunkFn& fn, const std::function<absl::StatusOr<bool>(bool)>& agree) {
  peeked_ = static_cast<size_t>(-1);
  absl::Status first = CheckSizes();
  const size_t n = chunks_.size();
  const size_t B = buffers_.size();
  const size_t ahead = B >= 3 ? B - 2 : 1;
  const int rslot = committed_, wslot = slots_ == 2 ? 1 - committed_ : committed_;
  std::vector<Aio::Ticket> rd(n, 0), wr(n, 0);
  size_t next_read = 0;
  for (size_t k = 0; k < n && first.ok(); ++k) {
    // Read ahead: chunk j goes into buffer j % B once chunk j-B is written.
    while (next_read < n && next_read <= k + ahead && first.ok()) {
      const size_t j = next_read++;
      if (j >= B && wr[j - B]) {
        first.Update(aio_->Wait(wr[j - B]));
        wr[j - B] = 0;
        if (!first.ok()) break;
      }
      rd[j] = Io(chunks_[j], rslot, buffers_[j % B], false);
    }
    if (!first.ok()) break;
    if (rd[k]) {
      first.Update(aio_->Wait(rd[k]));
      rd[k] = 0;
    } else if (peeked_ == k) {
      first.Update(peek_status_);  // read already waited for by PeekNext
    }
    if (!first.ok()) break;
    const Chunk& c = chunks_[k];
    stats_.bytes_read += chunk_bytes(c);
    char* buf = buffers_[k % B];
    float* arrays[3];
    ArraysIn(c, buf, arrays);
    update_rd_ = &rd;
    update_k_ = k;
    first.Update(fn(c, arrays));
    update_rd_ = nullptr;
    if (!first.ok()) break;
    wr[k] = Io(c, wslot, buf, true);
    stats_.bytes_written += chunk_bytes(c);
  }
  // Nothing may stay in flight into the buffers.
  for (size_t j = 0; j < n; ++j) {
    if (rd[j]) (void)aio_->Wait(rd[j]);
    if (wr[j]) first.Update(aio_->Wait(wr[j]));
  }
  const bool ok = first.ok();
  absl::StatusOr<bool> all = agree(ok);
  if (slots_ == 1 && (!ok || !all.ok() || !*all)) {
    // Chunks before the failure were written in place: the files hold
    // neither the previous step nor this one.
    damaged_ = absl::DataLossError(absl::StrCat(
        "nvme offload: a failed optimizer step left the state under '", options_.dir,
        "' partly updated (one slot per file; offload_optimizer.atomic_step keeps two); "
        "it cannot be used: load the last checkpoint"));
  }
  if (!ok) return first;
  if (!all.ok()) return all.status();
  if (!*all) {
    return absl::AbortedError(slots_ == 2
        ? "nvme offload: another rank failed its optimizer update; the step was "
          "not applied on any rank"
        : "nvme offload: another rank failed its optimizer update; the ranks' states "
          "now disagree (this rank's was updated in place)");
  }
  committed_ = wslot;
  return absl::OkStatus();
}

absl::Status NvmeTier::ReadRange(int g, int a, int64_t begin, int64_t len, float* out) {
  return Range(g, a, begin, len, out, nullptr);
}

absl::Status NvmeTier::WriteRange(int g, int a, int64_t begin, int64_t len, const float* in) {
  return Range(g, a, begin, len, nullptr, in);
}

absl::Status NvmeTier::ReadBytes(int g, int a, int64_t begin, int64_t len, void* out) {
  return Range(g, a, begin, len, out, nullptr);
}

absl::Status NvmeTier::WriteBytes(int g, int a, int64_t begin, int64_t len, const void* in) {
  return Range(g, a, begin, len, nullptr, in);
}

absl::Status NvmeTier::Range(int g, int a, int64_t begin, int64_t len, void* out,
                             const void* in) {
  if (a < 0 || a >= options_.num_arrays) {
    return absl::InvalidArgumentError(absl::StrCat("nvme offload: no state array ", a));
  }
  absl::Status s = CheckSizes();
  if (!s.ok()) return s;
  for (const Chunk& c : chunks_) {
    if (c.group != g) continue;
    const int64_t lo = std::max(begin, c.begin);
    const int64_t hi = std::min(begin + len, c.begin + c.len);
    if (hi <= lo) continue;
    // Only the 4 KiB-aligned span of array a that holds [lo, hi); lo is
    // `begin` or a chunk start, so a block start for packed arrays.
    const int64_t region = region_offset(c, a);
    const int64_t first = region + array_bytes(a, lo - c.begin);
    const int64_t last = region + array_bytes(a, hi - c.begin);
    const int64_t at = array_bytes(a, lo - begin);  // in out / in
    const int64_t s0 = first / kAlign * kAlign, s1 = RoundUp(last);
    const int64_t off = committed_ * slot_bytes_[c.group] + c.file_offset + s0;
    const int fd = fds_[c.group];
    const std::string& what = paths_[c.group];
    char* buf = buffers_[0];
    s = aio_->Wait(aio_->Read(fd, buf, static_cast<size_t>(s1 - s0), off, what));
    if (!s.ok()) return s;
    stats_.bytes_read += s1 - s0;
    char* arr = buf + (first - s0);
    if (in == nullptr) {
      std::memcpy(static_cast<char*>(out) + at, arr, static_cast<size_t>(last - first));
      continue;
    }
    std::memcpy(arr, static_cast<const char*>(in) + at, static_cast<size_t>(last - first));
    s = aio_->Wait(aio_->Write(fd, buf, static_cast<size_t>(s1 - s0), off, what));
    if (!s.ok()) return s;
    stats_.bytes_written += s1 - s0;
  }
  return absl::OkStatus();
}

}  // namespace offload
}  // namespace zero

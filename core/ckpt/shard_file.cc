#include "core/ckpt/shard_file.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "core/common/io_fault.h"
#include "core/ckpt/file_util.h"
#include "core/ckpt/json_int.h"
#include "core/ckpt/manifest.h"

namespace zero {
namespace ckpt {
namespace {

constexpr char kMagic[8] = {'Z', 'E', 'R', 'O', 'S', 'H', 'D', '1'};
constexpr int64_t kFooterBytes = 32;
constexpr int64_t kAlign = 64;
constexpr int64_t kChunk = 4 << 20;  // bytes per write / read / progress report

// Whole `n` bytes at `off` (short reads continued); false with errno set,
// or errno 0 at the end of the file.
bool PreadFull(int fd, void* buf, size_t n, off_t off, const std::string& path) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t k = io::Pread(fd, p, n, off, path);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = 0;
      return false;
    }
    p += k;
    off += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

std::string Hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof(buf), "%016" PRIx64, v);
  return buf;
}

}  // namespace

absl::Status Progress::Add(int64_t bytes) {
  done_ += bytes;
  if (fn_ && !fn_(done_, total_)) {
    return absl::CancelledError(absl::StrCat("cancelled by the progress callback after ",
                                             done_, " of ", total_, " bytes"));
  }
  return absl::OkStatus();
}

std::string SectionInfo::Name() const {
  return absl::StrCat("'", param, "/", StateName(state), "' (elements [", offset, ", ",
                      offset + numel, "))");
}

// ---- Writer ------------------------------------------------------------------

absl::StatusOr<std::unique_ptr<ShardFileWriter>> ShardFileWriter::Create(
    const std::string& path, int rank, int world, Progress* progress) {
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("create", tmp, errno);
  return std::unique_ptr<ShardFileWriter>(new ShardFileWriter(path, fd, rank, world, progress));
}

ShardFileWriter::~ShardFileWriter() {
  if (fd_ >= 0) ::close(fd_);
}

absl::Status ShardFileWriter::Write(const void* data, int64_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = io::Write(fd_, p, static_cast<size_t>(bytes), path_ + ".tmp");
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write", path_ + ".tmp", errno);
    p += n;
    bytes -= n;
    pos_ += n;
  }
  return absl::OkStatus();
}

absl::Status ShardFileWriter::Add(const std::string& param, int state, int64_t offset,
                                  int64_t numel, const float* data) {
  return Add(param, state, offset, numel, [data](int64_t first, int64_t n, float* host) {
    std::memcpy(host, data + first, static_cast<size_t>(n) * 4);
  });
}

absl::Status ShardFileWriter::Add(const std::string& param, int state, int64_t offset,
                                  int64_t numel, const Fetch& fetch) {
  static const char zeros[kAlign] = {};
  if (pos_ % kAlign) {
    absl::Status s = Write(zeros, kAlign - pos_ % kAlign);
    if (!s.ok()) return s;
  }
  SectionInfo si;
  si.param = param;
  si.state = state;
  si.offset = offset;
  si.numel = numel;
  si.file_offset = pos_;
  constexpr int64_t kElems = kChunk / 4;
  chunk_.resize(static_cast<size_t>(std::min(kElems, std::max<int64_t>(numel, 1))));
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  for (int64_t a = 0; a < numel; a += kElems) {
    const int64_t n = std::min(kElems, numel - a);
    fetch(a, n, chunk_.data());
    XXH3_64bits_update(h, chunk_.data(), static_cast<size_t>(n) * 4);
    absl::Status s = Write(chunk_.data(), n * 4);
    if (s.ok() && progress_) s = progress_->Add(n * 4);
    if (!s.ok()) {
      XXH3_freeState(h);
      return s;
    }
  }
  si.xxh3 = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  sections_.push_back(std::move(si));
  return absl::OkStatus();
}

absl::StatusOr<ShardFileWriter::Done> ShardFileWriter::Finish() {
  nlohmann::ordered_json j;
  j["format_version"] = kFormatVersion;
  j["rank"] = rank_;
  j["world_size"] = world_;
  nlohmann::ordered_json secs = nlohmann::ordered_json::array();
  for (const SectionInfo& s : sections_) {
    secs.push_back({{"param", s.param},
                    {"state", StateName(s.state)},
                    {"offset", s.offset},
                    {"numel", s.numel},
                    {"file_offset", s.file_offset},
                    {"xxh3", Hex(s.xxh3)}});
  }
  j["sections"] = secs;
  const std::string index = j.dump();
  Done d;
  d.index_xxh3 = XXH3_64bits(index.data(), index.size());
  uint64_t footer[4] = {static_cast<uint64_t>(pos_), index.size(), d.index_xxh3, 0};
  std::memcpy(&footer[3], kMagic, 8);
  absl::Status s = Write(index.data(), static_cast<int64_t>(index.size()));
  if (s.ok()) s = Write(footer, sizeof(footer));
  if (!s.ok()) return s;
  const std::string tmp = path_ + ".tmp";
  if (io::Fsync(fd_, tmp) != 0) return ErrnoError("fsync", tmp, errno);
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return ErrnoError("close", tmp, errno);
  if (io::Rename(tmp, path_) != 0) return ErrnoError("rename to", path_, errno);
  d.bytes = pos_;
  return d;
}

// ---- Reader ------------------------------------------------------------------

ShardFileReader::~ShardFileReader() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<std::unique_ptr<ShardFileReader>> ShardFileReader::Open(
    const std::string& path, int64_t expected_bytes, uint64_t expected_index_xxh3) {
  std::unique_ptr<ShardFileReader> r(new ShardFileReader());
  r->path_ = path;
  r->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r->fd_ < 0) return ErrnoError("open", path, errno);
  auto size = FileSize(path);
  if (!size.ok()) return size.status();
  r->bytes_ = *size;
  auto loss = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(path, ": ", what));
  };
  if (expected_bytes >= 0 && r->bytes_ != expected_bytes) {
    return loss(absl::StrCat("truncated or overwritten: ", r->bytes_, " bytes, the manifest says ",
                             expected_bytes));
  }
  if (r->bytes_ < kFooterBytes) return loss(absl::StrCat("truncated: only ", r->bytes_, " bytes"));
  uint64_t footer[4];
  if (!PreadFull(r->fd_, footer, sizeof(footer), r->bytes_ - kFooterBytes, path)) {
    return ErrnoError("read footer of", path, errno);
  }
  if (std::memcmp(&footer[3], kMagic, 8) != 0) {
    return loss("no ZEROSHD1 footer (truncated, or not a zero rank file)");
  }
  // Compared without wrapping: ioff + ilen overflowing 64 bits must not
  // "match" the size (a huge ilen would then be allocated).
  const uint64_t ioff = footer[0], ilen = footer[1];
  const uint64_t body = static_cast<uint64_t>(r->bytes_ - kFooterBytes);
  if (ioff > body || ilen != body - ioff) {
    return loss("footer does not match the file size (truncated?)");
  }
  std::string index(ilen, '\0');
  if (ilen > 0 && !PreadFull(r->fd_, &index[0], ilen, static_cast<off_t>(ioff), path)) {
    return ErrnoError("read index of", path, errno);
  }
  r->index_xxh3_ = XXH3_64bits(index.data(), index.size());
  if (r->index_xxh3_ != footer[2]) {
    return loss(absl::StrCat("section index checksum mismatch (stored ", Hex(footer[2]),
                             ", computed ", Hex(r->index_xxh3_), ")"));
  }
  if (expected_index_xxh3 != 0 && r->index_xxh3_ != expected_index_xxh3) {
    return loss("the section index differs from the one the manifest recorded "
                "(a rank file from another save?)");
  }
  try {
    // Every integer checked (JsonInt: a float or an out-of-range value would
    // convert with undefined behaviour), every sum overflow-safe.
    auto j = nlohmann::json::parse(index);
    r->rank_ = static_cast<int>(JsonInt(j.at("rank"), 0, INT32_MAX));
    const int64_t data_end = static_cast<int64_t>(ioff);
    for (const auto& js : j.at("sections")) {
      SectionInfo s;
      s.param = js.at("param").get<std::string>();
      s.state = StateFromName(js.at("state").get<std::string>());
      s.offset = JsonInt(js.at("offset"), 0);
      s.numel = JsonInt(js.at("numel"), 0, INT64_MAX / 4);
      s.file_offset = JsonInt(js.at("file_offset"), 0);
      s.xxh3 = JsonHex64(js.at("xxh3"));
      if (s.state < 0 || s.offset > INT64_MAX - s.numel || s.file_offset > data_end ||
          s.numel * 4 > data_end - s.file_offset) {
        return loss(absl::StrCat("section '", s.param, "/", StateName(s.state), "' (offset ",
                                 s.offset, ", numel ", s.numel, ", file_offset ", s.file_offset,
                                 ") is out of bounds (data ends at byte ", data_end, ")"));
      }
      r->sections_.push_back(std::move(s));
    }
  } catch (const std::exception& e) {
    return loss(absl::StrCat("bad section index: ", e.what()));
  }
  return r;
}

const SectionInfo* ShardFileReader::Find(const std::string& param, int state,
                                         int64_t offset) const {
  for (const SectionInfo& s : sections_) {
    if (s.param == param && s.state == state && s.offset == offset) return &s;
  }
  return nullptr;
}

absl::Status ShardFileReader::Read(const SectionInfo& s, int64_t lo, int64_t hi,
                                   const Sink& sink, Progress* progress) const {
  const int64_t bytes = s.numel * 4;
  std::vector<char> buf(static_cast<size_t>(std::min(kChunk, std::max<int64_t>(bytes, 1))));
  XXH3_state_t* h = XXH3_createState();
  XXH3_64bits_reset(h);
  absl::Status st;
  for (int64_t a = 0; a < bytes && st.ok(); a += kChunk) {
    const int64_t len = std::min(kChunk, bytes - a);
    int64_t got = 0;
    while (got < len) {
      ssize_t n = io::Pread(fd_, buf.data() + got, static_cast<size_t>(len - got),
                            static_cast<off_t>(s.file_offset + a + got), path_);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        st = n < 0 ? ErrnoError("read", path_, errno)
                   : absl::DataLossError(absl::StrCat(path_, ": section ", s.Name(), " is truncated"));
        break;
      }
      got += n;
    }
    if (!st.ok()) break;
    XXH3_64bits_update(h, buf.data(), static_cast<size_t>(len));
    // Elements of this chunk: [s.offset + a/4, s.offset + (a+len)/4).
    const int64_t c_lo = std::max(lo, s.offset + a / 4);
    const int64_t c_hi = std::min(hi, s.offset + (a + len) / 4);
    if (c_hi > c_lo) {
      sink(c_lo - lo, reinterpret_cast<const float*>(buf.data() + (c_lo - s.offset) * 4 - a),
           c_hi - c_lo);
    }
    if (progress) st = progress->Add(len);
  }
  const uint64_t got = XXH3_64bits_digest(h);
  XXH3_freeState(h);
  if (!st.ok()) return st;
  if (got != s.xxh3) {
    return absl::DataLossError(absl::StrCat(path_, ": section ", s.Name(),
                                            ": checksum mismatch (stored ", Hex(s.xxh3),
                                            ", computed ", Hex(got), ")"));
  }
  return absl::OkStatus();
}

}  // namespace ckpt
}  // namespace zero

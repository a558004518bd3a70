// One rank's checkpoint file: fp32 sections (a state of a slice of a param),
// each with an xxh3-64 checksum, then a JSON index of the sections and a
// 32-byte footer [index offset, index length, xxh3 of the index, "ZEROSHD1"]
// (little-endian u64s). The writer streams through a temporary name and
// renames after fsync; the reader verifies a section while it streams it.
#ifndef ZERO_CORE_CKPT_SHARD_FILE_H_
#define ZERO_CORE_CKPT_SHARD_FILE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ckpt/shard_view.h"

namespace zero {
namespace ckpt {

// Counts bytes for a ProgressFn; Add fails with Cancelled when it says stop.
class Progress {
 public:
  Progress(ProgressFn fn, int64_t total) : fn_(std::move(fn)), total_(total) {}
  absl::Status Add(int64_t bytes);
  int64_t done() const { return done_; }
  int64_t total() const { return total_; }

 private:
  ProgressFn fn_;
  int64_t total_ = 0, done_ = 0;
};

struct SectionInfo {
  std::string param;
  int state = kMaster;
  int64_t offset = 0;  // first element, relative to the param
  int64_t numel = 0;
  int64_t file_offset = 0;
  uint64_t xxh3 = 0;
  std::string Name() const;  // "fc1.weight/exp_avg [0, 200)"
};

class ShardFileWriter {
 public:
  struct Done {
    int64_t bytes = 0;
    uint64_t index_xxh3 = 0;
  };
  // Nothing appears under `path` until Finish succeeds.
  static absl::StatusOr<std::unique_ptr<ShardFileWriter>> Create(
      const std::string& path, int rank, int world, Progress* progress);
  ~ShardFileWriter();

  // Section data comes from `fetch(first, n, host)`: copy elements
  // [first, first + n) of the section to `host`. Called chunk by chunk.
  using Fetch = std::function<void(int64_t first, int64_t n, float* host)>;
  absl::Status Add(const std::string& param, int state, int64_t offset,
                   int64_t numel, const Fetch& fetch);
  absl::Status Add(const std::string& param, int state, int64_t offset,
                   int64_t numel, const float* data);
  // Index, footer, fsync, rename to `path`.
  absl::StatusOr<Done> Finish();

 private:
  ShardFileWriter(std::string path, int fd, int rank, int world, Progress* p)
      : path_(std::move(path)), fd_(fd), rank_(rank), world_(world), progress_(p) {}
  absl::Status Write(const void* data, int64_t bytes);

  std::string path_;
  int fd_ = -1;
  int rank_, world_;
  std::vector<float> chunk_;
  Progress* progress_;
  int64_t pos_ = 0;
  std::vector<SectionInfo> sections_;
};

class ShardFileReader {
 public:
  // Checks the footer and index. `expected_bytes` / `expected_index_xxh3`
  // (from the manifest; -1 / 0 to skip) catch truncation and files from a
  // different save. Errors name the file.
  static absl::StatusOr<std::unique_ptr<ShardFileReader>> Open(
      const std::string& path, int64_t expected_bytes, uint64_t expected_index_xxh3);
  ~ShardFileReader();

  const std::string& path() const { return path_; }
  int rank() const { return rank_; }
  const std::vector<SectionInfo>& sections() const { return sections_; }
  int64_t bytes() const { return bytes_; }
  uint64_t index_xxh3() const { return index_xxh3_; }
  const SectionInfo* Find(const std::string& param, int state, int64_t offset) const;

  // Streams section `s`, verifying its checksum, and hands its elements in
  // [lo, hi) (relative to the param; may be empty) to sink(first, src, n),
  // `first` counted from lo, chunk by chunk. Nothing is trusted before the
  // whole section checks out, but the sink has run when it fails.
  using Sink = std::function<void(int64_t first, const float* src, int64_t n)>;
  absl::Status Read(const SectionInfo& s, int64_t lo, int64_t hi, const Sink& sink,
                    Progress* progress) const;

 private:
  ShardFileReader() = default;
  std::string path_;
  int fd_ = -1;
  int rank_ = 0;
  int64_t bytes_ = 0;
  uint64_t index_xxh3_ = 0;
  std::vector<SectionInfo> sections_;
};

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_SHARD_FILE_H_

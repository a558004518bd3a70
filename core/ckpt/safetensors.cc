#include "core/ckpt/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <nlohmann/json.hpp>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/io_fault.h"
#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/file_util.h"
#include "core/common/status_macros.h"
#include "kernels/cast_math.h"

namespace zero {
namespace ckpt {
namespace {

const char* SafetensorsDType(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
  }
  return "?";
}

class OutFile {
 public:
  explicit OutFile(std::string path) : path_(std::move(path)) {}
  ~OutFile() {
    if (fd_ >= 0) ::close(fd_);
  }
  absl::Status Open() {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) return ErrnoError("create", path_, errno);
    return absl::OkStatus();
  }
  absl::Status Write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t k = io::Write(fd_, p, n, path_);
      if (k < 0 && errno == EINTR) continue;
      if (k < 0) return ErrnoError("write", path_, errno);
      p += k;
      n -= static_cast<size_t>(k);
    }
    return absl::OkStatus();
  }
  absl::Status Close() {
    if (io::Fsync(fd_, path_) != 0) return ErrnoError("fsync", path_, errno);
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoError("close", path_, errno);
    return absl::OkStatus();
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace

absl::Status WriteSafetensors(Checkpoint* ck, const std::vector<const ParamRecord*>& params,
                              const std::string& out_path, DType dtype,
                              const std::vector<std::pair<std::string, std::string>>& metadata,
                              Progress* progress) {
  const int64_t es = static_cast<int64_t>(DTypeSize(dtype));
  // Header: offsets follow the order given.
  nlohmann::ordered_json h;
  h["__metadata__"] = nlohmann::ordered_json::object();
  for (const auto& [k, v] : metadata) h["__metadata__"][k] = v;
  int64_t at = 0, largest = 0;
  for (const ParamRecord* p : params) {
    h[p->name] = {{"dtype", SafetensorsDType(dtype)},
                  {"shape", p->shape},
                  {"data_offsets", {at, at + p->numel * es}}};
    at += p->numel * es;
    largest = std::max(largest, p->numel);
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');  // data starts 8-aligned
  const uint64_t hlen = header.size();

  const std::string tmp = out_path + ".tmp";
  OutFile out(tmp);
  RETURN_IF_ERROR(out.Open());
  RETURN_IF_ERROR(out.Write(&hlen, 8));
  RETURN_IF_ERROR(out.Write(header.data(), header.size()));
  std::vector<float> buf(static_cast<size_t>(largest));
  std::vector<uint16_t> half(dtype == DType::kF32 ? 0 : static_cast<size_t>(largest));
  for (const ParamRecord* p : params) {
    RETURN_IF_ERROR(ck->ReadRange(*p, kMaster, 0, p->numel, buf.data(), progress));
    if (dtype == DType::kF32) {
      RETURN_IF_ERROR(out.Write(buf.data(), static_cast<size_t>(p->numel) * 4));
      continue;
    }
    for (int64_t i = 0; i < p->numel; ++i) {
      half[i] = dtype == DType::kBF16 ? math::FloatToBf16(buf[i]) : math::FloatToHalf(buf[i]);
    }
    RETURN_IF_ERROR(out.Write(half.data(), static_cast<size_t>(p->numel) * 2));
  }
  RETURN_IF_ERROR(out.Close());
  if (io::Rename(tmp, out_path) != 0) return ErrnoError("rename to", out_path, errno);
  return absl::OkStatus();
}

absl::Status ExportSafetensors(const std::string& dir, const std::string& tag,
                               const std::string& out_path, DType dtype,
                               const ProgressFn& progress_fn) {
  ASSIGN_OR_RETURN(auto ck, Checkpoint::Open(dir, tag));
  const Manifest& m = ck->manifest();
  std::vector<const ParamRecord*> params;
  int64_t total = 0;
  for (const ParamRecord& p : m.params) {
    params.push_back(&p);
    total += ck->RangeBytes(p, 0, p.numel);
  }
  Progress progress(progress_fn, total);
  return WriteSafetensors(ck.get(), params, out_path, dtype,
                          {{"format", "pt"},
                           {"zero_checkpoint", ck->path()},
                           {"zero_tag", m.tag},
                           {"global_step", std::to_string(m.global_step)}},
                          &progress);
}

}  // namespace ckpt
}  // namespace zero

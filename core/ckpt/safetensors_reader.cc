#include "core/ckpt/safetensors_reader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/common/io_fault.h"
#include "core/ckpt/file_util.h"
#include "core/common/status_macros.h"
#include "kernels/cast_math.h"

namespace zero {
namespace ckpt {
namespace {

using nlohmann::json;

// The safetensors library refuses headers above 100 MB; so do we.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

int64_t ElementSize(const std::string& dtype) {
  static const std::map<std::string, int64_t> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"U64", 8},
      {"I32", 4}, {"U32", 4}, {"I16", 2}, {"U16", 2}, {"I8", 1}, {"U8", 1},
      {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

absl::Status PreadAll(int fd, const std::string& path, void* buf, int64_t n, int64_t at) {
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t k = io::Pread(fd, p, static_cast<size_t>(n), at, path);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return ErrnoError("read", path, errno);
    if (k == 0) {
      return absl::DataLossError(absl::StrCat(path, ": unexpected end of file at byte ", at));
    }
    p += k;
    at += k;
    n -= k;
  }
  return absl::OkStatus();
}

// A non-negative JSON integer that fits int64, else -1.
int64_t NonNegative(const json& v) {
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return u > static_cast<uint64_t>(INT64_MAX) ? -1 : static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) {
    int64_t i = v.get<int64_t>();
    return i < 0 ? -1 : i;
  }
  return -1;
}

}  // namespace

SafetensorsSet::~SafetensorsSet() {
  for (int fd : fds_) ::close(fd);
}

bool SafetensorsSet::Convertible(const std::string& dtype) {
  return dtype == "F32" || dtype == "F16" || dtype == "BF16";
}

absl::Status SafetensorsSet::AddFile(const std::string& path,
                                     const std::vector<std::string>* only) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open", path, errno);
  const int file = static_cast<int>(paths_.size());
  paths_.push_back(path);
  fds_.push_back(fd);
  const off_t end = ::lseek(fd, 0, SEEK_END);
  if (end < 0) return ErrnoError("seek", path, errno);
  const int64_t size = static_cast<int64_t>(end);
  auto loss = [&](const std::string& what) {
    return absl::DataLossError(absl::StrCat(path, ": not a valid safetensors file: ", what));
  };
  if (size < 8) return loss(absl::StrCat("file of ", size, " bytes has no header"));
  unsigned char le[8];
  RETURN_IF_ERROR(PreadAll(fd, path, le, 8, 0));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | le[i];
  if (n > kMaxHeaderBytes || n > static_cast<uint64_t>(size - 8)) {
    return loss(absl::StrCat("header length ", n, " exceeds the file (", size, " bytes)"));
  }
  std::string text(static_cast<size_t>(n), '\0');
  RETURN_IF_ERROR(PreadAll(fd, path, text.data(), static_cast<int64_t>(n), 8));
  json h = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (h.is_discarded() || !h.is_object()) return loss("the header is not a JSON object");
  const int64_t data_begin = 8 + static_cast<int64_t>(n);
  const int64_t data_len = size - data_begin;
  std::set<std::string> wanted;
  if (only != nullptr) wanted.insert(only->begin(), only->end());
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") continue;
    if (only != nullptr && wanted.erase(name) == 0) continue;
    const json& e = it.value();
    auto bad = [&](const std::string& what) {
      return absl::DataLossError(absl::StrCat(path, ": tensor '", name, "': ", what));
    };
    if (!e.is_object() || !e.contains("dtype") || !e["dtype"].is_string() ||
        !e.contains("shape") || !e["shape"].is_array() || !e.contains("data_offsets") ||
        !e["data_offsets"].is_array() || e["data_offsets"].size() != 2) {
      return bad("needs dtype (string), shape (array) and data_offsets ([begin, end])");
    }
    SafetensorsTensor t;
    t.name = name;
    t.file = file;
    t.dtype = e["dtype"].get<std::string>();
    t.element_size = ElementSize(t.dtype);
    if (t.element_size == 0) return bad(absl::StrCat("unknown dtype \"", t.dtype, "\""));
    t.numel = 1;
    for (const json& d : e["shape"]) {
      const int64_t v = NonNegative(d);
      if (v < 0) return bad("shape holds a value that is not a non-negative integer");
      if (v != 0 && t.numel > INT64_MAX / v) return bad("element count overflows");
      t.shape.push_back(v);
      t.numel *= v;
    }
    const int64_t b = NonNegative(e["data_offsets"][0]);
    const int64_t en = NonNegative(e["data_offsets"][1]);
    if (b < 0 || en < 0 || b > en) return bad("data_offsets are not 0 <= begin <= end");
    if (en > data_len) {
      return bad(absl::StrCat("data_offsets end ", en, " is past the data section (", data_len,
                              " bytes; the file is truncated?)"));
    }
    if (t.numel > INT64_MAX / t.element_size || en - b != t.numel * t.element_size) {
      return bad(absl::StrCat("data_offsets span ", en - b, " bytes, but shape and dtype need ",
                              t.numel, " x ", t.element_size));
    }
    t.offset = data_begin + b;
    if (!tensors_.emplace(name, std::move(t)).second) {
      return bad("named by more than one file of the index");
    }
  }
  if (!wanted.empty()) {
    return absl::DataLossError(absl::StrCat(path, ": tensor '", *wanted.begin(),
                                            "', which the index maps to this file, is not in it"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsSet>> SafetensorsSet::Open(const std::string& path) {
  std::unique_ptr<SafetensorsSet> set(new SafetensorsSet());
  if (!absl::EndsWith(path, ".json")) {
    RETURN_IF_ERROR(set->AddFile(path, nullptr));
    return set;
  }
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    return absl::DataLossError(
        absl::StrCat(path, ": not a safetensors index (a JSON object with \"weight_map\")"));
  }
  const std::string::size_type slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  std::map<std::string, std::vector<std::string>> by_file;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) {
      return absl::DataLossError(
          absl::StrCat(path, ": weight_map entry '", it.key(), "' is not a file name"));
    }
    const std::string f = it.value().get<std::string>();
    if (f.empty() || f[0] == '/' || absl::StrContains(f, "..")) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": weight_map entry '", it.key(), "' names \"", f,
          "\", not a file in the index's directory"));
    }
    by_file[f].push_back(it.key());
  }
  for (const auto& [f, names] : by_file) {
    RETURN_IF_ERROR(set->AddFile(JoinPath(dir, f), &names));
  }
  return set;
}

absl::Status SafetensorsSet::ReadF32(const SafetensorsTensor& t, int64_t first, int64_t count,
                                     float* out, int64_t* bytes_read) const {
  if (first < 0 || count < 0 || first > t.numel || count > t.numel - first) {
    return absl::OutOfRangeError(absl::StrCat("tensor '", t.name, "': elements [", first, ", +",
                                              count, ") outside its ", t.numel));
  }
  if (!Convertible(t.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(paths_[t.file], ": tensor '", t.name,
                                                   "' has dtype ", t.dtype,
                                                   "; only F32, F16 and BF16 load"));
  }
  const int64_t es = t.element_size;
  const int64_t per = kSafetensorsChunkBytes / es;
  std::vector<unsigned char> buf(static_cast<size_t>(std::min(count, per) * es));
  for (int64_t done = 0; done < count;) {
    const int64_t k = std::min(per, count - done);
    RETURN_IF_ERROR(PreadAll(fds_[t.file], paths_[t.file], buf.data(), k * es,
                             t.offset + (first + done) * es));
    if (bytes_read != nullptr) *bytes_read += k * es;
    float* o = out + done;
    if (es == 4) {
      std::memcpy(o, buf.data(), static_cast<size_t>(k * 4));  // little-endian hosts
    } else {
      const bool bf = t.dtype == "BF16";
      for (int64_t i = 0; i < k; ++i) {
        const uint16_t h = static_cast<uint16_t>(buf[2 * i] | (buf[2 * i + 1] << 8));
        o[i] = bf ? math::Bf16ToFloat(h) : math::HalfToFloat(h);
      }
    }
    done += k;
  }
  return absl::OkStatus();
}

}  // namespace ckpt
}  // namespace zero

// libFuzzer target: the safetensors header reader (SafetensorsSet::Open) and
// ReadF32 over what it accepted. The first byte picks the form: a single
// .safetensors file (the rest of the input), or an index .json (the rest)
// naming shards beside it, of which "a.safetensors" exists and is valid.
// Any bytes are a set or an error saying why; an accepted tensor's bytes
// lie inside its file and read back.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/ckpt/safetensors_reader.h"
#include "tests/fuzz/fuzz_file.h"

namespace {

// A directory holding a valid shard and, beside it, the index under test:
// a symlink to a MemFile rewritten for each input (the reader resolves the
// shards from the index's directory and knows an index by its ".json"
// name, so it sees exactly what a real index there would give it).
struct IndexFile {
  zero::fuzz::MemFile contents;
  std::string path;
};

const std::string& IndexDir() {
  static const std::string dir = [] {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string d = std::string(base != nullptr ? base : "/tmp") + "/zero_st_fuzz." +
                    std::to_string(getpid());
    mkdir(d.c_str(), 0700);
    // {"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}} + 8 bytes.
    const std::string header = R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    file += header + std::string(8, '\x01');
    std::ofstream(d + "/a.safetensors", std::ios::binary) << file;
    return d;
  }();
  return dir;
}

IndexFile& Index() {
  static IndexFile* index = [] {
    auto* f = new IndexFile();
    f->path = IndexDir() + "/model.safetensors.index.json";
    unlink(f->path.c_str());
    if (symlink(f->contents.Path().c_str(), f->path.c_str()) != 0) {
      std::perror("symlink");
      std::abort();
    }
    return f;
  }();
  return *index;
}

int64_t FileSize(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? static_cast<int64_t>(st.st_size) : -1;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string path;
  if (data[0] & 1) {
    Index().contents.Set(data + 1, size - 1);
    path = Index().path;
  } else {
    path = zero::fuzz::AsFile(data + 1, size - 1);
  }
  auto set = zero::ckpt::SafetensorsSet::Open(path);
  if (!set.ok()) {
    FUZZ_CHECK(!set.status().message().empty());
    return 0;
  }
  for (const auto& [name, t] : (*set)->tensors()) {
    const int64_t file_size = FileSize((*set)->file_path(t.file));
    FUZZ_CHECK(t.numel >= 0 && t.element_size > 0 && t.offset >= 8);
    FUZZ_CHECK(t.numel <= (file_size - t.offset) / t.element_size);
    if (!zero::ckpt::SafetensorsSet::Convertible(t.dtype)) continue;
    const int64_t n = std::min<int64_t>(t.numel, 64);
    std::vector<float> out(static_cast<size_t>(n));
    int64_t bytes = 0;
    absl::Status st = (*set)->ReadF32(t, t.numel - n, n, out.data(), &bytes);
    FUZZ_CHECK(st.ok());
    FUZZ_CHECK(bytes == n * t.element_size);
  }
  return 0;
}

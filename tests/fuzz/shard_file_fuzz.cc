// libFuzzer target: a rank file's footer and section index
// (ShardFileReader::Open), then every section it accepted read back. Any
// bytes are a reader or a DataLoss error naming the file; every accepted
// section lies inside the data before the index, and reading one either
// hands over exactly its elements or fails its checksum.
//
// Each input is opened twice: as it is (the footer and its checks), and
// sealed: the footer rewritten to what a writer would put there for the
// index the input holds (length to the end, its xxh3, the magic). A mutated
// index almost never matches the xxh3 in the footer, so without the sealed
// form the JSON index parser and the section bounds behind the checksum
// would see little but the seeds.
#include <xxhash.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/ckpt/shard_file.h"
#include "tests/fuzz/fuzz_file.h"

namespace {

constexpr size_t kFooterBytes = 32;

void Check(const uint8_t* data, size_t size, zero::fuzz::MemFile* file) {
  const std::string path = file->Set(data, size);
  auto r = zero::ckpt::ShardFileReader::Open(path, -1, 0);
  if (!r.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(r.status()));
    FUZZ_CHECK(r.status().message().find(path) != std::string::npos);
    return;
  }
  for (const zero::ckpt::SectionInfo& s : (*r)->sections()) {
    FUZZ_CHECK(s.offset >= 0 && s.numel >= 0 && s.file_offset >= 0);
    FUZZ_CHECK(s.file_offset + s.numel * 4 <= static_cast<int64_t>(size) - 32);
    int64_t got = 0;
    absl::Status st = (*r)->Read(
        s, s.offset, s.offset + s.numel,
        [&](int64_t first, const float*, int64_t n) {
          FUZZ_CHECK(first == got && n > 0);
          got += n;
        },
        nullptr);
    FUZZ_CHECK(got == s.numel);
    FUZZ_CHECK(st.ok() || absl::IsDataLoss(st));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static zero::fuzz::MemFile* as_is = new zero::fuzz::MemFile();
  static zero::fuzz::MemFile* sealed_file = new zero::fuzz::MemFile();
  Check(data, size, as_is);
  if (size < kFooterBytes) return 0;
  // Sealed: the index runs from the footer's offset (clamped into the
  // body) to the footer.
  std::vector<uint8_t> sealed(data, data + size);
  const uint64_t body = size - kFooterBytes;
  uint64_t footer[4];
  std::memcpy(footer, sealed.data() + body, sizeof(footer));
  if (footer[0] > body) footer[0] = body;
  footer[1] = body - footer[0];
  footer[2] = XXH3_64bits(sealed.data() + footer[0], footer[1]);
  std::memcpy(&footer[3], "ZEROSHD1", 8);
  std::memcpy(sealed.data() + body, footer, sizeof(footer));
  Check(sealed.data(), sealed.size(), sealed_file);
  return 0;
}

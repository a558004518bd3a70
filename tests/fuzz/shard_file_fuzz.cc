// libFuzzer target: a rank file's footer and section index
// (ShardFileReader::Open), then every section it accepted read back. Any
// bytes are a reader or a DataLoss error naming the file; every accepted
// section lies inside the data before the index, and reading one either
// hands over exactly its elements or fails its checksum.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/ckpt/shard_file.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = zero::fuzz::AsFile(data, size);
  auto r = zero::ckpt::ShardFileReader::Open(path, -1, 0);
  if (!r.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(r.status()));
    FUZZ_CHECK(r.status().message().find(path) != std::string::npos);
    return 0;
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
  return 0;
}

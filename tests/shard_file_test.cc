// A rank file's footer and section index are untrusted: every integer is
// checked (a float or a value past the field's range is DataLoss, never an
// undefined conversion), sums cannot wrap, and a footer whose offset plus
// length wraps 64 bits is refused instead of allocating the "index".
// The files here are written by ShardFileWriter, then their index is edited
// and re-sealed with a correct footer and checksum, so only the edit is bad.
#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_replace.h"
#include "core/ckpt/manifest.h"
#include "core/ckpt/shard_file.h"

namespace zero {
namespace ckpt {
namespace {

std::string TmpDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct Parts {
  std::string data, index;
  uint64_t footer[4];
};

// A valid two-section rank file, split into data, index and footer.
Parts Valid() {
  const std::string path = TmpDir() + "/valid.bin";
  auto w = ShardFileWriter::Create(path, /*rank=*/1, /*world=*/2, nullptr);
  EXPECT_TRUE(w.ok()) << w.status();
  std::vector<float> a(10, 1.5f), b(7, -2.0f);
  EXPECT_TRUE((*w)->Add("w", kMaster, 0, 10, a.data()).ok());
  EXPECT_TRUE((*w)->Add("w", kExpAvg, 0, 7, b.data()).ok());
  EXPECT_TRUE((*w)->Finish().ok());
  const std::string all = ReadAll(path);
  Parts p;
  std::memcpy(p.footer, all.data() + all.size() - 32, 32);
  p.data = all.substr(0, p.footer[0]);
  p.index = all.substr(p.footer[0], p.footer[1]);
  return p;
}

// data + index + a footer that matches them, under a fresh name.
std::string Seal(const std::string& data, const std::string& index) {
  static int n = 0;
  const std::string path = TmpDir() + "/f" + std::to_string(n++) + ".bin";
  uint64_t footer[4] = {data.size(), index.size(), XXH3_64bits(index.data(), index.size()), 0};
  std::memcpy(&footer[3], "ZEROSHD1", 8);
  WriteAll(path, data + index + std::string(reinterpret_cast<char*>(footer), 32));
  return path;
}

absl::Status Open(const std::string& path) {
  return ShardFileReader::Open(path, -1, 0).status();
}

TEST(ShardFileTest, ValidFileOpensAndReads) {
  Parts p = Valid();
  auto r = ShardFileReader::Open(Seal(p.data, p.index), -1, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->rank(), 1);
  ASSERT_EQ((*r)->sections().size(), 2u);
  std::vector<float> got(7);
  ASSERT_TRUE((*r)->Read((*r)->sections()[1], 0, 7,
                         [&](int64_t first, const float* src, int64_t n) {
                           std::memcpy(got.data() + first, src, n * 4);
                         },
                         nullptr)
                  .ok());
  EXPECT_EQ(got, std::vector<float>(7, -2.0f));
}

TEST(ShardFileTest, FooterWhoseOffsetPlusLengthWrapsIsRefused) {
  Parts p = Valid();
  const std::string path = Seal(p.data, p.index);
  std::string all = ReadAll(path);
  // ioff + ilen + 32 == size modulo 2^64, with ilen near 2^64: the old check
  // passed it and then tried to allocate ilen bytes.
  uint64_t footer[4];
  std::memcpy(footer, all.data() + all.size() - 32, 32);
  footer[0] = all.size();  // past the body
  footer[1] = UINT64_MAX - 31;  // size + (2^64 - 32) + 32 == size
  std::memcpy(&all[all.size() - 32], footer, 32);
  WriteAll(path, all);
  absl::Status s = Open(path);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("footer does not match the file size"), std::string::npos) << s;
}

struct Edit {
  const char* from;
  const char* to;
  const char* message;
};

TEST(ShardFileTest, HostileIndexValuesAreDataLossNamingTheField) {
  Parts p = Valid();
  // The writer's index, for the edits to match.
  ASSERT_NE(p.index.find("\"rank\":1"), std::string::npos) << p.index;
  ASSERT_NE(p.index.find("\"numel\":7"), std::string::npos) << p.index;
  ASSERT_NE(p.index.find("\"offset\":0,\"numel\":10"), std::string::npos) << p.index;
  const Edit edits[] = {
      {"\"numel\":7", "\"numel\":1e300", "expected an integer in [0, 2305843009213693951], got 1e+300"},
      {"\"numel\":7", "\"numel\":7.5", "got 7.5"},
      {"\"numel\":7", "\"numel\":-7", "got -7"},
      {"\"numel\":7", "\"numel\":18446744073709551615", "got 18446744073709551615"},
      // numel * 4 past int64.
      {"\"numel\":7", "\"numel\":4611686018427387904", "got 4611686018427387904"},
      {"\"rank\":1", "\"rank\":4294967297", "got 4294967297"},
      {"\"rank\":1", "\"rank\":-1", "got -1"},
      {"\"offset\":0,\"numel\":10", "\"offset\":-5,\"numel\":10", "got -5"},
      // offset + numel past int64 (SectionInfo::Name would overflow).
      {"\"offset\":0,\"numel\":10", "\"offset\":9223372036854775807,\"numel\":10",
       "is out of bounds"},
      {"\"numel\":7", "\"numel\":1000000", "is out of bounds"},
      {"\"xxh3\":\"", "\"xxh3\":\"-", "expected 1 to 16 hex digits"},
  };
  for (const Edit& e : edits) {
    std::string index = p.index;
    index.replace(index.find(e.from), std::strlen(e.from), e.to);
    absl::Status s = Open(Seal(p.data, index));
    EXPECT_TRUE(absl::IsDataLoss(s)) << e.to << ": " << s;
    EXPECT_NE(s.message().find(e.message), std::string::npos) << e.to << ": " << s;
  }
}

TEST(ShardFileTest, FileOffsetPlusSizeThatWrapsIsOutOfBounds) {
  Parts p = Valid();
  // file_offset + numel * 4 wraps negative in int64: the old check passed it.
  const std::string from = "\"file_offset\":0";
  ASSERT_NE(p.index.find(from), std::string::npos) << p.index;
  std::string index = p.index;
  index.replace(index.find(from), from.size(), "\"file_offset\":9223372036854775800");
  absl::Status s = Open(Seal(p.data, index));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("is out of bounds"), std::string::npos) << s;
}

}  // namespace
}  // namespace ckpt
}  // namespace zero

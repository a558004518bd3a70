// The manifest reader refuses hostile input with a DataLoss error naming the
// file instead of wrapping arithmetic or converting out-of-range numbers
// (undefined behaviour): element counts that overflow 64 bits, slices whose
// sum overflows, floats and huge values in integer fields.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_replace.h"
#include "core/ckpt/manifest.h"

namespace zero {
namespace ckpt {
namespace {

std::string Valid() {
  Manifest m;
  m.tag = "t";
  m.world_size = 2;
  m.optimizer = "adamw";
  ParamRecord p;
  p.name = "w";
  p.shape = {4, 3};
  p.numel = 12;
  p.slices = {{0, 0, 6}, {1, 6, 6}};
  m.params.push_back(p);
  for (int r = 0; r < 2; ++r) {
    FileRecord f;
    f.rank = r;
    f.file = RankFileName(r);
    f.bytes = 100;
    m.files.push_back(f);
  }
  return ManifestToJson(m);
}

absl::Status Parse(const std::string& text) { return ParseManifest(text, "m.json").status(); }

TEST(ManifestTest, ValidRoundTrips) {
  auto m = ParseManifest(Valid(), "m.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->params[0].numel, 12);
}

TEST(ManifestTest, ShapeWhoseProductOverflowsIsRefused) {
  // [2^32, 2^32, 1] wraps to 0 in int64: numel 0 would then "match".
  std::string t = absl::StrReplaceAll(Valid(), {{"\"shape\":[4,3]", "\"shape\":[4294967296,4294967296,1]"},
                                                {"\"numel\":12", "\"numel\":0"}});
  ASSERT_NE(t, Valid());
  absl::Status s = Parse(t);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("more elements than a 64-bit count holds"), std::string::npos) << s;
}

TEST(ManifestTest, SlicesWhoseSumOverflowsAreRefused) {
  std::string t = absl::StrReplaceAll(Valid(), {{"[1,6,6]", "[1,6,9223372036854775807]"}});
  ASSERT_NE(t, Valid());
  absl::Status s = Parse(t);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("slices do not cover"), std::string::npos) << s;
}

TEST(ManifestTest, FloatsAndHugeValuesInIntegerFieldsAreRefused) {
  for (const char* bad : {"\"numel\":1e300", "\"numel\":12.5", "\"numel\":18446744073709551615"}) {
    std::string t = absl::StrReplaceAll(Valid(), {{"\"numel\":12", bad}});
    ASSERT_NE(t, Valid()) << bad;
    absl::Status s = Parse(t);
    EXPECT_TRUE(absl::IsDataLoss(s)) << bad << ": " << s;
    EXPECT_NE(s.message().find("param 'w': expected an integer in ["), std::string::npos) << s;
  }
  std::string t = absl::StrReplaceAll(Valid(), {{"\"world_size\": 2", "\"world_size\": 1e10"}});
  ASSERT_NE(t, Valid());
  absl::Status s = Parse(t);
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_NE(s.message().find("expected an integer in [-2147483648, 2147483647], got 10000000000"),
            std::string::npos) << s;
}

TEST(ManifestTest, ChecksumsAreHexDigitsOnly) {
  const std::string valid = Valid();
  const std::string field = "\"index_xxh3\":\"0000000000000000\"";
  ASSERT_NE(valid.find(field), std::string::npos) << valid;
  // std::stoull took all of these (as 2^64-1, 0x12, 12, 12).
  for (const char* bad : {"\"-1\"", "\"0x12\"", "\" 12\"", "\"12zz\"", "\"\"",
                          "\"00000000000000001\"", "12"}) {
    std::string t = valid;
    t.replace(t.find(field), field.size(), std::string("\"index_xxh3\":") + bad);
    absl::Status s = Parse(t);
    EXPECT_TRUE(absl::IsDataLoss(s)) << bad << ": " << s;
    EXPECT_NE(s.message().find("files: expected"), std::string::npos) << s;
  }
  std::string t = valid;
  t.replace(t.find(field), field.size(), "\"index_xxh3\":\"aBcD\"");
  auto m = ParseManifest(t, "m.json");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->files[0].index_xxh3, 0xabcdu);
}

}  // namespace
}  // namespace ckpt
}  // namespace zero

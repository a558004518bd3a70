// core/ckpt/safetensors_reader: header validation (every malformed header is
// DataLoss naming the file and tensor), index files, ranged reads that touch
// only the bytes asked for, F16/BF16 widening.
#include "core/ckpt/safetensors_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cast_math.h"

namespace zero {
namespace ckpt {
namespace {

std::string Dir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

// A file of header JSON `header` (padded by nothing) and `data` bytes.
std::string Write(const std::string& name, const std::string& header, const std::string& data,
                  int64_t claimed_len = -1) {
  const std::string path = Dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  uint64_t n = claimed_len >= 0 ? static_cast<uint64_t>(claimed_len) : header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << header << data;
  return path;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(SafetensorsReader, ReadsRangesOfF32AndCountsBytes) {
  std::vector<float> v(100);
  for (int i = 0; i < 100; ++i) v[i] = 0.5f * i - 7;
  const std::string p = Write(
      "ok.safetensors",
      R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[10,10],"data_offsets":[0,400]}})",
      Floats(v));
  auto set = SafetensorsSet::Open(p);
  ASSERT_TRUE(set.ok()) << set.status();
  const SafetensorsTensor& t = (*set)->tensors().at("a");
  EXPECT_EQ(t.shape, (std::vector<int64_t>{10, 10}));
  std::vector<float> out(30);
  int64_t bytes = 0;
  ASSERT_TRUE((*set)->ReadF32(t, 25, 30, out.data(), &bytes).ok());
  EXPECT_EQ(bytes, 120);
  for (int i = 0; i < 30; ++i) EXPECT_EQ(out[i], v[25 + i]);
  EXPECT_FALSE((*set)->ReadF32(t, 90, 11, out.data(), &bytes).ok());
}

TEST(SafetensorsReader, WidensBf16AndF16Exactly) {
  const float vals[3] = {1.5f, -0.0078125f, 65504.0f};
  std::string bf, h;
  for (float f : vals) {
    uint16_t b = math::FloatToBf16(f), x = math::FloatToHalf(f);
    bf.append(reinterpret_cast<const char*>(&b), 2);
    h.append(reinterpret_cast<const char*>(&x), 2);
  }
  const std::string p = Write(
      "half.safetensors",
      R"({"b":{"dtype":"BF16","shape":[3],"data_offsets":[0,6]},"h":{"dtype":"F16","shape":[3],"data_offsets":[6,12]}})",
      bf + h);
  auto set = SafetensorsSet::Open(p);
  ASSERT_TRUE(set.ok()) << set.status();
  float out[3];
  ASSERT_TRUE((*set)->ReadF32((*set)->tensors().at("b"), 0, 3, out, nullptr).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], math::Bf16ToFloat(math::FloatToBf16(vals[i])));
  ASSERT_TRUE((*set)->ReadF32((*set)->tensors().at("h"), 0, 3, out, nullptr).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(out[i], vals[i]);
}

void ExpectDataLoss(const std::string& name, const std::string& header, const std::string& data,
                    const std::string& needle, int64_t claimed = -1) {
  const std::string p = Write(name, header, data, claimed);
  auto set = SafetensorsSet::Open(p);
  ASSERT_FALSE(set.ok()) << name;
  EXPECT_EQ(set.status().code(), absl::StatusCode::kDataLoss) << set.status();
  EXPECT_NE(set.status().message().find(name), std::string::npos) << set.status();
  EXPECT_NE(set.status().message().find(needle), std::string::npos) << set.status();
}

TEST(SafetensorsReader, MalformedHeadersAreDataLossNamingFileAndTensor) {
  const std::string d(16, '\0');
  ExpectDataLoss("len.safetensors", "{}", d, "header length", 1000);
  ExpectDataLoss("json.safetensors", "{not json", d, "JSON");
  ExpectDataLoss("past.safetensors", R"({"t":{"dtype":"F32","shape":[8],"data_offsets":[0,32]}})",
                 d, "'t'");
  ExpectDataLoss("span.safetensors", R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})",
                 d, "'t'");
  ExpectDataLoss("dtype.safetensors", R"({"t":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})",
                 d, "unknown dtype");
  ExpectDataLoss("neg.safetensors", R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})",
                 d, "'t'");
  ExpectDataLoss(
      "ovf.safetensors",
      R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,16]}})", d,
      "overflow");
  ExpectDataLoss("order.safetensors", R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})",
                 d, "'t'");
  ExpectDataLoss("empty.safetensors", "", "", "JSON");
  const std::string shortp = Dir() + "/short.safetensors";
  std::ofstream(shortp, std::ios::binary) << "abc";
  auto set = SafetensorsSet::Open(shortp);
  EXPECT_EQ(set.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(set.status().message().find("no header"), std::string::npos) << set.status();
}

TEST(SafetensorsReader, IndexMapsTensorsToShardsAndChecksThem) {
  const std::string a = Write("idx-1.safetensors",
                              R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                              Floats({1, 2}));
  const std::string b = Write("idx-2.safetensors",
                              R"({"y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                              Floats({3}));
  const std::string index = Dir() + "/idx.safetensors.index.json";
  std::ofstream(index) << R"({"weight_map":{"x":"idx-1.safetensors","y":"idx-2.safetensors"}})";
  auto set = SafetensorsSet::Open(index);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ((*set)->tensors().size(), 2u);
  float y = 0;
  ASSERT_TRUE((*set)->ReadF32((*set)->tensors().at("y"), 0, 1, &y, nullptr).ok());
  EXPECT_EQ(y, 3);

  std::ofstream(index) << R"({"weight_map":{"x":"idx-1.safetensors","z":"idx-2.safetensors"}})";
  set = SafetensorsSet::Open(index);
  ASSERT_FALSE(set.ok());
  EXPECT_NE(set.status().message().find("'z'"), std::string::npos) << set.status();
  EXPECT_NE(set.status().message().find("idx-2.safetensors"), std::string::npos) << set.status();

  std::ofstream(index) << R"({"weight_map":{"x":"../idx-1.safetensors"}})";
  EXPECT_EQ(SafetensorsSet::Open(index).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace ckpt
}  // namespace zero

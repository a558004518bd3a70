// Writes the seed corpora of the fuzz targets from the writers themselves,
// so the seeds are exactly what zero produces: manifests (ManifestToJson),
// rank files (ShardFileWriter), safetensors files (ExportSafetensors's
// layout, written here by hand: header length, JSON, data) and indexes.
//   make_seeds OUT_DIR   ->  OUT_DIR/{manifest,shard_file,safetensors}/...
// tools/fuzz.sh seeds regenerates tests/fuzz/corpus with it.
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/ckpt/manifest.h"
#include "core/ckpt/shard_file.h"

namespace zc = zero::ckpt;

namespace {

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

zc::Manifest MakeManifest(int world, int params) {
  zc::Manifest m;
  m.tag = "global_step7";
  m.world_size = world;
  m.stage = 2;
  m.optimizer = "adamw";
  m.states = {zc::kExpAvg, zc::kExpAvgSq};
  m.sub_group_size = 1000000000;
  m.global_step = 7;
  m.micro_step = 14;
  m.config_json = R"({"stage":2,"dtype":"bf16"})";
  for (int i = 0; i < params; ++i) {
    zc::ParamRecord p;
    p.name = "layer" + std::to_string(i) + ".weight";
    p.shape = {5 + i, 3};
    p.numel = (5 + i) * 3;
    p.trainable = i != 1;
    int64_t at = 0;
    for (int r = 0; r < world && at < p.numel; ++r) {
      const int64_t n = r == world - 1 ? p.numel - at : std::min<int64_t>(p.numel - at, 4);
      p.slices.push_back({r, at, n});
      at += n;
    }
    m.params.push_back(p);
  }
  for (int r = 0; r < world; ++r) {
    zc::FileRecord f;
    f.rank = r;
    f.file = zc::RankFileName(r);
    f.bytes = 4096 + r;
    f.index_xxh3 = 0x0123456789abcdefULL + r;
    m.files.push_back(f);
  }
  return m;
}

std::string Safetensors(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  return out + header + data;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds OUT_DIR\n");
    return 2;
  }
  const std::string out = argv[1];
  for (const char* d : {"", "/manifest", "/shard_file", "/safetensors"}) {
    mkdir((out + d).c_str(), 0755);
  }
  Write(out + "/manifest/one_rank", zc::ManifestToJson(MakeManifest(1, 1)));
  Write(out + "/manifest/three_ranks", zc::ManifestToJson(MakeManifest(3, 3)));

  for (int variant = 0; variant < 2; ++variant) {
    const std::string path = out + "/shard_file/rank" + std::to_string(variant);
    auto w = zc::ShardFileWriter::Create(path, variant, 2, nullptr);
    if (!w.ok()) return 1;
    std::vector<float> a(6, 0.5f), b(3, -1.0f);
    if (!(*w)->Add("w", zc::kMaster, 0, 6, a.data()).ok()) return 1;
    if (variant == 1) {
      if (!(*w)->Add("w", zc::kExpAvg, 0, 6, a.data()).ok()) return 1;
      if (!(*w)->Add("b", zc::kMaster, 2, 3, b.data()).ok()) return 1;
    }
    if (!(*w)->Finish().ok()) return 1;
  }

  // Safetensors: the first byte picks the form (safetensors_fuzz.cc): even
  // a single file, odd an index naming a.safetensors beside it.
  const std::string f32(8, '\x01'), bf16(6, '\x02');
  Write(out + "/safetensors/single",
        std::string(1, '\0') +
            Safetensors(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f32));
  Write(out + "/safetensors/two_dtypes",
        std::string(1, '\0') +
            Safetensors(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[1,2],)"
                        R"("data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[3],)"
                        R"("data_offsets":[8,14]},"i":{"dtype":"I64","shape":[0],)"
                        R"("data_offsets":[14,14]}})",
                        f32 + bf16));
  Write(out + "/safetensors/index",
        std::string(1, '\1') +
            R"({"metadata":{"total_size":8},"weight_map":{"x":"a.safetensors"}})");
  return 0;
}

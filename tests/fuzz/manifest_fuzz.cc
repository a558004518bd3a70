// libFuzzer target: the checkpoint manifest reader. Any text is a Manifest
// or a DataLoss / FailedPrecondition error; a Manifest it accepts is
// consistent (element counts, slices covering each param once) and writes
// back to text that reads as the same manifest.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/ckpt/manifest.h"
#include "tests/fuzz/fuzz_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = zero::ckpt::ParseManifest(text, "manifest.json");
  if (!m.ok()) {
    FUZZ_CHECK(absl::IsDataLoss(m.status()) || absl::IsFailedPrecondition(m.status()));
    return 0;
  }
  FUZZ_CHECK(m->world_size >= 1 && static_cast<int>(m->files.size()) == m->world_size);
  for (const zero::ckpt::ParamRecord& p : m->params) {
    int64_t n = 1;
    for (int64_t d : p.shape) {
      FUZZ_CHECK(d >= 1 && !__builtin_mul_overflow(n, d, &n));
    }
    FUZZ_CHECK(n == p.numel);
    int64_t covered = 0;
    for (const zero::ckpt::RankSlice& s : p.slices) {
      FUZZ_CHECK(s.rank >= 0 && s.rank < m->world_size && s.numel >= 1);
      FUZZ_CHECK(!__builtin_add_overflow(covered, s.numel, &covered));
    }
    FUZZ_CHECK(covered == p.numel);
  }
  auto again = zero::ckpt::ParseManifest(zero::ckpt::ManifestToJson(*m), "manifest.json");
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(zero::ckpt::ManifestToJson(*again) == zero::ckpt::ManifestToJson(*m));
  return 0;
}

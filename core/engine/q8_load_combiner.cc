#include "core/engine/q8_load_combiner.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/common/status_macros.h"
#include "kernels/cpu/moments_format_step.h"

namespace zero {
namespace {

constexpr int64_t kBlock = math::kQ8Block;
// Elements encoded at a time: bounded host memory whatever the range.
constexpr int64_t kSpan = 1 << 16;
static_assert(kSpan % kBlock == 0, "spans of whole blocks");
constexpr uint64_t kAll = ~uint64_t{0};
static_assert(kBlock == 64, "one bit per element of a block");

}  // namespace

absl::Status Q8LoadCombiner::EncodeBlocks(int g, int array, int64_t first, int64_t n,
                                          const float* vals) {
  std::vector<math::Q8Block> bytes, fresh;
  std::vector<float> zeros;
  for (int64_t at = 0; at < n; at += kSpan) {
    const int64_t k = std::min(kSpan, n - at);
    const int64_t blocks = k / kBlock;
    bytes.resize(blocks);
    fresh.resize(blocks);
    zeros.assign(k, 0.0f);
    RETURN_IF_ERROR(read_(g, first + at, k, bytes.data()));
    cpu::PackMoments(math::kMomentsQ8, array == 1 ? vals + at : zeros.data(),
                     array == 2 ? vals + at : zeros.data(), fresh.data(), k);
    for (int64_t b = 0; b < blocks; ++b) {
      if (array == 1) {
        std::memcpy(bytes[b].m, fresh[b].m, sizeof(bytes[b].m));
        bytes[b].m_absmax = fresh[b].m_absmax;
      } else {
        std::memcpy(bytes[b].v, fresh[b].v, sizeof(bytes[b].v));
        bytes[b].v_absmax = fresh[b].v_absmax;
      }
    }
    RETURN_IF_ERROR(write_(g, first + at, k, bytes.data()));
  }
  return absl::OkStatus();
}

absl::Status Q8LoadCombiner::Write(int g, int array, int64_t begin, int64_t len,
                                   const float* in) {
  const int64_t end = begin + len;
  int64_t at = begin;
  while (at < end) {
    const int64_t b0 = at / kBlock * kBlock;
    // A run of whole blocks none of which is held: encoded directly.
    int64_t run = b0;
    if (at == b0) {
      while (run + kBlock <= end && held_.count(Key{g, run, array}) == 0) run += kBlock;
    }
    if (run > b0) {
      RETURN_IF_ERROR(EncodeBlocks(g, array, b0, run - b0, in + (b0 - begin)));
      at = run;
      continue;
    }
    // Part of a block, or a block already held: held until complete, from
    // the values it decodes to now (elements never loaded keep them).
    auto it = held_.find(Key{g, b0, array});
    if (it == held_.end()) {
      math::Q8Block block;
      RETURN_IF_ERROR(read_(g, b0, kBlock, &block));
      Held h;
      cpu::UnpackMoments(math::kMomentsQ8, &block, array == 1 ? h.vals : nullptr,
                         array == 2 ? h.vals : nullptr, kBlock);
      it = held_.emplace(Key{g, b0, array}, h).first;
    }
    const int64_t hi = std::min(end, b0 + kBlock);
    Held& h = it->second;
    for (int64_t i = at; i < hi; ++i) {
      h.vals[i - b0] = in[i - begin];
      h.written |= uint64_t{1} << (i - b0);
    }
    if (h.written == kAll) {
      const absl::Status s = EncodeBlocks(g, array, b0, kBlock, h.vals);
      held_.erase(it);
      RETURN_IF_ERROR(s);
    }
    at = hi;
  }
  return absl::OkStatus();
}

absl::Status Q8LoadCombiner::Flush(bool write_back) {
  absl::Status first;
  if (write_back) {
    for (const auto& [key, h] : held_) {
      if (!first.ok()) break;
      first.Update(EncodeBlocks(std::get<0>(key), std::get<2>(key), std::get<1>(key), kBlock,
                                h.vals));
    }
  }
  held_.clear();
  return first;
}

}  // namespace zero

#include "core/engine/packed_moments.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/common/status_macros.h"
#include "kernels/cpu/moments_format_step.h"
#include "kernels/moments_format_math.h"

namespace zero {
namespace {

// Elements converted at a time: bounded host memory whatever the range.
constexpr int64_t kSpan = 1 << 20;
static_assert(kSpan % math::kQ8Block == 0, "spans of whole blocks");

// fn(first, n, skip) over block-aligned spans covering [begin, begin+len):
// span [first, first+n), the range starting `skip` elements in.
template <typename Fn>
absl::Status ForSpans(int format, int64_t begin, int64_t len, Fn fn) {
  const int64_t align = format == math::kMomentsQ8 ? math::kQ8Block : 1;
  const int64_t lo = begin / align * align;
  const int64_t hi = begin + len;
  for (int64_t first = lo; first < hi; first += kSpan) {
    const int64_t n = std::min(kSpan, (hi - first + align - 1) / align * align);
    RETURN_IF_ERROR(fn(first, n));
  }
  return absl::OkStatus();
}

}  // namespace

int PackedFormat(const Config& c) { return static_cast<int>(c.moments_format); }

int64_t StateArrayBytes(const Config& c, int array, int64_t n) {
  const int f = PackedFormat(c);
  return array == 0 || f == math::kMomentsF32 ? n * 4 : math::PackedMomentsBytes(f, n);
}

int64_t StateArrayOffset(const Config& c, int array, int64_t begin) {
  const int f = PackedFormat(c);
  return array == 0 || f == math::kMomentsF32 ? begin * 4 : math::PackedMomentsOffset(f, begin);
}

absl::Status ReadPackedMoment(int format, int array, int64_t begin, int64_t len, float* out,
                              const PackedIo& read) {
  if (len <= 0) return absl::OkStatus();
  std::vector<char> bytes;
  std::vector<float> vals;
  return ForSpans(format, begin, len, [&](int64_t first, int64_t n) -> absl::Status {
    bytes.resize(math::PackedMomentsBytes(format, n));
    vals.resize(n);
    RETURN_IF_ERROR(read(first, n, bytes.data()));
    cpu::UnpackMoments(format, bytes.data(), array == 1 ? vals.data() : nullptr,
                       array == 2 ? vals.data() : nullptr, n);
    const int64_t a = std::max(first, begin), b = std::min(first + n, begin + len);
    std::memcpy(out + (a - begin), vals.data() + (a - first), (b - a) * sizeof(float));
    return absl::OkStatus();
  });
}

absl::Status WritePackedMoment(int format, int array, int64_t begin, int64_t len,
                               const float* in, const PackedIo& read, const PackedIo& write) {
  if (len <= 0) return absl::OkStatus();
  std::vector<char> bytes;
  std::vector<float> m, v;
  return ForSpans(format, begin, len, [&](int64_t first, int64_t n) -> absl::Status {
    bytes.resize(math::PackedMomentsBytes(format, n));
    m.resize(n);
    v.resize(n);
    RETURN_IF_ERROR(read(first, n, bytes.data()));
    cpu::UnpackMoments(format, bytes.data(), m.data(), v.data(), n);
    const int64_t a = std::max(first, begin), b = std::min(first + n, begin + len);
    std::memcpy((array == 1 ? m : v).data() + (a - first), in + (a - begin),
                (b - a) * sizeof(float));
    cpu::PackMoments(format, m.data(), v.data(), bytes.data(), n);
    return write(first, n, bytes.data());
  });
}

}  // namespace zero

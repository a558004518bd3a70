// Adam's moments in a packed format (bf16 or 8-bit blocks,
// kernels/moments_format_math.h) seen as the two fp32 arrays checkpoints and
// read_owned_state/write_owned_state speak: a state store keeps one packed
// array after the master and converts here (docs/ARCHITECTURE.md, "Optimizer
// state formats").
#ifndef ZERO_CORE_ENGINE_PACKED_MOMENTS_H_
#define ZERO_CORE_ENGINE_PACKED_MOMENTS_H_

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "core/config/config.h"

namespace zero {

// math::MomentsFormat of c: fp32 (0) keeps the moments as arrays 1 and 2.
int PackedFormat(const Config& c);
// Bytes of state array `array` (0 the master) over n owned elements.
int64_t StateArrayBytes(const Config& c, int array, int64_t n);
// Byte offset of element `begin` in state array `array`.
int64_t StateArrayOffset(const Config& c, int array, int64_t begin);

// Packed bytes of elements [first, first+n) (first a block start) into or
// out of host memory `bytes`.
using PackedIo = std::function<absl::Status(int64_t first, int64_t n, void* bytes)>;

// Moment `array` (1 exp_avg, 2 exp_avg_sq) of owned elements [begin,
// begin+len) as fp32. A write re-encodes the blocks it touches, the other
// moment and the untouched elements included (8-bit: their values stay
// those of the block, rescaled to its new absmax).
absl::Status ReadPackedMoment(int format, int array, int64_t begin, int64_t len, float* out,
                              const PackedIo& read);
absl::Status WritePackedMoment(int format, int array, int64_t begin, int64_t len,
                               const float* in, const PackedIo& read, const PackedIo& write);

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_PACKED_MOMENTS_H_

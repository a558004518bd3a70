// 8-bit moments (kernels/moments_format_math.h) written during a checkpoint
// load into a store that keeps them only packed (NvmeStateStore). A load
// writes each param's slice of exp_avg, then of exp_avg_sq, so a 64-element
// block shared by two params would be re-encoded once per param, each time
// against a partial absmax, losing bits that the in-memory store's load
// (decoded fp32 for the whole load, encoded once: DeviceStateStore::Spill)
// keeps. Here each moment of a block is encoded once, from its loaded
// values: whole blocks at once, a partly written block held as fp32 until
// its 64 elements arrived or the load ends (Flush). Only the written
// moment's codes and absmax change; the other's bytes are kept as they are.
// At most one held block per param boundary and group end: bounded memory
// (docs/ARCHITECTURE.md, "Optimizer state formats").
#ifndef ZERO_CORE_ENGINE_Q8_LOAD_COMBINER_H_
#define ZERO_CORE_ENGINE_Q8_LOAD_COMBINER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "kernels/moments_format_math.h"

namespace zero {

class Q8LoadCombiner {
 public:
  // read/write: group g's packed bytes of elements [first, first+n)
  // (first a block start).
  using GroupIo = std::function<absl::Status(int g, int64_t first, int64_t n, void* bytes)>;
  Q8LoadCombiner(GroupIo read, GroupIo write) : read_(std::move(read)), write_(std::move(write)) {}

  // Moment `array` (1 exp_avg, 2 exp_avg_sq) of group g's owned elements
  // [begin, begin+len) (the owned length a multiple of 64).
  absl::Status Write(int g, int array, int64_t begin, int64_t len, const float* in);
  // Encodes and writes every held block (write_back), or drops them.
  absl::Status Flush(bool write_back);
  bool empty() const { return held_.empty(); }

 private:
  struct Held {
    float vals[math::kQ8Block];
    uint64_t written = 0;  // bit i: element i loaded
  };
  using Key = std::tuple<int, int64_t, int>;  // group, block start, moment
  // Moment `array` of the whole blocks [first, first+n) from vals.
  absl::Status EncodeBlocks(int g, int array, int64_t first, int64_t n, const float* vals);

  GroupIo read_, write_;
  std::map<Key, Held> held_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_Q8_LOAD_COMBINER_H_

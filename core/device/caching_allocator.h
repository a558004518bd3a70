// A caching allocator over any raw allocator (cudaMalloc, cudaHostAlloc, or a
// test fake). Raw allocations are slow and synchronize the device, so freed
// blocks are kept and reused: a training loop that repeats the same pattern
// of allocations makes no raw allocation after its first step.
//
// Bookkeeping (PyTorch's CUDACachingAllocator, without streams):
// - requests round up to `round` bytes (so every block stays aligned to it);
// - small requests (<= small_limit) are carved from small_segment-sized raw
//   segments, large ones from their own segments (large_segment_min for
//   requests below it, else rounded up to large_round); the two pools never
//   mix, so small blocks cannot fragment large segments;
// - a request takes the smallest free block that fits (best fit) and splits
//   off the rest when it is big enough to be useful; a freed block merges
//   with free neighbours of the same segment;
// - when the raw allocator fails, whole free segments are released and the
//   raw allocation retried; a large request then falls back to a segment of
//   its own size rounded to large_round.
// Frees are immediate: with one ordered stream per device the reuse is safe;
// a caller that has work in flight on another stream must join it first.
// Thread-safe.
#ifndef ZERO_CORE_DEVICE_CACHING_ALLOCATOR_H_
#define ZERO_CORE_DEVICE_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include "absl/status/statusor.h"

namespace zero {

class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  // Memory aligned to at least CachingAllocator::Options::round.
  virtual absl::StatusOr<void*> RawAllocate(size_t bytes) = 0;
  virtual void RawFree(void* p, size_t bytes) = 0;
};

struct CachingAllocatorStats {
  size_t allocated_bytes = 0;       // rounded bytes of live blocks
  size_t reserved_bytes = 0;        // bytes of raw segments held
  size_t peak_allocated_bytes = 0;  // high-water marks since ResetPeaks
  size_t peak_reserved_bytes = 0;
  int64_t allocations = 0;          // Allocate calls that succeeded
  int64_t raw_allocations = 0;      // RawAllocate calls that succeeded
  int64_t raw_frees = 0;
  int64_t cache_hits = 0;           // served without a raw allocation
};

class CachingAllocator {
 public:
  struct Options {
    size_t round = 512;
    size_t small_limit = 1 << 20;
    size_t small_segment = 2 << 20;
    size_t large_segment_min = 20 << 20;  // for requests below 10 MiB
    size_t large_round = 2 << 20;
  };

  explicit CachingAllocator(RawAllocator* raw);
  CachingAllocator(RawAllocator* raw, Options options);
  // Returns every segment to the raw allocator.
  ~CachingAllocator();

  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 allowed), contents undefined.
  absl::StatusOr<void*> Allocate(size_t bytes);
  // `p` must come from Allocate and not be freed yet (else: fatal).
  void Free(void* p);
  // The rounded size of a live block.
  size_t BlockSize(void* p) const;
  // Returns cached segments that are wholly free; the bytes released.
  size_t ReleaseCache();

  CachingAllocatorStats stats() const;
  void ResetPeaks();
  const Options& options() const { return options_; }

 private:
  struct Block;
  struct BySizeThenAddress {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BySizeThenAddress>;

  size_t RoundUp(size_t bytes) const;
  size_t SegmentSize(size_t rounded, bool small) const;
  bool ShouldSplit(size_t remaining, bool small) const;
  size_t ReleaseCacheLocked();
  void NotePeaks();

  RawAllocator* raw_;
  Options options_;
  mutable std::mutex mu_;
  Pool small_free_;
  Pool large_free_;
  std::unordered_map<void*, Block*> live_;
  CachingAllocatorStats stats_;
};

}  // namespace zero

#endif  // ZERO_CORE_DEVICE_CACHING_ALLOCATOR_H_

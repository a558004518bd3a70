#include "core/device/caching_allocator.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace zero {

// One piece of a raw segment. Blocks of a segment form a doubly linked list
// in address order; a segment is wholly free when its only block is free and
// has no neighbours.
struct CachingAllocator::Block {
  char* ptr;
  size_t size;
  bool small;
  bool allocated = false;
  Block* prev = nullptr;
  Block* next = nullptr;
};

bool CachingAllocator::BySizeThenAddress::operator()(const Block* a,
                                                     const Block* b) const {
  if (a->size != b->size) return a->size < b->size;
  return a->ptr < b->ptr;
}

CachingAllocator::CachingAllocator(RawAllocator* raw)
    : CachingAllocator(raw, Options()) {}

CachingAllocator::CachingAllocator(RawAllocator* raw, Options options)
    : raw_(raw), options_(options) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> lock(mu_);
  // Live blocks are leaks of the caller; free them so segments become whole.
  std::vector<void*> live;
  for (auto& kv : live_) live.push_back(kv.first);
  for (void* p : live) {
    Block* b = live_[p];
    b->allocated = false;
    (b->small ? small_free_ : large_free_).insert(b);
    live_.erase(p);
  }
  // Merge neighbours, then release whole segments.
  for (Pool* pool : {&small_free_, &large_free_}) {
    std::vector<Block*> firsts;
    for (Block* b : *pool)
      if (b->prev == nullptr) firsts.push_back(b);
    for (Block* first : firsts) {
      size_t seg = 0;
      for (Block* b = first; b != nullptr;) {
        Block* next = b->next;
        seg += b->size;
        if (b != first) delete b;
        b = next;
      }
      raw_->RawFree(first->ptr, seg);
      delete first;
    }
    pool->clear();
  }
}

size_t CachingAllocator::RoundUp(size_t bytes) const {
  size_t r = options_.round;
  if (bytes == 0) return r;
  return (bytes + r - 1) / r * r;
}

size_t CachingAllocator::SegmentSize(size_t rounded, bool small) const {
  if (small) return options_.small_segment;
  if (rounded < options_.large_segment_min / 2) return options_.large_segment_min;
  size_t r = options_.large_round;
  return (rounded + r - 1) / r * r;
}

bool CachingAllocator::ShouldSplit(size_t remaining, bool small) const {
  return small ? remaining >= options_.round : remaining > options_.small_limit;
}

void CachingAllocator::NotePeaks() {
  if (stats_.allocated_bytes > stats_.peak_allocated_bytes)
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  if (stats_.reserved_bytes > stats_.peak_reserved_bytes)
    stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t size = RoundUp(bytes);
  const bool small = size <= options_.small_limit;
  Pool& pool = small ? small_free_ : large_free_;

  Block key{nullptr, size, small};
  auto it = pool.lower_bound(&key);
  Block* b = nullptr;
  if (it != pool.end()) {
    b = *it;
    pool.erase(it);
    ++stats_.cache_hits;
  } else {
    size_t seg = SegmentSize(size, small);
    absl::StatusOr<void*> p = raw_->RawAllocate(seg);
    if (!p.ok()) {
      ReleaseCacheLocked();
      p = raw_->RawAllocate(seg);
    }
    const size_t tight = (size + options_.large_round - 1) /
                         options_.large_round * options_.large_round;
    if (!p.ok() && !small && tight < seg) {  // a segment just big enough
      seg = tight;
      p = raw_->RawAllocate(seg);
    }
    if (!p.ok()) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "caching allocator: cannot allocate ", bytes, " bytes (segment ",
          seg, "; ", stats_.allocated_bytes, " allocated, ",
          stats_.reserved_bytes, " reserved): ", p.status().message()));
    }
    b = new Block{static_cast<char*>(*p), seg, small};
    ++stats_.raw_allocations;
    stats_.reserved_bytes += seg;
  }

  const size_t remaining = b->size - size;
  if (ShouldSplit(remaining, small)) {
    Block* rest = new Block{b->ptr + size, remaining, small};
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool.insert(rest);
  }
  b->allocated = true;
  live_[b->ptr] = b;
  stats_.allocated_bytes += b->size;
  ++stats_.allocations;
  NotePeaks();
  return static_cast<void*>(b->ptr);
}

void CachingAllocator::Free(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) {
    std::fprintf(stderr, "caching allocator: free of unknown pointer %p\n", p);
    std::abort();
  }
  Block* b = it->second;
  live_.erase(it);
  b->allocated = false;
  stats_.allocated_bytes -= b->size;
  Pool& pool = b->small ? small_free_ : large_free_;
  // Merge with free neighbours (they are in the pool; take them out first).
  if (b->prev && !b->prev->allocated) {
    Block* prev = b->prev;
    pool.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next) b->next->prev = prev;
    delete b;
    b = prev;
  }
  if (b->next && !b->next->allocated) {
    Block* next = b->next;
    pool.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    delete next;
  }
  pool.insert(b);
}

size_t CachingAllocator::BlockSize(void* p) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  return it == live_.end() ? 0 : it->second->size;
}

size_t CachingAllocator::ReleaseCache() {
  std::lock_guard<std::mutex> lock(mu_);
  return ReleaseCacheLocked();
}

size_t CachingAllocator::ReleaseCacheLocked() {
  size_t released = 0;
  for (Pool* pool : {&small_free_, &large_free_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev == nullptr && b->next == nullptr) {
        raw_->RawFree(b->ptr, b->size);
        stats_.reserved_bytes -= b->size;
        ++stats_.raw_frees;
        released += b->size;
        delete b;
        it = pool->erase(it);
      } else {
        ++it;
      }
    }
  }
  return released;
}

CachingAllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void CachingAllocator::ResetPeaks() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

}  // namespace zero

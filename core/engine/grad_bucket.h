// Gradient buckets (reduce_bucket_size elements each, two of them): the
// caller fills one while the other is reduced on the comm stream.
#ifndef ZERO_CORE_ENGINE_GRAD_BUCKET_H_
#define ZERO_CORE_ENGINE_GRAD_BUCKET_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "core/comm/comm_stream.h"
#include "core/common/dtype.h"
#include "core/device/device.h"

namespace zero {

struct GradBucket {
  DeviceBuffer data;  // working dtype, `capacity` elements
  int64_t capacity = 0;
  int64_t used = 0;
  std::vector<int> ids;          // params in hand-out order
  std::vector<int64_t> offsets;  // their slots, in elements
  std::vector<bool> ready;
  CommStream::Handle inflight;   // its last reduction

  int Find(int id) const {
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ids[k] == id) return static_cast<int>(k);
    }
    return -1;
  }
  bool AllReady() const {
    for (bool r : ready) {
      if (!r) return false;
    }
    return true;
  }
  bool HasRoom(int64_t numel) const { return used + numel <= capacity; }
  void Clear() {
    used = 0;
    ids.clear();
    offsets.clear();
    ready.clear();
  }
};

class GradBuckets {
 public:
  absl::Status Init(Device* device, DType dtype, int64_t capacity) {
    dtype_ = dtype;
    for (GradBucket& b : b_) {
      auto buf = DeviceBuffer::Make(device, capacity * DTypeSize(dtype));
      if (!buf.ok()) return buf.status();
      b.data = std::move(*buf);
      b.capacity = capacity;
    }
    return absl::OkStatus();
  }
  GradBucket& current() { return b_[cur_]; }
  int current_index() const { return cur_; }
  GradBucket& at(int i) { return b_[i]; }
  void Rotate() { cur_ = 1 - cur_; }
  // Hands out a zeroed slot of `numel` elements for `id` in the current
  // bucket, which must have room.
  void* AddSlot(int id, int64_t numel, Device* device) {
    GradBucket& b = current();
    const size_t es = DTypeSize(dtype_);
    char* p = b.data.data<char>() + b.used * es;
    device->Memset0(p, numel * es);
    b.ids.push_back(id);
    b.offsets.push_back(b.used);
    b.ready.push_back(false);
    b.used += numel;
    return p;
  }
  void* SlotPtr(int k) {
    return current().data.data<char>() + current().offsets[k] * DTypeSize(dtype_);
  }
  int64_t bytes() const {
    return static_cast<int64_t>(b_[0].data.bytes() + b_[1].data.bytes());
  }

 private:
  GradBucket b_[2];
  int cur_ = 0;
  DType dtype_ = DType::kF32;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_GRAD_BUCKET_H_

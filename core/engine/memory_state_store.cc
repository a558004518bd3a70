#include "core/engine/memory_state_store.h"

#include <algorithm>

#include "core/common/status_macros.h"

namespace zero {

absl::Status DeviceStateStore::Allocate(const std::vector<int64_t>& owned_lens) {
  const int arrays = StateArrays(ctx_->config);
  groups_.resize(owned_lens.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].len = owned_lens[g];
    for (int a = 0; a < arrays; ++a) {
      ASSIGN_OR_RETURN(groups_[g].a[a], DeviceBuffer::Make(mem_, owned_lens[g] * 4));
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceStateStore::Initialize(const InitVisitor& init) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    float* master = groups_[g].a[0].data<float>();
    init(static_cast<int>(g), 0, groups_[g].len, [&](int64_t at, int64_t len, const float* src) {
      mem_->UploadF32(src, master + at, DType::kF32, len);
    });
  }
  return absl::OkStatus();
}

absl::Status DeviceStateStore::Update(const OptimizerUpdate& u) {
  for (size_t g = 0; g < groups_.size(); ++g) {
    Arrays& s = groups_[g];
    float* m = s.a[1].data<float>();
    float* v = s.a[2].data<float>();
    for (int64_t b = 0; b < s.len; b += u.piece) {
      const int64_t len = std::min(u.piece, s.len - b);
      RETURN_IF_ERROR(u.on_device(static_cast<int>(g), b, len, s.a[0].data<float>() + b,
                                  m ? m + b : nullptr, v ? v + b : nullptr));
    }
  }
  return absl::OkStatus();
}

absl::Status DeviceStateStore::Read(int g, int array, int64_t begin, int64_t len, float* out) {
  const DeviceBuffer& b = groups_[g].a[array];
  if (b.data() == nullptr) return absl::InvalidArgumentError("read_owned_state: no such state");
  mem_->DownloadF32(b.data<float>() + begin, DType::kF32, out, len);
  return absl::OkStatus();
}

absl::Status DeviceStateStore::Write(int g, int array, int64_t begin, int64_t len,
                                     const float* in) {
  DeviceBuffer& b = groups_[g].a[array];
  if (b.data() == nullptr) return absl::InvalidArgumentError("write_owned_state: no such state");
  mem_->UploadF32(in, b.data<float>() + begin, DType::kF32, len);
  return absl::OkStatus();
}

absl::StatusOr<const float*> DeviceStateStore::MasterOnDevice(int g, int64_t begin,
                                                              int64_t len, DeviceBuffer*) {
  return groups_[g].a[0].data<float>() + begin;
}

absl::Status DeviceStateStore::CastMaster(int g, void* dst) {
  ctx_->device->FromF32(groups_[g].a[0].data<float>(), dst, ctx_->dtype(), groups_[g].len);
  return absl::OkStatus();
}

float* DeviceStateStore::InMemory(int g, int array) { return groups_[g].a[array].data<float>(); }

StateStoreStats DeviceStateStore::stats() const {
  StateStoreStats s;
  for (const Arrays& g : groups_) {
    s.master_bytes += g.a[0].bytes();
    s.optimizer_bytes += g.a[1].bytes() + g.a[2].bytes();
  }
  return s;
}

}  // namespace zero

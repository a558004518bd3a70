#include "core/engine/host_state_store.h"

#include <algorithm>
#include <future>
#include <vector>

#include "core/common/status_macros.h"
#include "core/engine/sharded_state.h"

namespace zero {
namespace {

// At least about 8 pieces over the owned range (of 64K elements or more):
// with one piece the copy down, the update and the copy up run one after
// another; with k, all but about 2/k of the copies overlap the update.
int64_t HostPieceCap(const Config& c, const std::vector<int64_t>& owned) {
  int64_t total = 0;
  for (int64_t len : owned) total += len;
  return std::max<int64_t>(1, std::min<int64_t>({c.sub_group_size, int64_t{1} << 22,
                                                 std::max<int64_t>(int64_t{1} << 16,
                                                                   (total + 7) / 8)}));
}

}  // namespace

int64_t HostUpdatePieceElems(const Config& c, const std::vector<int64_t>& owned) {
  const int64_t cap = HostPieceCap(c, owned);
  int64_t piece = 0;
  for (int64_t len : owned) piece = std::max(piece, std::min(cap, len));
  return piece;
}

absl::Status HostStateStore::Update(const OptimizerUpdate& u) {
  if (ctx_->config.offload_optimizer.delayed_update) return UpdateDelayed(u);
  return UpdatePipelined(u);
}

absl::Status HostStateStore::UpdateDelayed(const OptimizerUpdate& u) {
  if (delayed_ == nullptr) {
    std::vector<int64_t> lens;
    for (const Arrays& a : groups_) lens.push_back(a.len);
    delayed_ = std::make_unique<DelayedHostUpdate>(ctx_, sharded_, std::move(lens));
  }
  // The scalars are this step's (learning rate, bias corrections, the
  // unscale-and-clip factor of this step's gradients), taken by value.
  return delayed_->Start(*u.grads, [this, scalars = u.scalars](int g, const float* grad,
                                                               char* work) {
    Arrays& s = groups_[g];
    float* s1 = s.a[1].data<float>();
    float* s2 = s.a[2].data<float>();
    ctx_->host->OptimizerStep(scalars, const_cast<float*>(grad), DType::kF32,
                              s.a[0].data<float>(), s1, s2, s.len, work, ctx_->dtype(),
                              /*zero_grad=*/false);
  });
}

absl::StatusOr<bool> HostStateStore::LandDelayed() {
  if (delayed_ == nullptr) return false;
  return delayed_->Land();
}

absl::Status HostStateStore::Read(int g, int array, int64_t begin, int64_t len, float* out) {
  JoinDelayed();
  return DeviceStateStore::Read(g, array, begin, len, out);
}

absl::Status HostStateStore::Write(int g, int array, int64_t begin, int64_t len,
                                   const float* in) {
  JoinDelayed();
  if (array == 0 && delayed_ != nullptr) delayed_->PatchPending(g, begin, len, in);
  return DeviceStateStore::Write(g, array, begin, len, in);
}

float* HostStateStore::InMemory(int g, int array) {
  JoinDelayed();
  return DeviceStateStore::InMemory(g, array);
}

absl::Status HostStateStore::UpdatePipelined(const OptimizerUpdate& u) {
  Device* device = ctx_->device;
  Device* host = ctx_->host;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  const bool pin = ctx_->config.offload_optimizer.pin_memory;
  struct Piece {
    int g;
    int64_t begin, len;
  };
  std::vector<Piece> pieces;
  std::vector<int64_t> owned;
  for (const Arrays& a : groups_) owned.push_back(a.len);
  const int64_t cap = HostPieceCap(ctx_->config, owned);
  int64_t largest = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int64_t b = 0; b < groups_[g].len; b += cap) {
      pieces.push_back({static_cast<int>(g), b, std::min(cap, groups_[g].len - b)});
      largest = std::max(largest, pieces.back().len);
    }
  }
  if (pieces.empty()) return absl::OkStatus();
  // Two grad buffers and two working-copy buffers, freed on every path.
  std::vector<void*> bufs;
  auto free_all = [&] {
    for (void* p : bufs) device->FreeHost(p, pin);
  };
  for (int i = 0; i < 4; ++i) {
    auto p = device->AllocateHost(largest * (i < 2 ? sizeof(float) : es), pin);
    if (!p.ok()) {
      free_all();
      return p.status();
    }
    bufs.push_back(*p);
  }
  float* gbuf[2] = {static_cast<float*>(bufs[0]), static_cast<float*>(bufs[1])};
  char* wbuf[2] = {static_cast<char*>(bufs[2]), static_cast<char*>(bufs[3])};
  const std::vector<float*>& g32 = *u.grads;
  auto down = [&](size_t k) {
    const Piece& p = pieces[k];
    return std::async(std::launch::async, [device, p, dst = gbuf[k % 2], src = g32[p.g]] {
      device->Copy(dst, src + p.begin, p.len * sizeof(float));
    });
  };
  std::future<void> next = down(0), up;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    Arrays& s = groups_[p.g];
    next.wait();
    if (k + 1 < pieces.size()) next = down(k + 1);
    float* s1 = s.a[1].data<float>();
    float* s2 = s.a[2].data<float>();
    // Packed moments: 8-bit pieces start on a block (cap is a multiple of 64).
    s1 = packed_ ? Packed(p.g, p.begin) : s1 ? s1 + p.begin : nullptr;
    host->OptimizerStep(u.scalars, gbuf[k % 2], DType::kF32, s.a[0].data<float>() + p.begin,
                        s1, s2 ? s2 + p.begin : nullptr, p.len,
                        wbuf[k % 2], t, /*zero_grad=*/false);
    if (up.valid()) up.wait();
    char* work = sharded_->OwnedWorking(p.g, p.begin);
    up = std::async(std::launch::async, [device, work, src = wbuf[k % 2], bytes = p.len * es] {
      device->Copy(work, src, bytes);
    });
  }
  up.wait();
  free_all();
  return absl::OkStatus();
}

absl::StatusOr<const float*> HostStateStore::MasterOnDevice(int g, int64_t begin, int64_t len,
                                                            DeviceBuffer* scratch) {
  JoinDelayed();
  ASSIGN_OR_RETURN(*scratch, DeviceBuffer::Make(ctx_->device, len * 4));
  if (len > 0) ctx_->device->Copy(scratch->data(), groups_[g].a[0].data<float>() + begin, len * 4);
  return scratch->data<float>();
}

// Cast on the host, copy up.
absl::Status HostStateStore::CastMaster(int g, void* dst) {
  JoinDelayed();
  std::vector<char> cast(groups_[g].len * ctx_->es());
  ctx_->host->FromF32(groups_[g].a[0].data<float>(), cast.data(), ctx_->dtype(), groups_[g].len);
  ctx_->device->Copy(dst, cast.data(), cast.size());
  return absl::OkStatus();
}

}  // namespace zero

#include "core/engine/host_state_store.h"

#include <algorithm>
#include <vector>

#include "core/common/status_macros.h"
#include "core/engine/copy_lane.h"
#include "core/engine/sharded_state.h"

namespace zero {
namespace {

// At least about 8 pieces over the owned range (of 64K elements or more):
// with one piece the copy down, the update and the copy up run one after
// another; with k, all but about 2/k of the copies overlap the update. A
// multiple of 64 (8-bit moments' blocks) where sub_group_size allows.
int64_t HostPieceCap(const Config& c, const std::vector<int64_t>& owned) {
  int64_t total = 0;
  for (int64_t len : owned) total += len;
  int64_t cap = std::max<int64_t>(int64_t{1} << 16, (total + 7) / 8) / 64 * 64;
  return std::max<int64_t>(1, std::min<int64_t>({c.sub_group_size, int64_t{1} << 22, cap}));
}

}  // namespace

int64_t HostUpdatePieceElems(const Config& c, const std::vector<int64_t>& owned) {
  int64_t piece = 0;
  for (const HostPiece& p : HostUpdatePieces(c, owned)) piece = std::max(piece, p.len);
  return piece;
}

std::vector<HostPiece> HostUpdatePieces(const Config& c, const std::vector<int64_t>& owned) {
  const int64_t cap = HostPieceCap(c, owned);
  std::vector<HostPiece> pieces;
  for (size_t g = 0; g < owned.size(); ++g) {
    for (int64_t b = 0; b < owned[g]; b += cap) {
      pieces.push_back({static_cast<int>(g), b, std::min(cap, owned[g] - b)});
    }
  }
  // The pipeline's fill (the first piece's copy down) and drain (the last
  // one's copy up) overlap nothing: the first and last pieces are cut to a
  // quarter (on a multiple of 64), so they cost a quarter of a piece's copy.
  auto quarter = [](int64_t len) { return (len / 4 + 63) / 64 * 64; };
  if (pieces.size() >= 2 && quarter(pieces.front().len) < pieces.front().len) {
    HostPiece& f = pieces.front();
    const int64_t q = quarter(f.len);
    pieces.insert(pieces.begin() + 1, {f.g, f.begin + q, f.len - q});
    pieces.front().len = q;
  }
  if (pieces.size() >= 3) {
    HostPiece& l = pieces.back();
    const int64_t keep = (l.len - quarter(l.len)) / 64 * 64;
    if (keep > 0 && keep < l.len) {
      const HostPiece tail{l.g, l.begin + keep, l.len - keep};
      l.len = keep;
      pieces.push_back(tail);
    }
  }
  return pieces;
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

absl::Status HostStateStore::EnsurePipeline(int64_t largest) {
  if (down_ == nullptr) {
    down_ = std::make_unique<CopyLane>();
    up_ = std::make_unique<CopyLane>();
  }
  if (largest <= buffer_elems_) return absl::OkStatus();
  FreeBuffers();
  Device* device = ctx_->device;
  const bool pin = ctx_->config.offload_optimizer.pin_memory;
  for (int i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(void* g, device->AllocateHost(largest * sizeof(float), pin));
    gbuf_[i] = static_cast<float*>(g);
    ASSIGN_OR_RETURN(void* w, device->AllocateHost(largest * ctx_->es(), pin));
    wbuf_[i] = static_cast<char*>(w);
  }
  buffer_elems_ = largest;
  return absl::OkStatus();
}

void HostStateStore::FreeBuffers() {
  const bool pin = ctx_->config.offload_optimizer.pin_memory;
  for (int i = 0; i < 2; ++i) {
    if (gbuf_[i] != nullptr) ctx_->device->FreeHost(gbuf_[i], pin);
    if (wbuf_[i] != nullptr) ctx_->device->FreeHost(wbuf_[i], pin);
    gbuf_[i] = nullptr;
    wbuf_[i] = nullptr;
  }
  buffer_elems_ = 0;
}

HostStateStore::~HostStateStore() {
  JoinDelayed();
  down_.reset();  // every copy ran before the buffers go
  up_.reset();
  FreeBuffers();
}

absl::Status HostStateStore::UpdatePipelined(const OptimizerUpdate& u) {
  Device* device = ctx_->device;
  Device* host = ctx_->host;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  std::vector<int64_t> owned;
  for (const Arrays& a : groups_) owned.push_back(a.len);
  const std::vector<HostPiece> pieces = HostUpdatePieces(ctx_->config, owned);
  if (pieces.empty()) return absl::OkStatus();
  int64_t largest = 0;
  for (const HostPiece& p : pieces) largest = std::max(largest, p.len);
  RETURN_IF_ERROR(EnsurePipeline(largest));
  const std::vector<float*>& g32 = *u.grads;
  // Piece k's gradients land in gbuf_[k % 2], its working copy is cast into
  // wbuf_[k % 2]. The copy down of piece k+1 is queued before the update of
  // piece k starts and the copy up of piece k right after it ends: the CPU
  // waits for a copy only when the update needs its buffer.
  auto down = [&](size_t k) {
    const HostPiece& p = pieces[k];
    return down_->Submit([device, p, dst = gbuf_[k % 2], src = g32[p.g]] {
      device->Copy(dst, src + p.begin, p.len * sizeof(float));
    });
  };
  int64_t next = down(0);
  int64_t up[2] = {0, 0};  // the copy up last queued from each wbuf_
  for (size_t k = 0; k < pieces.size(); ++k) {
    const HostPiece& p = pieces[k];
    Arrays& s = groups_[p.g];
    down_->Wait(next);
    if (k + 1 < pieces.size()) next = down(k + 1);
    float* s1 = s.a[1].data<float>();
    float* s2 = s.a[2].data<float>();
    // Packed moments: 8-bit pieces start on a block (pieces start on a
    // multiple of 64).
    s1 = packed_ ? Packed(p.g, p.begin) : s1 ? s1 + p.begin : nullptr;
    if (up[k % 2] > 0) up_->Wait(up[k % 2]);  // piece k-2's copy up read wbuf_[k % 2]
    host->OptimizerStep(u.scalars, gbuf_[k % 2], DType::kF32, s.a[0].data<float>() + p.begin,
                        s1, s2 ? s2 + p.begin : nullptr, p.len, wbuf_[k % 2], t,
                        /*zero_grad=*/false);
    char* work = sharded_->OwnedWorking(p.g, p.begin);
    up[k % 2] = up_->Submit([device, work, src = wbuf_[k % 2], bytes = p.len * es] {
      device->Copy(work, src, bytes);
    });
  }
  up_->Drain();
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

#include "core/engine/zeropp_gather.h"

#include <algorithm>

#include "core/common/status_macros.h"
#include "core/engine/hierarchy.h"
#include "kernels/quant_math.h"

namespace zero {
namespace {

// qwZ quantizes weights to int8.
constexpr int kWeightBits = 8;

absl::Status Grow(Device* d, DeviceBuffer* b, size_t bytes) {
  if (b->bytes() >= bytes) return absl::OkStatus();
  b->Reset();
  ASSIGN_OR_RETURN(*b, DeviceBuffer::Make(d, std::max<size_t>(bytes, 64)));
  return absl::OkStatus();
}

}  // namespace

bool ZeroPPGather::enabled() const {
  return ctx_->config.quantized_weights || (ctx_->hier && ctx_->hier->hpz());
}

std::vector<int64_t> ZeroPPGather::SecondaryCounts(int64_t numel) const {
  const int p = ctx_->hier->hpz()->world_size();
  std::vector<int64_t> c(p, numel / p);
  for (int i = 0; i < numel % p; ++i) ++c[i];
  return c;
}

void ZeroPPGather::Invalidate(int li) {
  if (li < static_cast<int>(valid_.size())) valid_[li] = 0;
}

void ZeroPPGather::InvalidateAll() { std::fill(valid_.begin(), valid_.end(), 0); }

int64_t ZeroPPGather::secondary_bytes() const {
  int64_t n = 0;
  for (const DeviceBuffer& b : secondary_) n += static_cast<int64_t>(b.bytes());
  return n;
}

absl::Status ZeroPPGather::QuantizedGather(int li, void* dst) {
  Device* d = ctx_->device;
  const Layout& layout = ctx_->layout;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  const int block = ctx_->config.quantization_block_size;
  const int world = ctx_->world, rank = ctx_->rank;
  const std::vector<int64_t> counts = layout.Counts(li);
  std::vector<int64_t> bytes(world), units(world), offset(world + 1, 0);
  int64_t largest = 0;
  for (int r = 0; r < world; ++r) {
    bytes[r] = math::QuantPackedBytes(counts[r], kWeightBits, block);
    units[r] = bytes[r] / 2;  // moved as 2-byte units
    offset[r + 1] = offset[r] + bytes[r];
    largest = std::max(largest, counts[r]);
  }
  RETURN_IF_ERROR(Grow(d, &packed_, static_cast<size_t>(offset[world])));
  if (t != DType::kF32) RETURN_IF_ERROR(Grow(d, &f32_, static_cast<size_t>(largest) * 4));
  std::vector<char> scratch;
  ASSIGN_OR_RETURN(const char* mine, sharded_->OwnSlice(li, &scratch));
  // offload_param cpu/nvme beside a GPU: the own slice is host memory, which
  // the device's cast and quantize kernels cannot read (a GPU faults); up
  // first, as ShardedState::GatherInto does, freed on return.
  DeviceBuffer up;
  if (sharded_->shard_on_host()) {
    const size_t own_bytes = static_cast<size_t>(counts[rank]) * es;
    ASSIGN_OR_RETURN(up, DeviceBuffer::Make(d, std::max<size_t>(own_bytes, 1)));
    if (own_bytes > 0) d->Copy(up.data(), mine, own_bytes);
    mine = up.data<char>();
  }
  char* packed = packed_.data<char>();
  const float* x = reinterpret_cast<const float*>(mine);
  if (t != DType::kF32) {
    d->ToF32(mine, t, f32_.data<float>(), counts[rank], 1.0f);
    x = f32_.data<float>();
  }
  d->Quantize(x, counts[rank], kWeightBits, block, packed + offset[rank]);
  LinkCountingCommunicator* comm = ctx_->hier->data();
  RETURN_IF_ERROR(comm->inner()->AllGatherV(packed + offset[rank], packed, units, DType::kF16));
  comm->CountPeers(CollectiveKind::kAllGather, counts, bytes);
  int64_t at = 0;
  for (int r = 0; r < world; ++r) {
    char* out = static_cast<char*>(dst) + at * es;
    if (t == DType::kF32) {
      d->Dequantize(packed + offset[r], counts[r], kWeightBits, block,
                    reinterpret_cast<float*>(out), false);
    } else {
      d->Dequantize(packed + offset[r], counts[r], kWeightBits, block, f32_.data<float>(), false);
      d->FromF32(f32_.data<float>(), out, t, counts[r]);
    }
    at += counts[r];
  }
  return absl::OkStatus();
}

absl::Status ZeroPPGather::GatherInto(int li, void* dst) {
  LinkCountingCommunicator* hpz = ctx_->hier ? ctx_->hier->hpz() : nullptr;
  const int64_t numel = ctx_->layout.params()[li].numel;
  const size_t es = ctx_->es();
  if (valid_.empty()) {
    valid_.assign(ctx_->layout.params().size(), 0);
    secondary_.resize(ctx_->layout.params().size());
  }
  if (hpz && valid_[li]) {
    return hpz->AllGatherV(secondary_[li].data(), dst, SecondaryCounts(numel), ctx_->dtype());
  }
  if (ctx_->config.quantized_weights) {
    RETURN_IF_ERROR(QuantizedGather(li, dst));
  } else {
    RETURN_IF_ERROR(sharded_->GatherInto(li, dst));
  }
  if (hpz) {
    const std::vector<int64_t> c = SecondaryCounts(numel);
    int64_t at = 0;
    for (int r = 0; r < hpz->rank(); ++r) at += c[r];
    const size_t bytes = static_cast<size_t>(c[hpz->rank()]) * es;
    if (secondary_[li].bytes() < bytes || !secondary_[li].data()) {
      ASSIGN_OR_RETURN(secondary_[li], DeviceBuffer::Make(ctx_->device, std::max<size_t>(bytes, 1)));
    }
    if (bytes > 0) ctx_->device->Copy(secondary_[li].data(), static_cast<char*>(dst) + at * es, bytes);
    valid_[li] = 1;
  }
  return absl::OkStatus();
}

}  // namespace zero

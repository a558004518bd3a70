#include "core/engine/nvme_state_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"
#include "core/engine/packed_moments.h"
#include "kernels/moments_format_math.h"

namespace zero {

absl::Status NvmeStateStore::Create(const std::vector<int64_t>& owned_lens) {
  const OffloadConfig& oc = ctx_->config.offload_optimizer;
  // On the CPU device the optimizer runs over the tier's staging buffers in
  // place; on a GPU each piece goes up to the device and back (Update).
  if (staged() && ctx_->host == nullptr) {
    return absl::InternalError("nvme state on a device needs the host device");
  }
  lens_ = owned_lens;
  offload::NvmeTierOptions o;
  o.dir = oc.nvme_path;
  o.rank = ctx_->rank;
  o.atomic_step = oc.atomic_step;
  o.num_arrays = StateArrays(ctx_->config);
  o.buffer_count = oc.buffer_count;
  o.chunk_elems = ctx_->config.sub_group_size;
  // Packed moments: array 1 holds their bytes (8-bit: 136 per 64 elements;
  // chunk starts are block starts, sub_group_size % 64 == 0).
  const Config* config = &ctx_->config;
  o.array_bytes = [config](int a, int64_t n) { return StateArrayBytes(*config, a, n); };
  o.aio.queue_depth = ctx_->config.aio.queue_depth;
  o.aio.block_size = ctx_->config.aio.block_size;
  o.aio.recorder = ctx_->recorder;
  o.progress = ctx_->progress;
  if (staged()) {
    // NVMe <-> host staging <-> device: the tier's buffers are the staging,
    // page-locked through the device when pin_memory, so the copies to and
    // from the GPU run at the link's speed (docs/ARCHITECTURE.md, "Offload").
    Device* d = ctx_->device;
    const bool pin = oc.pin_memory;
    o.alloc_host = [d, pin](size_t bytes) { return d->AllocateHost(bytes, pin); };
    o.free_host = [d, pin](void* p) { d->FreeHost(p, pin); };
  }
  ASSIGN_OR_RETURN(tier_, offload::NvmeTier::Create(o, owned_lens));
  if (PackedFormat(ctx_->config) == math::kMomentsQ8) {
    offload::NvmeTier* tier = tier_.get();
    combiner_ = std::make_unique<Q8LoadCombiner>(
        [tier](int g, int64_t first, int64_t n, void* bytes) {
          return tier->ReadBytes(g, 1, first, n, bytes);
        },
        [tier](int g, int64_t first, int64_t n, void* bytes) {
          return tier->WriteBytes(g, 1, first, n, bytes);
        });
  }
  if (staged()) {  // two device buffers of the largest piece, for Update
    int64_t piece = 0;
    for (int64_t len : owned_lens) {
      piece = std::max(piece, std::min<int64_t>(std::max<int64_t>(1, o.chunk_elems), len));
    }
    half_bytes_ = PieceBytes(std::max<int64_t>(1, piece), StateArrays(ctx_->config));
    ASSIGN_OR_RETURN(up_, DeviceBuffer::Make(ctx_->device, 2 * half_bytes_));
  }
  const offload::NvmeTierStats st = tier_->stats();
  if (!st.note.empty()) {
    std::fprintf(stderr, "[zero] rank %d: nvme offload under '%s': %s\n", ctx_->rank,
                 oc.nvme_path.c_str(), st.note.c_str());
  }
  return absl::OkStatus();
}

absl::Status NvmeStateStore::Initialize(const InitVisitor& init) {
  return tier_->Initialize([&](const offload::NvmeTier::Chunk& c, float* const* arr) {
    init(c.group, c.begin, c.begin + c.len, [&](int64_t at, int64_t len, const float* src) {
      std::memcpy(arr[0] + (at - c.begin), src, len * 4);
    });
    return absl::OkStatus();
  });
}

absl::Status NvmeStateStore::Update(const OptimizerUpdate& u) {
  const int arrays = StateArrays(ctx_->config);
  Device* d = ctx_->device;
  // A GPU: piece k's state up into half k % 2 of up_, the device's kernels
  // (the same bits as in memory), the state back down for the tier to
  // write. With async_uploads(), once k's kernels are queued, piece k+1
  // (waited for from NVMe meanwhile) goes up into the other half on the
  // copy stream, overlapping k's download; piece k+1 waits for its events
  // (docs/ARCHITECTURE.md, "Offload").
  size_t k = 0;
  struct Pending {
    bool on = false;
    int group = -1;
    int64_t begin = -1;
    void* events[3] = {nullptr, nullptr, nullptr};
  } pending;
  auto wait_pending = [&] {
    for (void*& e : pending.events) {
      d->WaitForUpload(e);
      e = nullptr;
    }
    pending.on = false;
  };
  absl::Status s = tier_->Update(
      [&](const offload::NvmeTier::Chunk& c, float* const* arr) -> absl::Status {
        if (!staged()) {
          return u.on_device(c.group, c.begin, c.len, arr[0], arrays > 1 ? arr[1] : nullptr,
                             arrays > 2 ? arr[2] : nullptr);
        }
        if (PieceBytes(c.len, arrays) > half_bytes_) {
          return absl::InternalError("nvme state: a piece larger than its device buffer");
        }
        float* dev[3] = {nullptr, nullptr, nullptr};
        OnDevice(k % 2, c.len, arrays, dev);
        const bool uploaded = pending.on && pending.group == c.group && pending.begin == c.begin;
        wait_pending();
        if (!uploaded) {
          for (int a = 0; a < arrays; ++a) d->Copy(dev[a], arr[a], ArrayBytes(a, c.len));
        }
        RETURN_IF_ERROR(u.on_device(c.group, c.begin, c.len, dev[0], dev[1], dev[2]));
        if (d->async_uploads()) {
          const offload::NvmeTier::Next next = tier_->PeekNext();
          if (next.chunk != nullptr) {
            float* nb[3] = {nullptr, nullptr, nullptr};
            OnDevice((k + 1) % 2, next.chunk->len, arrays, nb);
            for (int a = 0; a < arrays; ++a) {
              pending.events[a] = d->UploadAsync(nb[a], next.arrays[a],
                                                 ArrayBytes(a, next.chunk->len));
            }
            pending.on = true;
            pending.group = next.chunk->group;
            pending.begin = next.chunk->begin;
          }
        }
        for (int a = 0; a < arrays; ++a) d->Copy(arr[a], dev[a], ArrayBytes(a, c.len));
        ++k;
        return d->status();
      },
      u.agree);
  wait_pending();  // a step that stopped early: every event waited for once
  return s;
}

std::vector<UpdatePiece> NvmeStateStore::UpdateOrder() const {
  std::vector<UpdatePiece> order;
  for (const offload::NvmeTier::Chunk& c : tier_->chunks()) {
    order.push_back(UpdatePiece{c.group, c.begin, c.len});
  }
  return order;
}

size_t NvmeStateStore::ArrayBytes(int a, int64_t n) const {
  return static_cast<size_t>(StateArrayBytes(ctx_->config, a, n));
}

int64_t NvmeStateStore::PieceBytes(int64_t n, int arrays) const {
  int64_t bytes = 0;
  for (int a = 0; a < arrays; ++a) bytes += static_cast<int64_t>(ArrayBytes(a, n));
  return bytes;
}

void NvmeStateStore::OnDevice(size_t half, int64_t n, int arrays, float** dev) const {
  // Master first: 4n bytes, n a multiple of 64 (owned ranges are), so the
  // packed moments after it start 256-byte aligned.
  char* at = up_.data<char>() + static_cast<int64_t>(half) * half_bytes_;
  for (int a = 0; a < arrays; ++a) {
    dev[a] = reinterpret_cast<float*>(at);
    at += ArrayBytes(a, n);
  }
}

absl::Status NvmeStateStore::Read(int g, int array, int64_t begin, int64_t len, float* out) {
  // Packed moments: array 1 holds their bytes, read in whole blocks
  // (packed_moments.h).
  if (array > 0 && loading_ && !combiner_->empty()) {
    RETURN_IF_ERROR(combiner_->Flush(true));  // the loaded values, not the disk's
  }
  if (array > 0 && PackedFormat(ctx_->config) != 0) {
    return ReadPackedMoment(PackedFormat(ctx_->config), array, begin, len, out,
                            [&](int64_t first, int64_t n, void* bytes) {
                              return tier_->ReadBytes(g, 1, first, n, bytes);
                            });
  }
  return tier_->ReadRange(g, array, begin, len, out);
}

absl::Status NvmeStateStore::Write(int g, int array, int64_t begin, int64_t len,
                                   const float* in) {
  if (array > 0 && loading_) return combiner_->Write(g, array, begin, len, in);
  if (array > 0 && PackedFormat(ctx_->config) != 0) {
    return WritePackedMoment(
        PackedFormat(ctx_->config), array, begin, len, in,
        [&](int64_t first, int64_t n, void* bytes) {
          return tier_->ReadBytes(g, 1, first, n, bytes);
        },
        [&](int64_t first, int64_t n, void* bytes) {
          return tier_->WriteBytes(g, 1, first, n, bytes);
        });
  }
  return tier_->WriteRange(g, array, begin, len, in);
}

absl::StatusOr<const float*> NvmeStateStore::MasterOnDevice(int g, int64_t begin, int64_t len,
                                                            DeviceBuffer* scratch) {
  ASSIGN_OR_RETURN(*scratch, DeviceBuffer::Make(ctx_->device, std::max<int64_t>(len, 1) * 4));
  if (len > 0 && staged()) {  // read through host memory, then up
    std::vector<float> host(len);
    RETURN_IF_ERROR(tier_->ReadRange(g, 0, begin, len, host.data()));
    ctx_->device->Copy(scratch->data(), host.data(), len * 4);
  } else if (len > 0) {
    RETURN_IF_ERROR(tier_->ReadRange(g, 0, begin, len, scratch->data<float>()));
  }
  return scratch->data<float>();
}

absl::Status NvmeStateStore::CastMaster(int g, void* dst) {
  // Streamed: at most one sub-group of fp32 (and on a GPU its cast) in host
  // memory at a time, never the whole master.
  const int64_t piece =
      std::max<int64_t>(1, std::min<int64_t>(lens_[g], ctx_->config.sub_group_size));
  const size_t es = ctx_->es();
  ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Make(MemoryDevice(), piece * 4));
  std::vector<char> cast(staged() ? piece * es : 0);
  char* out = static_cast<char*>(dst);
  for (int64_t a = 0; a < lens_[g]; a += piece) {
    const int64_t n = std::min(piece, lens_[g] - a);
    RETURN_IF_ERROR(tier_->ReadRange(g, 0, a, n, buf.data<float>()));
    if (staged()) {  // cast in host memory, then up
      ctx_->host->FromF32(buf.data<float>(), cast.data(), ctx_->dtype(), n);
      ctx_->device->Copy(out + a * es, cast.data(), n * es);
    } else {
      ctx_->device->FromF32(buf.data<float>(), out + a * es, ctx_->dtype(), n);
    }
  }
  return absl::OkStatus();
}

// Checkpoints stream the state through Read/Write (ParamView::io): it is
// never resident as a whole.
float* NvmeStateStore::InMemory(int, int) { return nullptr; }

absl::Status NvmeStateStore::Materialize() {
  loading_ = combiner_ != nullptr;
  return absl::OkStatus();
}

absl::Status NvmeStateStore::Spill(bool write_back) {
  if (!loading_) return absl::OkStatus();
  loading_ = false;
  return combiner_->Flush(write_back);
}

StateStoreStats NvmeStateStore::stats() const {
  const offload::NvmeTierStats t = tier_->stats();
  StateStoreStats s;
  s.optimizer_bytes = t.host_bytes;  // staging buffers; master/m/v on disk
  s.device_buffer_bytes = static_cast<int64_t>(up_.bytes());
  s.file_bytes = t.file_bytes;
  s.read_bytes = t.bytes_read;
  s.write_bytes = t.bytes_written;
  s.direct_io = t.direct_io;
  s.uring = t.uring;
  s.note = t.note;
  return s;
}

}  // namespace zero

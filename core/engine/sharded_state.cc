#include "core/engine/sharded_state.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/common/status_macros.h"

namespace zero {

ShardedState::~ShardedState() {
  for (GroupShard& gs : groups_) {
    if (gs.host_working != nullptr) {
      ctx_->device->FreeHost(gs.host_working, ctx_->placement.pin_params);
    }
  }
}

absl::Status ShardedState::Allocate() {
  Device* d = ctx_->device;
  const Layout& layout = ctx_->layout;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  const int stage = ctx_->stage();
  // Where the own working shard and the gradient shard live
  // (core/engine/offload_placement.h; docs/ARCHITECTURE.md, "Offload"). A
  // host shard is uploaded for each gather (ZeRO++'s quantized gather
  // uploads the own slice as GatherInto does).
  const OffloadPlacement& where = ctx_->placement;
  const bool nvme_params = where.params == StateTier::kNvme;
  host_params_ = where.params == StateTier::kHost;
  const bool nvme_grads = where.grads_on_nvme;
  groups_.resize(layout.groups().size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const LayoutGroup& lg = layout.groups()[g];
    GroupShard& gs = groups_[g];
    gs.owned_begin = stage == 0 ? 0 : lg.shard * ctx_->rank;
    gs.owned_len = stage == 0 ? lg.padded : lg.shard;
    const int64_t work_len =
        stage == 3 ? (nvme_params || host_params_ ? 0 : lg.shard) : lg.padded;
    ASSIGN_OR_RETURN(gs.working, DeviceBuffer::Make(d, work_len * es));
    if (host_params_) {
      const size_t bytes = std::max<size_t>(1, lg.shard * es);
      ASSIGN_OR_RETURN(void* h, d->AllocateHost(bytes, ctx_->placement.pin_params));
      gs.host_working = static_cast<char*>(h);
      host_param_bytes_ += lg.shard * es;
    }
    const int64_t grad_len = stage <= 1 ? lg.padded : (nvme_grads ? 0 : lg.shard);
    ASSIGN_OR_RETURN(gs.grads, DeviceBuffer::Make(d, grad_len * es));
  }
  if (nvme_params) RETURN_IF_ERROR(CreateParamFiles());
  if (nvme_grads) RETURN_IF_ERROR(CreateGradFiles());
  // Stages 1-2: a shard larger than one all-gather's share of
  // allgather_bucket_size is published in chunks through this buffer.
  if ((stage == 1 || stage == 2) && ctx_->world > 1) {
    const int64_t chunk = GatherChunk();
    for (const LayoutGroup& lg : layout.groups()) {
      if (lg.shard > chunk) {
        ASSIGN_OR_RETURN(gather_staging_, DeviceBuffer::Make(d, chunk * ctx_->world * es));
        break;
      }
    }
  }
  // The working copy is the cast of the fp32 init values.
  for (size_t li = 0; li < layout.params().size(); ++li) {
    const ParamRecord& p = params_->by_layout(static_cast<int>(li));
    const ParamPlace& pl = layout.place(static_cast<int>(li));
    GroupShard& gs = groups_[pl.group];
    // The part of [offset, offset+numel) that this rank owns.
    const int64_t lo = std::max(pl.offset, gs.owned_begin);
    const int64_t hi = std::min(pl.offset + pl.numel, gs.owned_begin + gs.owned_len);
    if (stage <= 2) {
      char* dst = gs.working.data<char>() + pl.offset * es;
      params_->ProduceInit(p, 0, p.numel, [&](int64_t done, int64_t n, const float* src) {
        d->UploadF32(src, dst + done * es, t, n);
      });
    } else if (hi > lo && nvme_params) {
      std::vector<char> cast(std::min(hi - lo, ParamRegistry::kInitChunk) * es);
      absl::Status ws;
      params_->ProduceInit(p, lo - pl.offset, hi - lo, [&](int64_t done, int64_t n, const float* src) {
        if (ws.ok()) ws = PutOwnedF32(cast.data(), src, n);
        if (ws.ok()) {
          ws = param_files_[pl.group]->WriteCommitted((lo - gs.owned_begin + done) * es, n * es,
                                                      cast.data());
        }
      });
      RETURN_IF_ERROR(ws);
    } else if (hi > lo) {
      char* dst = OwnedWorking(pl.group, lo - gs.owned_begin);
      absl::Status ps;
      params_->ProduceInit(p, lo - pl.offset, hi - lo, [&](int64_t done, int64_t n, const float* src) {
        if (ps.ok()) ps = PutOwnedF32(dst + done * es, src, n);
      });
      RETURN_IF_ERROR(ps);
    }
  }
  frozen_.resize(params_->size());
  for (int id = 0; id < params_->size(); ++id) {
    const ParamRecord& p = params_->at(id);
    if (p.trainable) continue;
    const size_t fes = DTypeSize(p.dtype);
    ASSIGN_OR_RETURN(frozen_[id], DeviceBuffer::Make(d, p.numel * fes));
    char* dst = static_cast<char*>(frozen_[id].data());
    params_->ProduceInit(p, 0, p.numel, [&](int64_t done, int64_t n, const float* src) {
      d->UploadF32(src, dst + done * fes, p.dtype, n);
    });
  }
  return absl::OkStatus();
}

// Stage 3, offload_param "nvme": each group's own shard of the working copy
// in a preallocated file (core/offload/param_file.h) under a swap-directory
// claim (core/offload/swap_dir.h).
namespace {

// A file's blocks reserved: "nvme preallocate" progress (core/common/progress.h).
absl::Status Preallocated(const EngineContext& ctx, const char* key, int64_t done,
                          int64_t total) {
  if (!ctx.progress || ctx.progress("nvme preallocate", done, total)) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat(key, ": preallocation cancelled by the progress "
                                           "callback after ", done, " of ", total,
                                           " bytes (rank ", ctx.rank, ")"));
}

}  // namespace

absl::Status ShardedState::CreateParamFiles() {
  const size_t es = ctx_->es();
  const OffloadConfig& oc = ctx_->config.offload_param;
  const int slots = oc.atomic_step ? 2 : 1;
  int64_t total = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    total += slots * offload::ParamFile::SlotBytes(ctx_->layout.groups()[g].shard *
                                                   static_cast<int64_t>(es));
  }
  ASSIGN_OR_RETURN(param_claim_, offload::SwapDir::Claim(oc.nvme_path, "offload_param.nvme_path",
                                                         ctx_->rank, total));
  int64_t done = 0;
  if (!param_claim_->note().empty()) {
    std::fprintf(stderr, "[zero] rank %d: offload_param.nvme_path '%s': %s\n", ctx_->rank,
                 oc.nvme_path.c_str(), param_claim_->note().c_str());
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    ASSIGN_OR_RETURN(
        auto f, offload::ParamFile::Create(
                    oc.nvme_path, param_claim_->Name(absl::StrCat("param_g", g, ".swp")),
                    ctx_->layout.groups()[g].shard * static_cast<int64_t>(es),
                    /*try_direct=*/true, slots));
    param_files_.push_back(std::move(f));
    done += slots * offload::ParamFile::SlotBytes(ctx_->layout.groups()[g].shard *
                                                  static_cast<int64_t>(es));
    RETURN_IF_ERROR(Preallocated(*ctx_, "offload_param.nvme_path", done, total));
  }
  return absl::OkStatus();
}

// Stage 3, offload_optimizer "nvme": each group's gradient shard in a file
// (one slot), so host memory holds no gradient partition (ZeRO-Infinity).
absl::Status ShardedState::CreateGradFiles() {
  const int64_t es = static_cast<int64_t>(ctx_->es());
  const std::string& dir = ctx_->config.offload_optimizer.nvme_path;
  int64_t total = 0;
  for (const LayoutGroup& lg : ctx_->layout.groups()) {
    total += offload::ParamFile::SlotBytes(lg.shard * es);
  }
  ASSIGN_OR_RETURN(grad_claim_, offload::SwapDir::Claim(dir, "offload_optimizer.nvme_path",
                                                        ctx_->rank, total));
  // This claim comes before the optimizer state's, so a killed job's
  // leftovers are removed (and said) here, as CreateParamFiles does.
  if (!grad_claim_->note().empty()) {
    std::fprintf(stderr, "[zero] rank %d: offload_optimizer.nvme_path '%s': %s\n", ctx_->rank,
                 dir.c_str(), grad_claim_->note().c_str());
  }
  int64_t done = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    ASSIGN_OR_RETURN(auto f, offload::ParamFile::Create(
                                 dir, grad_claim_->Name(absl::StrCat("grad_g", g, ".swp")),
                                 ctx_->layout.groups()[g].shard * es, /*try_direct=*/true, 1));
    grad_files_.push_back(std::move(f));
    done += offload::ParamFile::SlotBytes(ctx_->layout.groups()[g].shard * es);
    RETURN_IF_ERROR(Preallocated(*ctx_, "offload_optimizer.nvme_path", done, total));
  }
  grad_valid_.assign(groups_.size(), {0, 0});
  return absl::OkStatus();
}

absl::Status ShardedState::AccumulateGradF32(int g, int64_t offset, const float* src,
                                             float scale, int64_t n) {
  absl::Status s = AccumulateGradIo(g, offset, src, scale, n);
  if (!s.ok()) AbortPeers(s);
  return s;
}

void ShardedState::AbortPeers(const absl::Status& s) {
  // The peers are in (or entering) the reducer's collectives or the norm's
  // all-reduce: fail them now rather than at comm_timeout_seconds, as a
  // gather's failed read does (OwnSlice).
  ctx_->comm->Abort(std::string(s.message()));
}

absl::Status ShardedState::AccumulateGradIo(int g, int64_t offset, const float* src,
                                            float scale, int64_t n) {
  if (n <= 0) return absl::OkStatus();
  const int64_t es = static_cast<int64_t>(ctx_->es());
  const int64_t len = groups_[g].owned_len;
  offload::ParamFile* f = grad_files_[g].get();
  // Buffers reused by every call (at most a bucket's or a large param
  // piece's slice): no allocation per bucket, so the heap does not churn.
  constexpr int64_t kZeroBytes = 1 << 20;
  const int64_t need = std::max(n * es, std::min(kZeroBytes, len * es));
  // Since the last step the file holds the gradient in [lo, hi) only and
  // an old one elsewhere. The range grows by adjacent buckets without
  // writing zeros or reading them back (a whole-group zero fill and a
  // read-modify-write per bucket were 2 of the step's ~40 bytes of storage
  // IO per parameter in the ZeRO-Infinity profile, bench/README.md); a gap
  // is zero-filled, and only
  // a bucket overlapping the range (accumulation) reads.
  auto& [lo, hi] = grad_valid_[g];
  const int64_t end = offset + n;
  const int64_t r0 = std::max(offset, lo), r1 = std::min(end, hi);
  // The read below must see the writes still in flight.
  if (r0 < r1) RETURN_IF_ERROR(WaitGradWrites());
  // The ring's next buffer, free once its previous write completed (whose
  // error, naming the file, is this call's).
  const int i = static_cast<int>(grad_writes_ % kGradWriteRing);
  if (grad_write_[i] != nullptr) {
    absl::Status s = grad_writer_->Wait(grad_write_[i]);
    grad_write_[i].reset();
    if (!s.ok()) return s;
  }
  if (grad_io_bytes_[i] < need) {
    const int64_t bytes = (need + 4095) / 4096 * 4096;
    grad_io_[i].reset(static_cast<char*>(std::aligned_alloc(4096, bytes)));
    grad_io_bytes_[i] = grad_io_[i] == nullptr ? 0 : bytes;
    if (grad_io_[i] == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "nvme offload: no memory for the gradient buffer of '", f->path(), "'"));
    }
  }
  char* buf = grad_io_[i].get();
  if (lo < hi && (end < lo || offset > hi)) {
    const int64_t z0 = end < lo ? end : hi, z1 = end < lo ? lo : offset;
    std::memset(buf, 0, need);
    for (int64_t a = z0 * es; a < z1 * es; a += kZeroBytes) {
      RETURN_IF_ERROR(f->WriteCommitted(a, std::min(kZeroBytes, z1 * es - a), buf));
    }
  }
  if (r0 < r1) {
    std::memset(buf, 0, (r0 - offset) * es);
    RETURN_IF_ERROR(f->Read(r0 * es, (r1 - r0) * es, buf + (r0 - offset) * es));
    std::memset(buf + (r1 - offset) * es, 0, (end - r1) * es);
  } else {
    std::memset(buf, 0, n * es);
  }
  ctx_->device->AccumulateF32(buf, src, scale, ctx_->dtype(), n);
  // Written behind, in submission order (one thread): a later bucket's
  // write of the same bytes (after its flush and read) lands after it.
  if (grad_writer_ == nullptr) grad_writer_ = std::make_unique<CommStream>(/*asynchronous=*/true);
  grad_unflushed_ = true;
  const int64_t at = offset * es, bytes = n * es;
  grad_write_[i] = grad_writer_->Submit([f, at, bytes, buf] {
    return f->WriteCommitted(at, bytes, buf);
  });
  ++grad_writes_;
  if (lo < hi) {
    lo = std::min(lo, offset);
    hi = std::max(hi, end);
  } else {
    lo = offset;
    hi = end;
  }
  return absl::OkStatus();
}

absl::Status ShardedState::FlushGradWrites() {
  absl::Status s = WaitGradWrites();
  if (!s.ok()) AbortPeers(s);
  return s;
}

absl::Status ShardedState::WaitGradWrites() {
  if (grad_writer_ == nullptr) return absl::OkStatus();
  absl::Status first;
  for (CommStream::Handle& h : grad_write_) {
    if (h == nullptr) continue;
    first.Update(grad_writer_->Wait(h));
    h.reset();
  }
  // Every write has run; Drain forgets them (their statuses are above, or
  // were returned by AccumulateGradF32 already).
  (void)grad_writer_->Drain();
  grad_unflushed_ = false;
  return first;
}

absl::Status ShardedState::ReadGradsRaw(int g, int64_t begin, int64_t len, void* out) {
  if (len <= 0) return absl::OkStatus();
  if (grad_unflushed_) {
    return absl::InternalError(absl::StrCat(
        "nvme offload: gradients of group ", g, " read from '", grad_files_[g]->path(),
        "' while writes to it are in flight (FlushGradWrites first)"));
  }
  const int64_t es = static_cast<int64_t>(ctx_->es());
  const auto [lo, hi] = grad_valid_[g];
  const int64_t r0 = std::max(begin, lo), r1 = std::min(begin + len, hi);
  char* o = static_cast<char*>(out);
  if (r0 >= r1) {
    ctx_->device->Memset0(out, len * es);
    return absl::OkStatus();
  }
  if (r0 > begin) ctx_->device->Memset0(o, (r0 - begin) * es);
  if (r1 < begin + len) ctx_->device->Memset0(o + (r1 - begin) * es, (begin + len - r1) * es);
  return grad_files_[g]->Read(r0 * es, (r1 - r0) * es, o + (r0 - begin) * es);
}

int64_t ShardedState::grad_file_bytes() const {
  int64_t n = 0;
  for (const auto& f : grad_files_) n += f->file_bytes();
  return n;
}

std::vector<int64_t> ShardedState::OwnedLengths() const {
  std::vector<int64_t> lens;
  for (const GroupShard& gs : groups_) lens.push_back(gs.owned_len);
  return lens;
}

void* ShardedState::WorkingPtr(int li) const {
  const ParamPlace& pl = ctx_->layout.place(li);
  return groups_[pl.group].working.data<char>() + pl.offset * ctx_->es();
}

char* ShardedState::OwnedWorking(int g, int64_t begin) {
  const GroupShard& gs = groups_[g];
  if (host_params_) return gs.host_working + begin * ctx_->es();
  const int64_t base = ctx_->stage() == 3 ? 0 : gs.owned_begin;
  return gs.working.data<char>() + (base + begin) * ctx_->es();
}

void ShardedState::CommitParamFiles() {
  for (auto& f : param_files_) f->Commit();
}

absl::StatusOr<const char*> ShardedState::OwnSlice(int li, std::vector<char>* scratch,
                                                   char* into) {
  const Layout& layout = ctx_->layout;
  const ParamPlace& pl = layout.place(li);
  const Slice s = layout.SliceOn(li, ctx_->rank);
  const size_t es = ctx_->es();
  if (host_params_) return groups_[pl.group].host_working + s.shard_offset * es;
  if (param_files_.empty()) return groups_[pl.group].working.data<char>() + s.shard_offset * es;
  // offload_param "nvme": this rank's slice, from its file.
  if (into == nullptr) {
    scratch->resize(std::max<size_t>(1, s.numel * es));
    into = scratch->data();
  }
  absl::Status r = param_files_[pl.group]->Read(s.shard_offset * es, s.numel * es, into);
  if (!r.ok()) {
    // The peers are entering the all-gather: fail them now rather than at
    // comm_timeout_seconds (thread groups: "rank N failed: ..."; MPI: the
    // job ends).
    ctx_->comm->Abort(std::string(r.message()));
    return r;
  }
  return static_cast<const char*>(into);
}

absl::Status ShardedState::GatherInto(int li, void* dst) {
  std::vector<char> mine;
  // A param file on a host-accessible device: the own slice is read
  // straight into its place in `dst` and the all-gather runs in place, not
  // through a zeroed scratch of the slice's size and a copy (in the
  // ZeRO-Infinity profile a 128 MiB allocation, its page faults and two
  // copies per gather).
  char* into = nullptr;
  if (!param_files_.empty() && !shard_on_host()) {
    const std::vector<int64_t> counts = ctx_->layout.Counts(li);
    int64_t at = 0;
    for (int r = 0; r < ctx_->rank; ++r) at += counts[r];
    into = static_cast<char*>(dst) + at * ctx_->es();
  }
  ASSIGN_OR_RETURN(const char* send, OwnSlice(li, &mine, into));
  DeviceBuffer up;
  if (shard_on_host()) {
    // The own slice goes up first: a device communicator reads device
    // memory only. Dropped (freed) once the all-gather returns.
    const size_t bytes = ctx_->layout.SliceOn(li, ctx_->rank).numel * ctx_->es();
    ASSIGN_OR_RETURN(up, DeviceBuffer::Make(ctx_->device, std::max<size_t>(1, bytes)));
    ctx_->device->Copy(up.data(), send, bytes);
    send = up.data<char>();
  }
  return ctx_->comm->AllGatherV(send, dst, ctx_->layout.Counts(li), ctx_->dtype());
}

absl::StatusOr<void*> ShardedState::UploadSlice(int li, DeviceBuffer* up) {
  const Slice s = ctx_->layout.SliceOn(li, ctx_->rank);
  const size_t bytes = s.numel * ctx_->es();
  ASSIGN_OR_RETURN(*up, DeviceBuffer::Make(ctx_->device, std::max<size_t>(1, bytes)));
  const char* src = groups_[ctx_->layout.place(li).group].host_working + s.shard_offset * ctx_->es();
  return ctx_->device->UploadAsync(up->data(), src, bytes);
}

absl::Status ShardedState::GatherUploaded(int li, void* dst, const void* up, void* event) {
  ctx_->device->WaitForUpload(event);
  return ctx_->comm->AllGatherV(up, dst, ctx_->layout.Counts(li), ctx_->dtype());
}

absl::Status ShardedState::PutOwnedF32(char* dst, const float* src, int64_t n) {
  Device* d = ctx_->device;
  if (!shard_on_host()) {
    d->UploadF32(src, dst, ctx_->dtype(), n);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(DeviceBuffer cast,
                   DeviceBuffer::Make(d, std::max<size_t>(1, n * ctx_->es())));
  d->UploadF32(src, cast.data(), ctx_->dtype(), n);
  d->Copy(dst, cast.data(), n * ctx_->es());
  return absl::OkStatus();
}

void ShardedState::PutOwned(char* dst, const void* src, int64_t n) {
  ctx_->device->Copy(dst, src, n * ctx_->es());
}

int64_t ShardedState::host_param_bytes() const { return host_param_bytes_; }

int64_t ShardedState::GatherChunk() const {
  return std::max<int64_t>(1, ctx_->config.allgather_bucket_size / ctx_->world);
}

absl::Status ShardedState::AllGatherWorking() {
  const int stage = ctx_->stage();
  if (!(stage == 1 || stage == 2) || ctx_->world == 1) return absl::OkStatus();
  const size_t es = ctx_->es();
  const int world = ctx_->world, rank = ctx_->rank;
  // Each all-gather moves at most allgather_bucket_size elements: `chunk`
  // from every rank's shard.
  const int64_t chunk = GatherChunk();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t shard = ctx_->layout.groups()[g].shard;
    char* w = groups_[g].working.data<char>();
    if (shard <= chunk) {  // one all-gather, in place
      RETURN_IF_ERROR(ctx_->comm->AllGatherV(w + shard * rank * es, w,
                                             std::vector<int64_t>(world, shard),
                                             ctx_->dtype()));
      continue;
    }
    // Chunk [a, a+len) of every shard lands back to back in the staging
    // buffer, then goes to its place in the working copy.
    char* staged = gather_staging_.data<char>();
    for (int64_t a = 0; a < shard; a += chunk) {
      const int64_t len = std::min(chunk, shard - a);
      RETURN_IF_ERROR(ctx_->comm->AllGatherV(w + (shard * rank + a) * es, staged,
                                             std::vector<int64_t>(world, len),
                                             ctx_->dtype()));
      for (int r = 0; r < world; ++r) {
        if (r != rank) ctx_->device->Copy(w + (shard * r + a) * es, staged + r * len * es, len * es);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ShardedState::WriteWorking(int li, const float* values) {
  Device* d = ctx_->device;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  const ParamPlace& pl = ctx_->layout.place(li);
  if (ctx_->stage() <= 2) {
    d->UploadF32(values, WorkingPtr(li), t, pl.numel);
    return absl::OkStatus();
  }
  const GroupShard& gs = groups_[pl.group];
  const int64_t lo = std::max(pl.offset, gs.owned_begin);
  const int64_t hi = std::min(pl.offset + pl.numel, gs.owned_begin + gs.owned_len);
  if (hi <= lo) return absl::OkStatus();
  if (params_on_nvme()) {
    std::vector<char> cast((hi - lo) * es);
    RETURN_IF_ERROR(PutOwnedF32(cast.data(), values + (lo - pl.offset), hi - lo));
    return param_files_[pl.group]->WriteCommitted((lo - gs.owned_begin) * es, (hi - lo) * es,
                                                  cast.data());
  }
  return PutOwnedF32(OwnedWorking(pl.group, lo - gs.owned_begin), values + (lo - pl.offset),
                     hi - lo);
}

void ShardedState::WriteFrozen(int id, const float* values) {
  const ParamRecord& p = params_->at(id);
  ctx_->device->UploadF32(values, frozen_[id].data(), p.dtype, p.numel);
}

void ShardedState::ZeroGrads() {
  // Writes still in flight are of gradients dropped here (a load): waited
  // for, so none lands over the next step's; a failure of one loses
  // nothing (the range it wrote is no longer read).
  (void)WaitGradWrites();
  for (GroupShard& gs : groups_) ctx_->device->Memset0(gs.grads.data(), gs.grads.bytes());
  std::fill(grad_valid_.begin(), grad_valid_.end(), std::pair<int64_t, int64_t>(0, 0));
}

int64_t ShardedState::working_bytes() const {
  int64_t n = 0;
  for (const GroupShard& gs : groups_) n += gs.working.bytes();
  return n;
}

int64_t ShardedState::grad_bytes() const {
  int64_t n = 0;
  for (const GroupShard& gs : groups_) n += gs.grads.bytes();
  return n;
}

int64_t ShardedState::frozen_bytes() const {
  int64_t n = 0;
  for (const DeviceBuffer& b : frozen_) n += b.bytes();
  return n;
}

int64_t ShardedState::param_file_bytes() const {
  int64_t n = 0;
  for (const auto& f : param_files_) n += f->file_bytes();
  return n;
}

absl::Status ShardedState::WriteWorkingRange(int li, int64_t offset, int64_t count,
                                             const float* values) {
  Device* d = ctx_->device;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  if (ctx_->stage() <= 2) {
    d->UploadF32(values, static_cast<char*>(WorkingPtr(li)) + offset * es, t, count);
    return absl::OkStatus();
  }
  const ParamPlace& pl = ctx_->layout.place(li);
  const GroupShard& gs = groups_[pl.group];
  const int64_t lo = std::max(pl.offset + offset, gs.owned_begin);
  const int64_t hi = std::min(pl.offset + offset + count, gs.owned_begin + gs.owned_len);
  if (hi <= lo) return absl::OkStatus();
  const float* src = values + (lo - pl.offset - offset);
  if (params_on_nvme()) {
    std::vector<char> cast((hi - lo) * es);
    RETURN_IF_ERROR(PutOwnedF32(cast.data(), src, hi - lo));
    return param_files_[pl.group]->WriteCommitted((lo - gs.owned_begin) * es, (hi - lo) * es,
                                                  cast.data());
  }
  return PutOwnedF32(OwnedWorking(pl.group, lo - gs.owned_begin), src, hi - lo);
}

void ShardedState::WriteFrozenRange(int id, int64_t offset, int64_t count, const float* values) {
  const ParamRecord& p = params_->at(id);
  ctx_->device->UploadF32(values, static_cast<char*>(frozen_[id].data()) + offset * DTypeSize(p.dtype),
                          p.dtype, count);
}

}  // namespace zero

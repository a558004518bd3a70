#include "core/engine/gradient_reducer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/comm/call_site.h"
#include "core/common/status_macros.h"
#include "core/engine/hierarchy.h"

namespace zero {

AveragingScales AveragingScalesFor(const Config& c, int dp_world) {
  // The default keeps the sum times 1/world, computed as it always was.
  const float world = static_cast<float>(dp_world);
  if (c.prescale_gradients) return {1.0f / world, 1.0f};
  if (c.gradient_predivide_factor == 1.0) return {1.0f, 1.0f / world};
  return {static_cast<float>(1.0 / c.gradient_predivide_factor),
          static_cast<float>(c.gradient_predivide_factor / dp_world)};
}

bool Stage1ReduceIsIdentity(const Config& c, int dp_world) {
  const AveragingScales s = AveragingScalesFor(c, dp_world);
  const DType ct = c.CommDType();
  return dp_world == 1 && s.pre == 1.0f && s.post == 1.0f &&
         (ct == DType::kF32 || ct == c.dtype);
}

int64_t ReducerPackCap(const Config& c, int64_t total_padded, int world) {
  const int64_t cap = std::max<int64_t>(1, std::min(c.reduce_bucket_size, total_padded));
  return std::max<int64_t>(cap, world);
}

bool Stage1ScatterReadsGrads(const Config& c, int dp_world, int world, int64_t pack_cap,
                             int64_t shard) {
  return c.dtype == DType::kF32 && AveragingScalesFor(c, dp_world).pre == 1.0f &&
         shard <= std::max<int64_t>(1, pack_cap / world) && c.reduce_scatter &&
         c.CommDType() == DType::kF32;
}

absl::Status GradientReducer::Allocate() {
  const Layout& layout = ctx_->layout;
  const int64_t cap = std::max<int64_t>(
      1, std::min(ctx_->config.reduce_bucket_size, layout.total_padded()));
  bucket_cap_ = cap;
  int64_t big = 0;  // the largest param a bucket cannot hold
  for (const LayoutParam& lp : layout.params()) {
    if (Large(lp.numel)) big = std::max(big, lp.numel);
  }
  RETURN_IF_ERROR(buckets_.Init(ctx_->device, ctx_->dtype(), cap));
  if (big > 0) {
    ASSIGN_OR_RETURN(big_.data,
                     DeviceBuffer::Make(ctx_->device, big * static_cast<int64_t>(ctx_->es())));
    big_.capacity = big;
  }
  // At least one element of every rank's slice per round (ReduceLargeParam).
  pack_cap_ = ReducerPackCap(ctx_->config, layout.total_padded(), ctx_->world);
  ASSIGN_OR_RETURN(pack_, DeviceBuffer::Make(ctx_->device, pack_cap_ * 4));
  // Only the bucket reduce-scatter of stages 2-3 receives apart from `pack_`
  // (stage 1 reduce-scatters into the boundary's scratch; all-reduces work
  // in place).
  if (ctx_->stage() >= 2 && ctx_->config.reduce_scatter) {
    ASSIGN_OR_RETURN(recv_, DeviceBuffer::Make(ctx_->device, pack_cap_ * 4));
  }
  if (ctx_->config.CommDType() != DType::kF32) {
    ASSIGN_OR_RETURN(half_, DeviceBuffer::Make(ctx_->device, pack_cap_ * 2 * 2));
  }
  reduced_at_boundary_.assign(layout.params().size(), 0);
  handed_in_.assign(layout.params().size(), 0);
  // DeepSpeed's averaging (Config::prescale_gradients). The default keeps
  // the sum times 1/world, computed as it always was.
  const Config& c = ctx_->config;
  // Averaged over every data-parallel rank (hybrid sharding: all groups).
  const AveragingScales scales = AveragingScalesFor(c, ctx_->dp_world());
  pre_scale_ = scales.pre;
  post_scale_ = scales.post;
  if (c.quantized_gradients && ctx_->hier != nullptr && ctx_->hier->node() != nullptr) {
    qgz_ = std::make_unique<QuantizedReduceScatter>(ctx_);
  }
  if (DeferredGradients::Enabled(*ctx_, qgz_ != nullptr)) {
    deferred_ = std::make_unique<DeferredGradients>(ctx_, params_);
  }
  return absl::OkStatus();
}

absl::Status GradientReducer::RotateBucket() {
  buckets_.Rotate();
  GradBucket& nb = buckets_.current();
  if (nb.inflight) {
    absl::Status s = ctx_->stream->Wait(nb.inflight);
    nb.inflight = nullptr;
    RETURN_IF_ERROR(ctx_->Fail(s));
  }
  nb.Clear();
  return absl::OkStatus();
}

absl::StatusOr<void*> GradientReducer::GradBuffer(int id, bool boundary) {
  const ParamRecord& p = params_->at(id);
  if (handed_in_[p.li]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "grad_buffer '", p.name, "': its gradient was already handed in "
        "this micro-step"));
  }
  if (Large(p.numel)) return LargeGradBuffer(id);
  GradBucket* b = &buckets_.current();
  const int k = b->Find(id);
  if (k >= 0) {
    if (b->ready[k]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "grad_buffer '", p.name, "': its gradient was already handed in "
          "this micro-step"));
    }
    return buckets_.SlotPtr(k);
  }
  if (!b->HasRoom(p.numel)) {
    if (!b->AllReady()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "grad_buffer '", p.name, "': the gradient bucket is full while a "
          "grad buffer is out without grad_ready (param '",
          params_->at(b->ids[std::find(b->ready.begin(), b->ready.end(), false) -
                             b->ready.begin()]).name,
          "'); call grad_ready sooner or raise reduce_bucket_size"));
    }
    RETURN_IF_ERROR(FlushBucket(buckets_.current_index(), boundary));
    RETURN_IF_ERROR(RotateBucket());
  }
  return buckets_.AddSlot(id, p.numel, ctx_->device);
}

absl::StatusOr<void*> GradientReducer::LargeGradBuffer(int id) {
  const ParamRecord& p = params_->at(id);
  const int k = big_.Find(id);
  if (k >= 0) return big_.data.data();  // asked again before grad_ready
  if (!big_.ids.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "grad_buffer '", p.name, "': the gradient of '", params_->at(big_.ids[0]).name,
        "' (a param larger than a bucket, in the one buffer for such params) is out "
        "without grad_ready; call grad_ready sooner or raise reduce_bucket_size"));
  }
  if (big_.inflight) {
    absl::Status s = ctx_->stream->Wait(big_.inflight);
    big_.inflight = nullptr;
    RETURN_IF_ERROR(ctx_->Fail(s));
  }
  ctx_->device->Memset0(big_.data.data(), p.numel * static_cast<int64_t>(ctx_->es()));
  big_.ids.push_back(id);
  big_.offsets.push_back(0);
  big_.ready.push_back(false);
  big_.used = p.numel;
  return big_.data.data();
}

absl::Status GradientReducer::GradReady(int id, bool boundary) {
  if (handed_in_[params_->at(id).li]) {
    return absl::FailedPreconditionError(
        absl::StrCat("grad_ready '", params_->at(id).name, "': already handed in"));
  }
  if (Large(params_->at(id).numel)) {
    if (big_.Find(id) < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "grad_ready '", params_->at(id).name, "': no grad_buffer was taken for it"));
    }
    // Its own buffer: reduced now, overlapping what comes next.
    big_.ready[0] = true;
    handed_in_[params_->at(id).li] = 1;
    return Flush(&big_, boundary);
  }
  GradBucket& b = buckets_.current();
  const int k = b.Find(id);
  if (k < 0 || b.ready[k]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "grad_ready '", params_->at(id).name, "': ",
        k < 0 ? "no grad_buffer was taken for it" : "already handed in"));
  }
  b.ready[k] = true;
  handed_in_[params_->at(id).li] = 1;
  if (b.used == b.capacity && b.AllReady()) {
    // Full: start its reduction now so it overlaps with what comes next.
    RETURN_IF_ERROR(FlushBucket(buckets_.current_index(), boundary));
    RETURN_IF_ERROR(RotateBucket());
  }
  return absl::OkStatus();
}

absl::Status GradientReducer::FinishMicroStep(bool boundary) {
  if (!big_.ids.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: param '", params_->at(big_.ids[0]).name,
        "' has a grad buffer out without grad_ready"));
  }
  GradBucket& b = buckets_.current();
  if (!b.AllReady()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: param '",
        params_->at(b.ids[std::find(b.ready.begin(), b.ready.end(), false) - b.ready.begin()])
            .name,
        "' has a grad buffer out without grad_ready"));
  }
  RETURN_IF_ERROR(FlushBucket(buckets_.current_index(), boundary));
  if (ctx_->stage() == 1 && !ctx_->config.ignore_unused_parameters) {
    RETURN_IF_ERROR(ctx_->Fail(ctx_->stream->Drain()));
    RETURN_IF_ERROR(ctx_->Fail(CheckAllHandedIn()));
  }
  std::fill(handed_in_.begin(), handed_in_.end(), 0);
  flushed_ = 0;
  RETURN_IF_ERROR(ctx_->Fail(ctx_->stream->Drain()));
  if (deferred_ && (ctx_->stage() == 2 || boundary)) {
    RETURN_IF_ERROR(ctx_->Fail(FinishDeferred(boundary)));
  }
  for (int i = 0; i < 2; ++i) {
    buckets_.at(i).inflight = nullptr;
    buckets_.at(i).Clear();
  }
  big_.inflight = nullptr;
  return absl::OkStatus();
}

bool GradientReducer::idle() {
  for (int i = 0; i < 2; ++i) {
    if (!buckets_.at(i).ids.empty() || buckets_.at(i).inflight) return false;
  }
  return big_.ids.empty() && !big_.inflight;
}

absl::Status GradientReducer::FlushBucket(int bi, bool boundary) {
  return Flush(&buckets_.at(bi), boundary);
}

absl::Status GradientReducer::Flush(GradBucket* bucket, bool boundary) {
  GradBucket& b = *bucket;
  if (b.ids.empty()) return absl::OkStatus();
  std::vector<int> ids = b.ids;
  std::vector<int64_t> offsets = b.offsets;
  const void* data = b.data.data();
  // Its collectives carry its params and number (core/comm/call_site.h):
  // ranks whose buckets hold other params fail alike instead of summing
  // unrelated gradients.
  std::vector<int> subject;
  for (int id : ids) subject.push_back(params_->at(id).li);
  const int64_t number = flushed_++;
  b.inflight = ctx_->stream->Submit(Timed(
      ctx_->recorder, Phase::kReduce,
      [this, ids = std::move(ids), offsets = std::move(offsets), data, boundary,
       subject = std::move(subject), number] {
        ScopedCollectiveSubject named(subject, number);
        return ReduceOrDefer(ids, data, offsets, boundary);
      },
      "bucket"));
  b.Clear();
  return absl::OkStatus();
}

// Runs on the comm stream.
absl::Status GradientReducer::ReduceBucket(const std::vector<int>& ids, const void* data,
                                           const std::vector<int64_t>& offsets,
                                           bool boundary) {
  Device* d = ctx_->device;
  const Layout& layout = ctx_->layout;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  const int world = ctx_->world;
  const char* base = static_cast<const char*>(data);
  float* pack = pack_.data<float>();
  auto grads_at = [&](const ParamPlace& pl, int64_t offset) {
    return sharded_->group(pl.group).grads.data<char>() + offset * es;
  };
  if (ctx_->stage() <= 1) {
    const bool reduce_here = ctx_->stage() == 0 && boundary && world > 1;
    if (reduce_here && ReducesAsStored() && !(ids.size() == 1 &&
                                              params_->at(ids[0]).numel > pack_cap_)) {
      return AllReduceInSlots(ids, const_cast<char*>(base), offsets);
    }
    for (size_t k = 0; k < ids.size(); ++k) {
      const ParamRecord& p = params_->at(ids[k]);
      const ParamPlace& pl = layout.place(p.li);
      d->Accumulate(grads_at(pl, pl.offset), base + offsets[k] * es, t, p.numel);
    }
    if (ctx_->stage() == 0 && boundary && world > 1 && ids.size() == 1 &&
        params_->at(ids[0]).numel > pack_cap_) {
      const ParamRecord& p = params_->at(ids[0]);
      const ParamPlace& pl = layout.place(p.li);
      RETURN_IF_ERROR(AllReduceInPieces(grads_at(pl, pl.offset), p.numel));
      reduced_at_boundary_[p.li] = 1;
    } else if (ctx_->stage() == 0 && boundary && world > 1) {
      int64_t n = 0;
      for (int id : ids) {
        const ParamRecord& p = params_->at(id);
        const ParamPlace& pl = layout.place(p.li);
        d->ToF32(grads_at(pl, pl.offset), t, pack + n, p.numel, pre_scale_);
        n += p.numel;
      }
      RETURN_IF_ERROR(AllReducePack(pack, n));
      n = 0;
      for (int id : ids) {
        const ParamRecord& p = params_->at(id);
        const ParamPlace& pl = layout.place(p.li);
        d->ToF32(pack + n, DType::kF32, pack + n, p.numel, post_scale_);
        d->FromF32(pack + n, grads_at(pl, pl.offset), t, p.numel);
        reduced_at_boundary_[p.li] = 1;
        n += p.numel;
      }
    }
    return absl::OkStatus();
  }
  if (ids.size() == 1 && params_->at(ids[0]).numel > pack_cap_) {
    return ReduceLargeParam(ids[0], base + offsets[0] * es);
  }
  std::vector<int64_t> counts(world, 0);
  std::vector<Piece> pieces;  // in rank order
  // qgZ's error feedback: where each rank's piece lives in its shard.
  std::vector<std::vector<ShardSegment>> segments(qgz_ ? world : 0);
  int64_t pos = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t k = 0; k < ids.size(); ++k) {
      const Slice s = layout.SliceOn(params_->at(ids[k]).li, r);
      if (s.numel == 0) continue;
      if (qgz_) {
        segments[r].push_back({layout.place(params_->at(ids[k]).li).group, s.shard_offset, s.numel});
      }
      pieces.push_back({base + (offsets[k] + s.param_offset) * es, s.numel});
      pos += s.numel;
      counts[r] += s.numel;
    }
  }
  // Packed in rank order, so this rank's reduced piece is contiguous either
  // way: reduce-scattered into recv_, or all-reduced in place
  // (reduce_scatter: false) and read at its offset.
  float* mine = nullptr;
  if (qgz_ && ctx_->config.reduce_scatter) {
    for (size_t j = 0, at = 0; j < pieces.size(); at += pieces[j].n, ++j) {
      d->ToF32(pieces[j].src, t, pack + at, pieces[j].n, pre_scale_);
    }
    RETURN_IF_ERROR(qgz_->Run(pack, recv_.data<float>(), counts, segments));
    mine = recv_.data<float>();
  } else {
    ASSIGN_OR_RETURN(mine, ReducePieces(pieces, counts));
  }
  // Hybrid sharding: the group's sum of this shard, summed over the groups.
  if (ctx_->replicas > 1) {
    RETURN_IF_ERROR(ctx_->hier->replica()->AllReduce(mine, counts[ctx_->rank], ReduceOp::kSum));
  }
  pos = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int li = params_->at(ids[k]).li;
    const Slice s = layout.SliceOn(li, ctx_->rank);
    if (s.numel == 0) continue;
    if (sharded_->grads_on_nvme()) {
      RETURN_IF_ERROR(sharded_->AccumulateGradF32(layout.place(li).group, s.shard_offset,
                                                  mine + pos, post_scale_, s.numel));
    } else {
      d->AccumulateF32(grads_at(layout.place(li), s.shard_offset), mine + pos, post_scale_, t,
                       s.numel);
    }
    pos += s.numel;
  }
  return absl::OkStatus();
}

bool GradientReducer::ReducesAsStored() const {
  return pre_scale_ == 1.0f && ctx_->config.CommDType() == ctx_->dtype();
}

absl::Status GradientReducer::AllReduceStored(void* data, int64_t n) {
  const DType ct = ctx_->config.CommDType();
  if (ct == DType::kF32) return ctx_->comm->AllReduce(static_cast<float*>(data), n, ReduceOp::kSum);
  return ctx_->comm->AllReduceHalf(data, n, ct);
}

void GradientReducer::WriteBackScaled(const void* reduced, void* grads, int64_t n) {
  Device* d = ctx_->device;
  const DType t = ctx_->dtype();
  if (t == DType::kF32) {
    d->ToF32(reduced, t, static_cast<float*>(grads), n, post_scale_);
    return;
  }
  // float(h) * post_scale_ rounded once to t: the bits of the packed path's
  // widen (times 1), scale and narrow.
  float* pack = pack_.data<float>();
  for (int64_t a = 0; a < n; a += pack_cap_) {
    const int64_t m = std::min(pack_cap_, n - a);
    d->ToF32(static_cast<const char*>(reduced) + a * ctx_->es(), t, pack, m, post_scale_);
    d->FromF32(pack, static_cast<char*>(grads) + a * ctx_->es(), t, m);
  }
}

absl::Status GradientReducer::AllReduceInSlots(const std::vector<int>& ids, char* base,
                                               const std::vector<int64_t>& offsets) {
  Device* d = ctx_->device;
  const Layout& layout = ctx_->layout;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  auto grads_at = [&](int li) {
    const ParamPlace& pl = layout.place(li);
    return sharded_->group(pl.group).grads.data<char>() + pl.offset * es;
  };
  // Each slot gets the accumulated gradient (slot + grads: the sum the
  // packed path forms in grads, fp32 addition commuting bit for bit); the
  // slots lie back to back in hand-out order, as the pack would.
  int64_t n = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    const ParamRecord& p = params_->at(ids[k]);
    d->Accumulate(base + offsets[k] * es, grads_at(p.li), t, p.numel);
    n += p.numel;
  }
  if (absl::Status s = AllReduceStored(base + offsets[0] * es, n); !s.ok()) {
    if (IsBucketDivergence(s)) {  // deferred: the local sums stay in the gradient
      for (size_t k = 0; k < ids.size(); ++k) {
        const ParamRecord& p = params_->at(ids[k]);
        d->CopyQueued(grads_at(p.li), base + offsets[k] * es, p.numel * es);
      }
    }
    return s;
  }
  for (size_t k = 0; k < ids.size(); ++k) {
    const ParamRecord& p = params_->at(ids[k]);
    WriteBackScaled(base + offsets[k] * es, grads_at(p.li), p.numel);
    reduced_at_boundary_[p.li] = 1;
  }
  return absl::OkStatus();
}

// Runs on the comm stream. The same element math as ReduceBucket's packed
// path, in rounds that fit the staging.
absl::Status GradientReducer::ReduceLargeParam(int id, const char* data) {
  Device* d = ctx_->device;
  const Layout& layout = ctx_->layout;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  const int world = ctx_->world;
  const int li = params_->at(id).li;
  float* pack = pack_.data<float>();
  std::vector<Slice> slices;
  int64_t longest = 0;
  for (int r = 0; r < world; ++r) {
    slices.push_back(layout.SliceOn(li, r));
    longest = std::max(longest, slices.back().numel);
  }
  const int64_t q = std::max<int64_t>(1, pack_cap_ / world);
  std::vector<int64_t> counts(world, 0);
  const Slice& own = slices[ctx_->rank];
  char* grads = sharded_->group(layout.place(li).group).grads.data<char>();
  for (int64_t j = 0; j < longest; j += q) {
    std::vector<Piece> pieces;
    for (int r = 0; r < world; ++r) {
      counts[r] = std::max<int64_t>(0, std::min(q, slices[r].numel - j));
      if (counts[r] > 0) pieces.push_back({data + (slices[r].param_offset + j) * es, counts[r]});
    }
    float* mine = nullptr;
    if (qgz_ && ctx_->config.reduce_scatter) {
      for (size_t k = 0, at = 0; k < pieces.size(); at += pieces[k].n, ++k) {
        d->ToF32(pieces[k].src, t, pack + at, pieces[k].n, pre_scale_);
      }
      const int g = layout.place(li).group;
      std::vector<std::vector<ShardSegment>> segments(world);
      for (int r = 0; r < world; ++r) {
        if (counts[r] > 0) segments[r].push_back({g, slices[r].shard_offset + j, counts[r]});
      }
      RETURN_IF_ERROR(qgz_->Run(pack, recv_.data<float>(), counts, segments));
      mine = recv_.data<float>();
    } else {
      ASSIGN_OR_RETURN(mine, ReducePieces(pieces, counts));
    }
    // Hybrid sharding: the group's sum of this piece, summed over the groups.
    if (ctx_->replicas > 1) {
      RETURN_IF_ERROR(ctx_->hier->replica()->AllReduce(mine, counts[ctx_->rank], ReduceOp::kSum));
    }
    if (counts[ctx_->rank] > 0 && sharded_->grads_on_nvme()) {
      RETURN_IF_ERROR(sharded_->AccumulateGradF32(layout.place(li).group, own.shard_offset + j,
                                                  mine, post_scale_, counts[ctx_->rank]));
    } else if (counts[ctx_->rank] > 0) {
      d->AccumulateF32(grads + (own.shard_offset + j) * es, mine, post_scale_, t,
                       counts[ctx_->rank]);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<float*> GradientReducer::ReducePieces(const std::vector<Piece>& pieces,
                                                     const std::vector<int64_t>& counts) {
  Device* d = ctx_->device;
  const DType t = ctx_->dtype();
  const DType ct = ctx_->config.CommDType();
  const size_t es = ctx_->es();
  const int rank = ctx_->rank;
  float* pack = pack_.data<float>();
  float* recv = recv_.data<float>();
  const bool scatter = ctx_->config.reduce_scatter;
  int64_t total = 0, before = 0;
  for (int r = 0; r < static_cast<int>(counts.size()); ++r) {
    total += counts[r];
    if (r < rank) before += counts[r];
  }
  if (!ReducesAsStored()) {
    int64_t at = 0;
    for (const Piece& p : pieces) {
      d->ToF32(p.src, t, pack + at, p.n, pre_scale_);
      at += p.n;
    }
    if (scatter) {
      RETURN_IF_ERROR(ReduceScatterPack(pack, recv, counts));
      return recv;
    }
    RETURN_IF_ERROR(AllReducePack(pack, total));
    return pack + before;
  }
  // Reduced as stored: the pieces go to the collective in the working
  // dtype, the bits the pack would have cast back to. Already back to back
  // in rank order (a bucket within one rank's shard, one round of a large
  // param): sent from where they lie; else copied together, no cast.
  bool in_place = !pieces.empty();
  int64_t at = 0;
  for (const Piece& p : pieces) {
    in_place = in_place && p.src == pieces[0].src + at * es;
    at += p.n;
  }
  char* send = ct == DType::kF32 ? reinterpret_cast<char*>(pack) : half_.data<char>();
  if (in_place) {
    send = const_cast<char*>(pieces[0].src);
  } else {
    at = 0;
    for (const Piece& p : pieces) {
      d->CopyQueued(send + at * es, p.src, p.n * es);
      at += p.n;
    }
  }
  if (ct == DType::kF32) {
    float* f = reinterpret_cast<float*>(send);
    if (scatter) {
      RETURN_IF_ERROR(ctx_->comm->ReduceScatterV(f, recv, counts));
      return recv;
    }
    RETURN_IF_ERROR(ctx_->comm->AllReduce(f, total, ReduceOp::kSum));
    return f + before;
  }
  if (scatter) {
    char* mine = half_.data<char>() + pack_cap_ * 2;
    RETURN_IF_ERROR(ctx_->comm->ReduceScatterVHalf(send, mine, counts, ct));
    d->ToF32(mine, ct, recv, counts[rank], 1.0f);
    return recv;
  }
  // Only this rank's piece is widened (the packed path widened them all).
  RETURN_IF_ERROR(ctx_->comm->AllReduceHalf(send, total, ct));
  d->ToF32(send + before * es, ct, pack, counts[rank], 1.0f);
  return pack;
}

absl::Status GradientReducer::AllReduceInPieces(char* grads, int64_t numel) {
  Device* d = ctx_->device;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  float* pack = pack_.data<float>();
  for (int64_t a = 0; a < numel; a += pack_cap_) {
    const int64_t n = std::min(pack_cap_, numel - a);
    if (ReducesAsStored()) {  // the same pieces, reduced where they lie
      RETURN_IF_ERROR(AllReduceStored(grads + a * es, n));
      WriteBackScaled(grads + a * es, grads + a * es, n);
      continue;
    }
    d->ToF32(grads + a * es, t, pack, n, pre_scale_);
    RETURN_IF_ERROR(AllReducePack(pack, n));
    d->ToF32(pack, DType::kF32, pack, n, post_scale_);
    d->FromF32(pack, grads + a * es, t, n);
  }
  return absl::OkStatus();
}

absl::Status GradientReducer::ReduceLeftoversStage0() {
  Device* d = ctx_->device;
  const Layout& layout = ctx_->layout;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  std::vector<int> todo;  // layout indices
  for (size_t li = 0; li < reduced_at_boundary_.size(); ++li) {
    if (!reduced_at_boundary_[li]) todo.push_back(static_cast<int>(li));
    reduced_at_boundary_[li] = 0;
  }
  auto numel = [&](int li) { return layout.params()[li].numel; };
  auto grads = [&](int li) {
    const ParamPlace& pl = layout.place(li);
    return sharded_->group(pl.group).grads.data<char>() + pl.offset * es;
  };
  size_t k = 0;
  while (k < todo.size()) {
    if (numel(todo[k]) > pack_cap_) {  // larger than the staging: alone, in pieces
      RETURN_IF_ERROR(AllReduceInPieces(grads(todo[k]), numel(todo[k])));
      ++k;
      continue;
    }
    std::vector<int> batch;
    int64_t n = 0;
    while (k < todo.size() && (batch.empty() || n + numel(todo[k]) <= pack_cap_)) {
      n += numel(todo[k]);
      batch.push_back(todo[k++]);
    }
    // Back to back in the local gradient (no padding between them): the
    // batch is reduced where it lies, as one piece of the same elements.
    bool adjacent = ReducesAsStored();
    for (size_t j = 1; j < batch.size() && adjacent; ++j) {
      adjacent = grads(batch[j]) == grads(batch[j - 1]) + numel(batch[j - 1]) * es;
    }
    if (adjacent) {
      RETURN_IF_ERROR(AllReduceStored(grads(batch[0]), n));
      WriteBackScaled(grads(batch[0]), grads(batch[0]), n);
      continue;
    }
    float* pack = pack_.data<float>();
    int64_t pos = 0;
    for (int li : batch) {
      d->ToF32(grads(li), t, pack + pos, numel(li), pre_scale_);
      pos += numel(li);
    }
    RETURN_IF_ERROR(AllReducePack(pack, pos));
    pos = 0;
    for (int li : batch) {
      d->ToF32(pack + pos, DType::kF32, pack + pos, numel(li), post_scale_);
      d->FromF32(pack + pos, grads(li), t, numel(li));
      pos += numel(li);
    }
  }
  return absl::OkStatus();
}

absl::Status GradientReducer::ReduceScatterFlatStage1(const std::vector<float*>& g32,
                                                      bool zero_grads, float* deferred_scale) {
  Device* d = ctx_->device;
  // With a reduce-scatter the post-scale is a pass of its own over the
  // shard: the caller may fold it into its next one instead.
  const bool defer = deferred_scale != nullptr && ctx_->config.reduce_scatter;
  if (deferred_scale != nullptr) *deferred_scale = defer ? post_scale_ : 1.0f;
  const DType t = ctx_->dtype();
  const size_t es = ctx_->es();
  const int world = ctx_->world;
  float* pack = pack_.data<float>();
  for (int g = 0; g < sharded_->num_groups(); ++g) {
    const int64_t shard = ctx_->layout.groups()[g].shard;
    const int64_t chunk = std::max<int64_t>(1, pack_cap_ / world);
    float* out = g32[g];
    const char* grads = sharded_->group(g).grads.data<char>();
    // fp32 gradients, nothing to pre-scale, an fp32 reduction and one
    // chunk: the pack would be a plain copy of the local gradient (the
    // shards lie back to back in rank order already), so the reduce-scatter
    // reads the gradient itself: the same call on the same values, one
    // full-size write pass fewer (docs/ARCHITECTURE.md, "One training
    // step").
    if (Stage1ReadsGrads(g)) {
      float* local = const_cast<float*>(reinterpret_cast<const float*>(grads));
      if (out + shard > local && out < local + static_cast<int64_t>(world) * shard) {
        return absl::InternalError(absl::StrCat(
            "stage 1 reduce-scatter of group ", g,
            ": its target overlaps the gradient it reads"));
      }
      RETURN_IF_ERROR(ctx_->comm->ReduceScatterV(local, out, std::vector<int64_t>(world, shard)));
      if (ctx_->replicas > 1) {
        RETURN_IF_ERROR(ctx_->hier->replica()->AllReduce(out, shard, ReduceOp::kSum));
      }
      if (!defer) d->ToF32(out, DType::kF32, out, shard, post_scale_);
      if (zero_grads) d->Memset0(local, static_cast<size_t>(world) * shard * es);
      continue;
    }
    if (ReducesAsStored() && t != DType::kF32) {
      RETURN_IF_ERROR(ReduceScatterFlatHalf(g, out, zero_grads, defer));
      continue;
    }
    for (int64_t a = 0; a < shard; a += chunk) {
      const int64_t len = std::min(chunk, shard - a);
      for (int r = 0; r < world; ++r) {
        char* from = const_cast<char*>(grads) + (r * shard + a) * es;
        if (!zero_grads) {
          d->ToF32(from, t, pack + r * len, len, pre_scale_);
          continue;
        }
        // Read for the last time this accumulation: each piece is zeroed
        // right after it is packed, while it is in cache (no later pass).
        constexpr int64_t kPiece = 1 << 16;
        for (int64_t b = 0; b < len; b += kPiece) {
          const int64_t n = std::min(kPiece, len - b);
          d->ToF32(from + b * es, t, pack + r * len + b, n, pre_scale_);
          d->Memset0(from + b * es, n * es);
        }
      }
      if (ctx_->config.reduce_scatter) {
        RETURN_IF_ERROR(ReduceScatterPack(pack, out + a, std::vector<int64_t>(world, len)));
        if (ctx_->replicas > 1) {  // hybrid sharding: over the groups too
          RETURN_IF_ERROR(ctx_->hier->replica()->AllReduce(out + a, len, ReduceOp::kSum));
        }
        if (!defer) d->ToF32(out + a, DType::kF32, out + a, len, post_scale_);
      } else {
        // All-reduce the chunk of every shard; keep this rank's.
        RETURN_IF_ERROR(AllReducePack(pack, world * len));
        if (ctx_->replicas > 1) {
          RETURN_IF_ERROR(ctx_->hier->replica()->AllReduce(pack + ctx_->rank * len, len,
                                                           ReduceOp::kSum));
        }
        d->ToF32(pack + ctx_->rank * len, DType::kF32, out + a, len, post_scale_);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status GradientReducer::ReduceScatterFlatHalf(int g, float* out, bool zero_grads,
                                                    bool defer) {
  Device* d = ctx_->device;
  const DType t = ctx_->dtype();  // == the communication dtype, 2 bytes
  const int world = ctx_->world;
  const int64_t shard = ctx_->layout.groups()[g].shard;
  const int64_t chunk = std::max<int64_t>(1, pack_cap_ / world);
  char* grads = sharded_->group(g).grads.data<char>();
  char* send = half_.data<char>();
  char* mine = send + pack_cap_ * 2;
  // The packed path's scales: its widened piece times 1 (exact), the
  // replicas' fp32 sum, then times post_scale_ unless deferred. Without
  // replicas the two scales are one rounding either way: one pass.
  const bool fold = !defer && ctx_->replicas == 1;
  auto finish = [&](float* dst, const char* piece, int64_t len) -> absl::Status {
    d->ToF32(piece, t, dst, len, fold ? post_scale_ : 1.0f);
    if (ctx_->replicas > 1) {  // hybrid sharding: over the groups too
      RETURN_IF_ERROR(ctx_->hier->replica()->AllReduce(dst, len, ReduceOp::kSum));
    }
    if (!defer && !fold) d->ToF32(dst, DType::kF32, dst, len, post_scale_);
    return absl::OkStatus();
  };
  if (shard <= chunk && ctx_->config.reduce_scatter) {
    // One chunk: the shards lie back to back in rank order, so the local
    // gradient is the send buffer as it is.
    RETURN_IF_ERROR(ctx_->comm->ReduceScatterVHalf(grads, mine,
                                                   std::vector<int64_t>(world, shard), t));
    RETURN_IF_ERROR(finish(out, mine, shard));
    if (zero_grads) d->Memset0(grads, static_cast<size_t>(world) * shard * 2);
    return absl::OkStatus();
  }
  for (int64_t a = 0; a < shard; a += chunk) {
    const int64_t len = std::min(chunk, shard - a);
    for (int r = 0; r < world; ++r) {
      char* from = grads + (r * shard + a) * 2;
      char* to = send + r * len * 2;
      if (!zero_grads) {
        d->CopyQueued(to, from, len * 2);
        continue;
      }
      // Zeroed while in cache, as packed; on a device one queued copy and
      // one memset per rank's piece.
      const int64_t piece = d->host_accessible() ? int64_t{1} << 16 : len;
      for (int64_t b = 0; b < len; b += piece) {
        const int64_t n = std::min(piece, len - b);
        d->CopyQueued(to + b * 2, from + b * 2, n * 2);
        d->Memset0(from + b * 2, n * 2);
      }
    }
    if (ctx_->config.reduce_scatter) {
      RETURN_IF_ERROR(ctx_->comm->ReduceScatterVHalf(send, mine,
                                                     std::vector<int64_t>(world, len), t));
      RETURN_IF_ERROR(finish(out + a, mine, len));
    } else {
      // All-reduce the chunk of every shard; widen only this rank's.
      RETURN_IF_ERROR(ctx_->comm->AllReduceHalf(send, world * len, t));
      RETURN_IF_ERROR(finish(out + a, send + ctx_->rank * len * 2, len));
    }
  }
  return absl::OkStatus();
}

bool GradientReducer::Stage1IsIdentity() const {
  return Stage1ReduceIsIdentity(ctx_->config, ctx_->dp_world());
}

bool GradientReducer::Stage1ReadsGrads(int g) const {
  return Stage1ScatterReadsGrads(ctx_->config, ctx_->dp_world(), ctx_->world, pack_cap_,
                                 ctx_->layout.groups()[g].shard);
}

absl::Status GradientReducer::ReduceScatterPack(const float* pack, float* recv,
                                                const std::vector<int64_t>& counts) {
  const DType ct = ctx_->config.CommDType();
  if (ct == DType::kF32) return ctx_->comm->ReduceScatterV(pack, recv, counts);
  Device* d = ctx_->device;
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  char* send = half_.data<char>();
  char* mine = send + pack_cap_ * 2;
  d->FromF32(pack, send, ct, total);
  RETURN_IF_ERROR(ctx_->comm->ReduceScatterVHalf(send, mine, counts, ct));
  d->ToF32(mine, ct, recv, counts[ctx_->rank], 1.0f);
  return absl::OkStatus();
}

absl::Status GradientReducer::AllReducePack(float* pack, int64_t n) {
  const DType ct = ctx_->config.CommDType();
  if (ct == DType::kF32) return ctx_->comm->AllReduce(pack, n, ReduceOp::kSum);
  Device* d = ctx_->device;
  char* h = half_.data<char>();
  d->FromF32(pack, h, ct, n);
  RETURN_IF_ERROR(ctx_->comm->AllReduceHalf(h, n, ct));
  d->ToF32(h, ct, pack, n, 1.0f);
  return absl::OkStatus();
}

}  // namespace zero

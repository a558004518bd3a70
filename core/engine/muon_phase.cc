#include "core/engine/muon_phase.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/optim/muon_owners.h"
#include "core/optim/newton_schulz.h"

namespace zero {

std::vector<MuonMatrix> MuonMatricesOf(const ParamRegistry& params, const Layout& layout) {
  std::vector<MuonMatrix> out;
  for (int li = 0; li < static_cast<int>(layout.params().size()); ++li) {
    const ParamRecord& p = params.by_layout(li);
    if (!p.use_muon) continue;
    MuonMatrix m;
    m.name = p.name;
    m.group = layout.place(li).group;
    m.offset = layout.place(li).offset;
    m.rows = p.shape[0];
    m.cols = p.numel / p.shape[0];
    out.push_back(m);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<MuonPhase>> MuonPhase::Make(EngineContext* ctx,
                                                           ShardedState* sharded,
                                                           OptimizerStateStore* store,
                                                           const MuonSettings& settings,
                                                           std::vector<MuonMatrix> matrices) {
  if (ctx->replicas > 1) {
    return absl::InvalidArgumentError(
        "optimizer Muon: hybrid sharding (replicated shard groups) is not supported; "
        "use full_shard");
  }
  if (sharded->params_on_nvme() && !matrices.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "optimizer Muon: offload_param nvme is not supported (matrix '", matrices[0].name,
        "' would be rewritten after its param file's write); use offload_param cpu or none"));
  }
  return std::unique_ptr<MuonPhase>(
      new MuonPhase(ctx, sharded, store, settings, std::move(matrices)));
}

MuonPhase::MuonPhase(EngineContext* ctx, ShardedState* sharded, OptimizerStateStore* store,
                     const MuonSettings& settings, std::vector<MuonMatrix> matrices)
    : ctx_(ctx), sharded_(sharded), store_(store), settings_(settings),
      matrices_(std::move(matrices)) {
  std::vector<int64_t> cost;
  for (const MuonMatrix& m : matrices_) cost.push_back(m.numel());
  const int world = exchanges() ? ctx_->world : 1;
  const int me = exchanges() ? ctx_->rank : 0;
  owners_ = AssignMuonOwners(cost, world);
  // This rank's slices, placed by (owner, matrix) in the slice buffers; and
  // what the first exchange carries to and from each rank.
  const int n = static_cast<int>(matrices_.size());
  send_counts_.assign(world, 0);
  recv_counts_.assign(world, 0);
  for (int i = 0; i < n; ++i) {
    int64_t lo, hi;
    RankSlice(i, me, &lo, &hi);
    if (hi == lo) continue;
    Slice sl;
    sl.i = i;
    sl.begin = lo - sharded_->group(matrices_[i].group).owned_begin;
    sl.len = hi - lo;
    slices_.push_back(sl);
    send_counts_[owners_[i]] += sl.len;
  }
  int64_t at = 0;
  for (int r = 0; r < world; ++r) {
    for (Slice& sl : slices_) {
      if (owners_[sl.i] != r) continue;
      sl.at = at;
      at += sl.len;
    }
    for (int i = 0; i < n; ++i) {
      if (owners_[i] != me) continue;
      int64_t lo, hi;
      RankSlice(i, r, &lo, &hi);
      recv_counts_[r] += hi - lo;
    }
  }
  // Where rank r's slice of each owned matrix lands in the received
  // buffer: rank by rank, in matrix order within a rank.
  for (int i = 0; i < n; ++i) {
    if (owners_[i] == me) owned_.push_back(i);
  }
  in_at_.assign(owned_.size() * world, 0);
  at = 0;
  for (int r = 0; r < world; ++r) {
    for (size_t k = 0; k < owned_.size(); ++k) {
      int64_t lo, hi;
      RankSlice(owned_[k], r, &lo, &hi);
      in_at_[k * world + r] = at;
      at += hi - lo;
    }
  }
}

void MuonRankSlice(const MuonMatrix& m, const Layout& layout, bool exchanges, int r, int64_t* lo,
                   int64_t* hi) {
  int64_t begin = 0, len = layout.groups()[m.group].padded;
  if (exchanges) {
    len = layout.groups()[m.group].shard;
    begin = len * r;
  }
  *lo = std::max(m.offset, begin);
  *hi = std::max(*lo, std::min(m.offset + m.numel(), begin + len));
}

MuonBufferPlan PlanMuonBuffers(const std::vector<MuonMatrix>& matrices,
                               const std::vector<int>& owners, const Layout& layout,
                               bool exchanges, int rank) {
  MuonBufferPlan p;
  for (size_t i = 0; i < matrices.size(); ++i) {
    const MuonMatrix& m = matrices[i];
    int64_t lo, hi;
    MuonRankSlice(m, layout, exchanges, exchanges ? rank : 0, &lo, &hi);
    p.slice_elems += hi - lo;
    if (owners[i] != (exchanges ? rank : 0)) continue;
    p.ns.Fit(m.rows, m.cols);
    if (exchanges) {
      p.owned_elems += m.numel();
      p.whole_elems = std::max(p.whole_elems, m.numel());
    }
  }
  return p;
}

bool MuonPhase::exchanges() const { return ctx_->stage() >= 1 && ctx_->world > 1; }

void MuonPhase::RankSlice(int i, int r, int64_t* lo, int64_t* hi) const {
  MuonRankSlice(matrices_[i], ctx_->layout, exchanges(), r, lo, hi);
}

void MuonPhase::MakeBuffers() {
  const MuonBufferPlan p =
      PlanMuonBuffers(matrices_, owners_, ctx_->layout, exchanges(), exchanges() ? ctx_->rank : 0);
  master_.assign(p.slice_elems, 0.0f);
  momentum_.assign(p.slice_elems, 0.0f);
  out_.assign(p.slice_elems, 0.0f);
  in_.assign(p.owned_elems, 0.0f);
  whole_.assign(p.whole_elems, 0.0f);
  ns_ = NewtonSchulzWork(p.ns);
  made_ = true;
}

int64_t MuonPhase::buffer_bytes() const {
  return static_cast<int64_t>(master_.capacity() + momentum_.capacity() + out_.capacity() +
                              in_.capacity() + whole_.capacity()) * 4 +
         ns_.bytes();
}

absl::Status MuonPhase::Prepare(const MuonGradReader& grads, float grad_scale, double lr) {
  if (!made_) MakeBuffers();
  const int world = exchanges() ? ctx_->world : 1;
  const float beta = static_cast<float>(settings_.momentum);
  // This rank's slices: the momentum step and the Nesterov blend (DeepSpeed's
  // muon_update: m.lerp_(g, 1 - beta); u = g.lerp(m, beta) or m), the blend
  // written where the first exchange sends it from (the gradient read there
  // first: each element is read before it is overwritten).
  for (const Slice& sl : slices_) {
    float* g = out_.data() + sl.at;
    float* m = momentum_.data() + sl.at;
    RETURN_IF_ERROR(grads(matrices_[sl.i].group, sl.begin, sl.len, g));
    RETURN_IF_ERROR(store_->Read(matrices_[sl.i].group, 1, sl.begin, sl.len, m));
    for (int64_t k = 0; k < sl.len; ++k) {
      const float gk = g[k] * grad_scale;
      float& mk = m[k];
      mk += (1.0f - beta) * (gk - mk);
      g[k] = settings_.nesterov ? gk + beta * (mk - gk) : mk;
    }
  }
  auto exchange = [&](const float* send, const std::vector<int64_t>& send_counts, float* recv,
                      const std::vector<int64_t>& recv_counts) {
    return ctx_->stream->Wait(ctx_->stream->Submit([&] {
      return ctx_->ctrl->AllToAllV(send, send_counts, recv, recv_counts, DType::kF32);
    }));
  };
  if (world > 1) {
    // To the owners, rank r's slices of the matrices r owns in matrix order;
    // each owner assembles each matrix from every rank's slice (received
    // rank by rank), orthogonalises it and puts each slice of the update
    // back where it came from; the second exchange returns them.
    RETURN_IF_ERROR(exchange(out_.data(), send_counts_, in_.data(), recv_counts_));
    for (size_t k = 0; k < owned_.size(); ++k) {
      const MuonMatrix& mat = matrices_[owned_[k]];
      for (int r = 0; r < world; ++r) {
        int64_t lo, hi;
        RankSlice(owned_[k], r, &lo, &hi);
        const float* from = in_.data() + in_at_[k * world + r];
        std::copy(from, from + (hi - lo), whole_.begin() + (lo - mat.offset));
      }
      NewtonSchulzOrthogonalize(whole_.data(), mat.rows, mat.cols, settings_.ns_steps, &ns_);
      for (int r = 0; r < world; ++r) {
        int64_t lo, hi;
        RankSlice(owned_[k], r, &lo, &hi);
        std::copy(whole_.begin() + (lo - mat.offset), whole_.begin() + (hi - mat.offset),
                  in_.begin() + in_at_[k * world + r]);
      }
    }
    RETURN_IF_ERROR(exchange(in_.data(), recv_counts_, out_.data(), send_counts_));
  } else {
    // One rank holds every matrix whole: its slices are the matrices.
    for (const Slice& sl : slices_) {
      const MuonMatrix& mat = matrices_[sl.i];
      NewtonSchulzOrthogonalize(out_.data() + sl.at, mat.rows, mat.cols, settings_.ns_steps,
                                &ns_);
    }
  }
  // Each slice's new master: decoupled decay, then the step.
  const float mlr = static_cast<float>(lr * settings_.lr_ratio);
  const float decay = static_cast<float>(1.0 - lr * settings_.lr_ratio * settings_.weight_decay);
  for (const Slice& sl : slices_) {
    float* master = master_.data() + sl.at;
    const float* u = out_.data() + sl.at;
    RETURN_IF_ERROR(store_->Read(matrices_[sl.i].group, 0, sl.begin, sl.len, master));
    for (int64_t k = 0; k < sl.len; ++k) master[k] = master[k] * decay - mlr * u[k];
  }
  return absl::OkStatus();
}

absl::Status MuonPhase::Commit() {
  // The updates in out_ are spent: it gives the zero exp_avg_sq.
  std::fill(out_.begin(), out_.end(), 0.0f);
  for (const Slice& sl : slices_) {
    const int g = matrices_[sl.i].group;
    RETURN_IF_ERROR(store_->Write(g, 0, sl.begin, sl.len, master_.data() + sl.at));
    RETURN_IF_ERROR(store_->Write(g, 1, sl.begin, sl.len, momentum_.data() + sl.at));
    RETURN_IF_ERROR(store_->Write(g, 2, sl.begin, sl.len, out_.data() + sl.at));
    RETURN_IF_ERROR(
        sharded_->PutOwnedF32(sharded_->OwnedWorking(g, sl.begin), master_.data() + sl.at, sl.len));
  }
  return absl::OkStatus();
}

}  // namespace zero

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
  owners_ = AssignMuonOwners(cost, exchanges() ? ctx_->world : 1);
}

bool MuonPhase::exchanges() const { return ctx_->stage() >= 1 && ctx_->world > 1; }

void MuonPhase::RankSlice(int i, int r, int64_t* lo, int64_t* hi) const {
  const MuonMatrix& m = matrices_[i];
  int64_t begin = 0, len = ctx_->layout.groups()[m.group].padded;
  if (exchanges()) {
    len = ctx_->layout.groups()[m.group].shard;
    begin = len * r;
  }
  *lo = std::max(m.offset, begin);
  *hi = std::max(*lo, std::min(m.offset + m.numel(), begin + len));
}

absl::Status MuonPhase::Prepare(const MuonGradReader& grads, float grad_scale, double lr) {
  const int world = exchanges() ? ctx_->world : 1;
  const int me = exchanges() ? ctx_->rank : 0;
  const int n = static_cast<int>(matrices_.size());
  const float beta = static_cast<float>(settings_.momentum);
  held_.clear();
  // This rank's slices: the momentum step and the Nesterov blend (DeepSpeed's
  // muon_update: m.lerp_(g, 1 - beta); u = g.lerp(m, beta) or m).
  for (int i = 0; i < n; ++i) {
    int64_t lo, hi;
    RankSlice(i, me, &lo, &hi);
    if (hi == lo) continue;
    Held h;
    h.i = i;
    h.begin = lo - sharded_->group(matrices_[i].group).owned_begin;
    const int64_t len = hi - lo;
    std::vector<float> g(len);
    h.momentum.resize(len);
    h.update.resize(len);
    RETURN_IF_ERROR(grads(matrices_[i].group, h.begin, len, g.data()));
    RETURN_IF_ERROR(store_->Read(matrices_[i].group, 1, h.begin, len, h.momentum.data()));
    for (int64_t k = 0; k < len; ++k) {
      const float gk = g[k] * grad_scale;
      float& mk = h.momentum[k];
      mk += (1.0f - beta) * (gk - mk);
      h.update[k] = settings_.nesterov ? gk + beta * (mk - gk) : mk;
    }
    held_.push_back(std::move(h));
  }
  // To the owners: rank r's slices of the matrices r owns, in matrix order.
  std::vector<std::vector<float>> whole(n);
  std::vector<float> send, recv;
  std::vector<int64_t> send_counts(world, 0), recv_counts(world, 0);
  for (int r = 0; r < world; ++r) {
    for (const Held& h : held_) {
      if (owners_[h.i] != r) continue;
      send.insert(send.end(), h.update.begin(), h.update.end());
      send_counts[r] += static_cast<int64_t>(h.update.size());
    }
    for (int i = 0; i < n; ++i) {
      if (owners_[i] != me) continue;
      int64_t lo, hi;
      RankSlice(i, r, &lo, &hi);
      recv_counts[r] += hi - lo;
    }
  }
  auto exchange = [&](const std::vector<float>& out, const std::vector<int64_t>& out_counts,
                      std::vector<float>* in, const std::vector<int64_t>& in_counts) {
    int64_t total = 0;
    for (int64_t c : in_counts) total += c;
    in->assign(total, 0.0f);
    return ctx_->stream->Wait(ctx_->stream->Submit([&] {
      return ctx_->ctrl->AllToAllV(out.data(), out_counts, in->data(), in_counts, DType::kF32);
    }));
  };
  if (world > 1) {
    RETURN_IF_ERROR(exchange(send, send_counts, &recv, recv_counts));
  } else {
    recv = send;
  }
  // Assemble each owned matrix from every rank's slice, orthogonalise.
  size_t at = 0;
  for (int r = 0; r < world; ++r) {
    for (int i = 0; i < n; ++i) {
      if (owners_[i] != me) continue;
      int64_t lo, hi;
      RankSlice(i, r, &lo, &hi);
      whole[i].resize(matrices_[i].numel());
      std::copy(recv.begin() + at, recv.begin() + at + (hi - lo),
                whole[i].begin() + (lo - matrices_[i].offset));
      at += hi - lo;
    }
  }
  for (int i = 0; i < n; ++i) {
    if (owners_[i] != me) continue;
    NewtonSchulzOrthogonalize(whole[i].data(), matrices_[i].rows, matrices_[i].cols,
                              settings_.ns_steps);
  }
  // Back: each rank's slices of the matrices this rank owns.
  send.clear();
  for (int r = 0; r < world; ++r) {
    std::swap(send_counts[r], recv_counts[r]);
    for (int i = 0; i < n; ++i) {
      if (owners_[i] != me) continue;
      int64_t lo, hi;
      RankSlice(i, r, &lo, &hi);
      send.insert(send.end(), whole[i].begin() + (lo - matrices_[i].offset),
                  whole[i].begin() + (hi - matrices_[i].offset));
    }
  }
  if (world > 1) {
    RETURN_IF_ERROR(exchange(send, send_counts, &recv, recv_counts));
  } else {
    recv = send;
  }
  // Received in (owner, matrix) order: each slice's orthogonalised update,
  // then its new master (decoupled decay, then the step).
  const float mlr = static_cast<float>(lr * settings_.lr_ratio);
  const float decay = static_cast<float>(1.0 - lr * settings_.lr_ratio * settings_.weight_decay);
  at = 0;
  for (int r = 0; r < world; ++r) {
    for (Held& h : held_) {
      if (owners_[h.i] != r) continue;
      const int64_t len = static_cast<int64_t>(h.update.size());
      h.master.resize(len);
      RETURN_IF_ERROR(store_->Read(matrices_[h.i].group, 0, h.begin, len, h.master.data()));
      for (int64_t k = 0; k < len; ++k) {
        h.master[k] = h.master[k] * decay - mlr * recv[at + k];
      }
      at += len;
    }
  }
  return absl::OkStatus();
}

absl::Status MuonPhase::Commit() {
  std::vector<float> zeros;
  for (const Held& h : held_) {
    const int g = matrices_[h.i].group;
    const int64_t len = static_cast<int64_t>(h.master.size());
    zeros.assign(len, 0.0f);
    RETURN_IF_ERROR(store_->Write(g, 0, h.begin, len, h.master.data()));
    RETURN_IF_ERROR(store_->Write(g, 1, h.begin, len, h.momentum.data()));
    RETURN_IF_ERROR(store_->Write(g, 2, h.begin, len, zeros.data()));
    RETURN_IF_ERROR(sharded_->PutOwnedF32(sharded_->OwnedWorking(g, h.begin), h.master.data(), len));
  }
  held_.clear();
  return absl::OkStatus();
}

}  // namespace zero

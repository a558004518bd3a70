#include "core/engine/hierarchy.h"

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace zero {
namespace {

// Groups are cut by the SplitSpecs of core/comm/topology.h, the same on
// every backend (MPI, thread, NCCL).
absl::StatusOr<std::unique_ptr<LinkCountingCommunicator>> SplitCounted(
    LinkCountingCommunicator* c, const SplitSpec& spec) {
  return c->SplitBy(spec);
}

}  // namespace

void Hierarchy::set_wait_stream(void* stream) {
  for (LinkCountingCommunicator* c : {replica_.get(), hpz_.get(), node_.get(), cross_.get()}) {
    if (c != nullptr) c->set_wait_stream(stream);
  }
}

std::vector<const Communicator*> Hierarchy::extra() const {
  std::vector<const Communicator*> out;
  for (const auto* c : {replica_.get(), hpz_.get(), node_.get(), cross_.get()}) {
    if (c) out.push_back(c);
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Hierarchy>> Hierarchy::Create(
    Config* c, std::unique_ptr<Communicator> world, std::unique_ptr<Communicator>* data) {
  std::unique_ptr<Hierarchy> h(new Hierarchy);
  h->links_ = std::make_shared<LinkCounters>();
  ASSIGN_OR_RETURN(h->topo_, DetectTopology(world.get(), c->ranks_per_node));
  const Topology& t = h->topo_;
  const int w = world->world_size(), rank = world->rank();
  auto counted =
      std::make_unique<LinkCountingCommunicator>(std::move(world), t.node_of, h->links_);

  if (c->hybrid_shard_per_node) {
    const int l = t.uniform_ranks_per_node();
    if (l < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zero_optimization.sharding_strategy: HYBRID_SHARD shards within a node and needs "
          "the same number of ranks on every node; the ", t.nodes, " nodes (from ", t.source,
          ") differ"));
    }
    c->mics_shard_size = l;
  }
  const int64_t s = c->mics_shard_size;
  if (s == 1 && w > 1) {
    return absl::InvalidArgumentError(
        "zero_optimization.mics_shard_size: 1 shards nothing (every rank a full replica); "
        "use stage 0, or a group size >= 2");
  }
  if (s > 1 && s < w) {
    const int shard_color = rank / static_cast<int>(s);
    ASSIGN_OR_RETURN(std::unique_ptr<LinkCountingCommunicator> shard,
                     SplitCounted(counted.get(), ConsecutiveGroups(w, static_cast<int>(s))));
    ASSIGN_OR_RETURN(h->replica_,
                     SplitCounted(counted.get(), StridedGroups(w, static_cast<int>(s))));
    h->replicas_ = w / static_cast<int>(s);
    h->replica_index_ = shard_color;
    h->data_ = shard.get();
    *data = std::move(shard);
    h->world_ = std::move(counted);
    return h;
  }
  if (c->hpz_partition_size > 1 && c->hpz_partition_size < w) {
    const int p = static_cast<int>(c->hpz_partition_size);
    ASSIGN_OR_RETURN(h->hpz_, SplitCounted(counted.get(), ConsecutiveGroups(w, p)));
  }
  if (c->quantized_gradients) {
    const int l = t.uniform_ranks_per_node();
    if (l < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zero_optimization.zero_quantized_gradients: the hierarchical reduce-scatter needs "
          "the same number of ranks on every node; the ", t.nodes, " nodes (from ", t.source,
          ") differ"));
    }
    ASSIGN_OR_RETURN(h->node_, SplitCounted(counted.get(), NodeGroups(t)));
    ASSIGN_OR_RETURN(h->cross_, SplitCounted(counted.get(), CrossNodeGroups(t)));
  }
  h->data_ = counted.get();
  *data = std::move(counted);
  return h;
}

}  // namespace zero

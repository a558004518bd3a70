// Which ranks share a node (docs/ARCHITECTURE.md, "Nodes, hybrid sharding
// and ZeRO++"). Each rank names its node from the launcher's environment,
// the names are all-gathered, and nodes are numbered in order of their
// lowest rank. Sources, first that applies (every rank must use the same):
//   1. config: zero_ranks_per_node = L > 0 — ranks [kL, (k+1)L) are node k;
//   2. ZERO_NODE_ID (set per host by zero's launcher and launch agent);
//   3. Slurm: SLURM_NODEID;
//   4. OpenMPI: OMPI_COMM_WORLD_LOCAL_RANK / _LOCAL_SIZE — a new node where
//      the local rank restarts at 0 (ranks placed by slot, mpirun's default;
//      anything else is refused: set ZERO_NODE_ID or zero_ranks_per_node),
//      when the communicator is as large as MPI_COMM_WORLD;
//   5. the host name.
// The sub-communicators are split from the given communicator
// (Communicator::Split: MPI_Comm_split, thread groups), never a transport of
// zero's own.
#ifndef ZERO_CORE_COMM_TOPOLOGY_H_
#define ZERO_CORE_COMM_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/comm/communicator.h"

namespace zero {

struct Topology {
  int world = 1, rank = 0;
  std::vector<int> node_of;     // by rank
  std::vector<int> local_rank;  // by rank: position among its node's ranks
  int nodes = 1;
  std::string source;           // "zero_ranks_per_node", "ZERO_NODE_ID", ...

  int node() const { return node_of[rank]; }
  // Ranks on node k, ascending.
  std::vector<int> RanksOnNode(int k) const;
  // L when every node has L ranks, else -1.
  int uniform_ranks_per_node() const;
  // The nodes of `members` (world ranks), in member order: the node map of
  // a sub-communicator over those ranks.
  std::vector<int> NodesOf(const std::vector<int>& members) const;
};

// The environment's view for this rank (no communication): a node key and
// its source, or the OpenMPI local rank/size pair (used only when the
// communicator has OMPI_COMM_WORLD_SIZE ranks).
struct NodeHint {
  std::string source;
  std::string key;           // node name (sources 2, 3, 5)
  int local_rank = -1, local_size = -1;  // source 4
};
NodeHint NodeHintFromEnv(int world);

// COLLECTIVE over `comm`. ranks_per_node > 0 overrides the environment.
// Over a device communicator (NCCL) nothing is exchanged: nodes of
// OMPI_COMM_WORLD_LOCAL_SIZE ranks, else one node.
absl::StatusOr<Topology> DetectTopology(Communicator* comm, int64_t ranks_per_node);

// Pure: the topology from every rank's hint (rank order); what
// DetectTopology computes after its all-gather.
absl::StatusOr<Topology> TopologyFromHints(const std::vector<NodeHint>& hints, int rank);
Topology TopologyFromRanksPerNode(int world, int rank, int ranks_per_node);

// How a communicator is cut into sub-communicators (Communicator::Split):
// every rank's color and key, by rank. Computed alike on every rank from
// the topology and the config, so no backend needs an exchange to know who
// is in a group: the MPI, thread and NCCL splits and the per-link node map
// (LinkCountingCommunicator::SplitBy) all read the same SplitSpec.
struct SplitSpec {
  std::vector<int> color, key;
};

// The ranks of `rank`'s sub-communicator, in their new rank order: those
// of its color, by (key, rank), as MPI_Comm_split and ncclCommSplit order
// them.
std::vector<int> SplitMembers(const SplitSpec& spec, int rank);

// The engine's groups (core/engine/hierarchy.h):
//   ConsecutiveGroups(w, s): ranks [ks, (k+1)s) — hybrid sharding's shard
//     groups (mics_shard_size) and hpZ's groups (zero_hpz_partition_size);
//   StridedGroups(w, s): ranks r, r+s, r+2s, ... — hybrid sharding's
//     replicas (the ranks holding the same shard in each shard group);
//   NodeGroups(t): the ranks of each node, by local rank;
//   CrossNodeGroups(t): the ranks of one local rank on every node, by node.
SplitSpec ConsecutiveGroups(int world, int size);
SplitSpec StridedGroups(int world, int stride);
SplitSpec NodeGroups(const Topology& t);
SplitSpec CrossNodeGroups(const Topology& t);

}  // namespace zero

#endif  // ZERO_CORE_COMM_TOPOLOGY_H_

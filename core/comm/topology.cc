#include "core/comm/topology.h"

#include <unistd.h>

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace zero {

std::vector<int> Topology::RanksOnNode(int k) const {
  std::vector<int> out;
  for (int r = 0; r < world; ++r) {
    if (node_of[r] == k) out.push_back(r);
  }
  return out;
}

int Topology::uniform_ranks_per_node() const {
  const int l = static_cast<int>(RanksOnNode(0).size());
  for (int k = 1; k < nodes; ++k) {
    if (static_cast<int>(RanksOnNode(k).size()) != l) return -1;
  }
  return l;
}

std::vector<int> Topology::NodesOf(const std::vector<int>& members) const {
  std::vector<int> out;
  for (int r : members) out.push_back(node_of[r]);
  return out;
}

namespace {

void FillLocalRanks(Topology* t) {
  std::map<int, int> next;
  t->local_rank.assign(t->world, 0);
  for (int r = 0; r < t->world; ++r) t->local_rank[r] = next[t->node_of[r]]++;
  t->nodes = static_cast<int>(next.size());
}

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

}  // namespace

Topology TopologyFromRanksPerNode(int world, int rank, int ranks_per_node) {
  Topology t;
  t.world = world;
  t.rank = rank;
  t.source = "zero_ranks_per_node";
  for (int r = 0; r < world; ++r) t.node_of.push_back(r / ranks_per_node);
  FillLocalRanks(&t);
  return t;
}

NodeHint NodeHintFromEnv(int world) {
  NodeHint h;
  // OpenMPI's local ranks describe MPI_COMM_WORLD; a communicator of
  // another size (a thread group inside an MPI job) falls back to names.
  const char* ompi_size = Env("OMPI_COMM_WORLD_SIZE");
  const bool ompi_world = ompi_size != nullptr && std::atoi(ompi_size) == world;
  if (const char* v = Env("ZERO_NODE_ID")) {
    h.source = "ZERO_NODE_ID";
    h.key = v;
  } else if (const char* v = Env("SLURM_NODEID")) {
    h.source = "SLURM_NODEID";
    h.key = v;
  } else if (ompi_world && Env("OMPI_COMM_WORLD_LOCAL_RANK") &&
             Env("OMPI_COMM_WORLD_LOCAL_SIZE")) {
    h.source = "OMPI_COMM_WORLD_LOCAL_RANK";
    h.local_rank = std::atoi(Env("OMPI_COMM_WORLD_LOCAL_RANK"));
    h.local_size = std::atoi(Env("OMPI_COMM_WORLD_LOCAL_SIZE"));
  } else {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    h.source = "hostname";
    h.key = name;
  }
  return h;
}

absl::StatusOr<Topology> TopologyFromHints(const std::vector<NodeHint>& hints, int rank) {
  Topology t;
  t.world = static_cast<int>(hints.size());
  t.rank = rank;
  t.source = hints[0].source;
  for (int r = 0; r < t.world; ++r) {
    if (hints[r].source != t.source) {
      return absl::FailedPreconditionError(absl::StrCat(
          "topology: rank 0 finds its node from ", t.source, " but rank ", r, " from ",
          hints[r].source, "; launch every rank alike or set zero_ranks_per_node"));
    }
  }
  if (t.source == "OMPI_COMM_WORLD_LOCAL_RANK") {
    // Placed by slot: local ranks 0..L-1 in rank order, node after node.
    int node = -1;
    for (int r = 0; r < t.world; ++r) {
      const NodeHint& h = hints[r];
      if (h.local_rank == 0) ++node;
      const int start = r - h.local_rank;
      if (node < 0 || start < 0 || hints[start].local_rank != 0 ||
          hints[start].local_size != h.local_size || h.local_rank >= h.local_size) {
        return absl::FailedPreconditionError(absl::StrCat(
            "topology: OpenMPI placed rank ", r, " as local rank ", h.local_rank, " of ",
            h.local_size, ", not by slot (ranks of a node consecutive); set ZERO_NODE_ID per "
            "host or zero_ranks_per_node"));
      }
      t.node_of.push_back(node);
    }
  } else {
    std::map<std::string, int> ids;
    for (int r = 0; r < t.world; ++r) {
      auto it = ids.find(hints[r].key);
      if (it == ids.end()) it = ids.emplace(hints[r].key, static_cast<int>(ids.size())).first;
      t.node_of.push_back(it->second);
    }
  }
  FillLocalRanks(&t);
  return t;
}

absl::StatusOr<Topology> DetectTopology(Communicator* comm, int64_t ranks_per_node) {
  const int world = comm->world_size(), rank = comm->rank();
  if (ranks_per_node > 0) {
    if (world % ranks_per_node != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zero_ranks_per_node: expected a divisor of the world size ", world, ", got ",
          ranks_per_node));
    }
    return TopologyFromRanksPerNode(world, rank, static_cast<int>(ranks_per_node));
  }
  if (world == 1) {
    Topology t = TopologyFromRanksPerNode(1, 0, 1);
    t.source = "one rank";
    return t;
  }
  if (comm->device_memory()) {
    // A device communicator (NCCL) moves GPU memory only, and the engine has
    // no device yet: nothing is exchanged. OpenMPI's local size gives nodes
    // of that many ranks (assumed the same everywhere); else one node.
    const char* l = Env("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int local = l ? std::atoi(l) : 0;
    if (local > 0 && world % local == 0) {
      Topology t = TopologyFromRanksPerNode(world, rank, local);
      t.source = "OMPI_COMM_WORLD_LOCAL_SIZE (device communicator, not exchanged)";
      return t;
    }
    Topology t = TopologyFromRanksPerNode(world, rank, world);
    t.source = "unknown (device communicator; set zero_ranks_per_node)";
    return t;
  }
  // Every rank's hint as a fixed record: source (32 bytes), key (200),
  // local rank and size; moved as 2-byte units.
  constexpr int kRecord = 240;
  const NodeHint mine = NodeHintFromEnv(world);
  std::vector<char> rec(kRecord, 0), all(static_cast<size_t>(kRecord) * world, 0);
  std::strncpy(rec.data(), mine.source.c_str(), 31);
  std::strncpy(rec.data() + 32, mine.key.c_str(), 199);
  std::memcpy(rec.data() + 232, &mine.local_rank, 4);
  std::memcpy(rec.data() + 236, &mine.local_size, 4);
  {
    ScopedCountingKind control(comm, CollectiveKind::kControl);
    absl::Status s = comm->AllGatherV(rec.data(), all.data(),
                                      std::vector<int64_t>(world, kRecord / 2), DType::kF16);
    if (!s.ok()) return s;
  }
  std::vector<NodeHint> hints(world);
  for (int r = 0; r < world; ++r) {
    const char* p = all.data() + static_cast<size_t>(r) * kRecord;
    hints[r].source = std::string(p, strnlen(p, 32));
    hints[r].key = std::string(p + 32, strnlen(p + 32, 200));
    std::memcpy(&hints[r].local_rank, p + 232, 4);
    std::memcpy(&hints[r].local_size, p + 236, 4);
  }
  return TopologyFromHints(hints, rank);
}

std::vector<int> SplitMembers(const SplitSpec& spec, int rank) {
  std::vector<std::pair<int, int>> members;  // (key, rank) of rank's color
  for (int r = 0; r < static_cast<int>(spec.color.size()); ++r) {
    if (spec.color[r] == spec.color[rank]) members.emplace_back(spec.key[r], r);
  }
  std::sort(members.begin(), members.end());
  std::vector<int> out;
  for (const auto& m : members) out.push_back(m.second);
  return out;
}

SplitSpec ConsecutiveGroups(int world, int size) {
  SplitSpec s;
  for (int r = 0; r < world; ++r) {
    s.color.push_back(r / size);
    s.key.push_back(r);
  }
  return s;
}

SplitSpec StridedGroups(int world, int stride) {
  SplitSpec s;
  for (int r = 0; r < world; ++r) {
    s.color.push_back(r % stride);
    s.key.push_back(r);
  }
  return s;
}

SplitSpec NodeGroups(const Topology& t) {
  SplitSpec s;
  s.color = t.node_of;
  s.key = t.local_rank;
  return s;
}

SplitSpec CrossNodeGroups(const Topology& t) {
  SplitSpec s;
  s.color = t.local_rank;
  s.key = t.node_of;
  return s;
}

}  // namespace zero

// Beyond one node (docs/ARCHITECTURE.md, "Nodes, hybrid sharding and
// ZeRO++"): the topology (core/comm/topology.h), the engine's communicators
// split from its duplicate of the caller's, all counted per link in one
// LinkCounters:
//   data     the engine's communicator (ctx.comm): every rank, or with
//            hybrid sharding (mics_shard_size S / HYBRID_SHARD) the group of
//            S consecutive ranks this rank shards its states within;
//   replica  hybrid: the ranks holding the same shard in the other groups
//            (the shard's gradient is all-reduced across them);
//   hpz      hpZ: the group of zero_hpz_partition_size consecutive ranks
//            that keeps the secondary param shards;
//   node / cross  qgZ: the ranks of this node (ranked by local rank), and
//            the ranks of the same local rank on every node (ranked by node).
#ifndef ZERO_CORE_ENGINE_HIERARCHY_H_
#define ZERO_CORE_ENGINE_HIERARCHY_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/comm/link_counting_communicator.h"
#include "core/comm/topology.h"
#include "core/config/config.h"

namespace zero {

class Hierarchy {
 public:
  // COLLECTIVE over `world` (the engine's duplicate). Resolves
  // HYBRID_SHARD to the ranks per node in `config`; `*data` receives the
  // engine's communicator.
  static absl::StatusOr<std::unique_ptr<Hierarchy>> Create(
      Config* config, std::unique_ptr<Communicator> world, std::unique_ptr<Communicator>* data);

  const Topology& topology() const { return topo_; }
  const LinkCounters& links() const { return *links_; }
  // The engine's data communicator as created (ctx.comm may wrap it later:
  // staging, comms_logger); quantized collectives count through it.
  LinkCountingCommunicator* data() const { return data_; }
  LinkCountingCommunicator* replica() const { return replica_.get(); }
  int replicas() const { return replicas_; }
  // Hybrid: which copy of the shards this rank's group holds (0 saves).
  int replica_index() const { return replica_index_; }
  LinkCountingCommunicator* hpz() const { return hpz_.get(); }
  LinkCountingCommunicator* node() const { return node_.get(); }
  LinkCountingCommunicator* cross() const { return cross_.get(); }
  // Device communicators (NCCL) order their work after `stream`, the
  // compute stream, as BindCommToDevice does for the data communicator: the
  // sub-groups were split before the engine had a device.
  void set_wait_stream(void* stream);
  // Any hierarchical mode on (sub-communicators beyond the data one).
  bool active() const { return replica_ || hpz_ || node_ || cross_; }
  // Communicators whose traffic the engine's stats add to ctx.comm's.
  std::vector<const Communicator*> extra() const;

 private:
  Hierarchy() = default;
  Topology topo_;
  std::shared_ptr<LinkCounters> links_;
  std::unique_ptr<Communicator> world_;  // kept while sub-groups use it
  std::unique_ptr<LinkCountingCommunicator> replica_, hpz_, node_, cross_;
  LinkCountingCommunicator* data_ = nullptr;  // owned by the engine
  int replicas_ = 1, replica_index_ = 0;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_HIERARCHY_H_

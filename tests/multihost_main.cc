// One rank of //tests:multihost_launch_test: started by zero-launch on
// several "hosts" (aliases of this machine) through OpenMPI and
// tools/zero_launch_agent.sh. Checks, on every rank:
//   - the engine's topology (from ZERO_NODE_ID, or OpenMPI's local ranks
//     with --expect-source OMPI_COMM_WORLD_LOCAL_RANK) has the expected
//     node sizes, in rank order;
//   - with 2 nodes of 2 ranks: per mode (plain stage 3, hpZ, qwZ + hpZ,
//     qgZ int8, hybrid HYBRID_SHARD) the per-link counters of one step
//     equal, exactly, those of the same run on 4 thread ranks grouped by
//     zero_ranks_per_node (whose values //tests:multinode_test checks
//     against the formulas), and the fp32 hybrid and hpZ runs train to the
//     single-rank result;
// and prints a JSON line per rank and mode. Exit status 0 when every rank
// passed.
//
//   multihost_main --nodes 2,2 [--expect-source ZERO_NODE_ID] [--topology-only]
//                  [--bench STEPS]   (bench/multinode_bench.sh)
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "core/comm/mpi_communicator.h"
#include "core/comm/thread_communicator.h"
#include "core/comm/topology.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/rank_expect.h"

namespace zero {
namespace testing {
namespace {

struct Mode {
  const char* name;
  int stage;
  DType dtype;
  int hpz;
  bool qw, qg, hybrid;
};

Config ModeConfig(const Mode& m) {
  Config c = SmallMlpConfig(m.stage, m.dtype);
  c.comm_timeout_seconds = 120;
  c.stage3_param_persistence_threshold = 0;
  c.hpz_partition_size = m.hpz;
  c.quantized_weights = m.qw;
  c.quantized_gradients = m.qg;
  c.hybrid_shard_per_node = m.hybrid;
  return c;
}

// The same run on 4 thread ranks, 2 per node by config; rank `rank`'s stats.
EngineStats ThreadRun(Config c, const MlpSpec& spec, int rank) {
  c.ranks_per_node = 2;
  std::vector<EngineStats> stats(4);
  std::mutex mu;
  RunThreads(4, [&](int r, Communicator* comm) {
    auto got = TrainMlp(c, comm, spec);
    std::lock_guard<std::mutex> l(mu);
    if (got.ok()) stats[r] = got->stats;
  });
  return stats[rank];
}

MlpResult SingleRank(Config c, const MlpSpec& spec) {
  c.stage = 0;
  c.hpz_partition_size = 1;
  c.quantized_weights = c.quantized_gradients = c.hybrid_shard_per_node = false;
  auto comm = std::move(MakeThreadCommunicators(1)[0]);
  auto r = TrainMlp(c, comm.get(), spec);
  return r.ok() ? *r : MlpResult{};
}

void Modes(Communicator* comm) {
  const int rank = comm->rank();
  const Mode modes[] = {
      {"plain_stage3", 3, DType::kF16, 1, false, false, false},
      {"hpZ", 3, DType::kF16, 2, false, false, false},
      {"qwZ_hpZ", 3, DType::kF16, 2, true, false, false},
      {"qgZ_int8", 3, DType::kF16, 1, false, true, false},
      {"hybrid_shard", 3, DType::kF32, 1, false, false, true},
      {"hpZ_fp32", 3, DType::kF32, 2, false, false, false},
  };
  for (const Mode& m : modes) {
    Config c = ModeConfig(m);
    MlpSpec spec;
    spec.hidden = 100;
    spec.steps = m.dtype == DType::kF32 ? 5 : 1;
    auto got = TrainMlp(c, comm, spec);
    Expect(got.ok(), rank, std::string(m.name) + ": " + std::string(got.status().message()));
    if (!got.ok()) continue;
    const EngineStats& s = got->stats;
    const EngineStats t = ThreadRun(c, spec, rank);
    int64_t inter = 0, intra = 0;
    for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
      if (k == static_cast<int>(CollectiveKind::kControl)) continue;
      for (int l = 0; l < 2; ++l) {
        Expect(s.link_bytes[k][l] == t.link_bytes[k][l] && s.link_elems[k][l] == t.link_elems[k][l],
               rank,
               std::string(m.name) + ": kind " + std::to_string(k) + " link " +
                   std::to_string(l) + ": mpirun " + std::to_string(s.link_bytes[k][l]) +
                   " B vs threads " + std::to_string(t.link_bytes[k][l]) + " B");
      }
      inter += s.link_bytes[k][1];
      intra += s.link_bytes[k][0];
    }
    Expect(s.nodes == 2 && s.node == rank / 2 && s.ranks_per_node == 2, rank,
           std::string(m.name) + ": engine sees 2 nodes of 2, this rank on node " +
               std::to_string(rank / 2));
    if (m.dtype == DType::kF32) {
      const double d = MaxRelDiff(*got, SingleRank(c, spec));
      Expect(d <= 1e-6, rank, std::string(m.name) + ": max rel diff vs single rank " +
                                  std::to_string(d));
    }
    std::printf("{\"multihost\":\"%s\",\"rank\":%d,\"node\":%d,\"inter_bytes\":%lld,"
                "\"intra_bytes\":%lld,\"inter_ag\":%lld,\"inter_rs\":%lld,\"inter_ar\":%lld}\n",
                m.name, rank, s.node, static_cast<long long>(inter),
                static_cast<long long>(intra), static_cast<long long>(s.link_bytes[0][1]),
                static_cast<long long>(s.link_bytes[1][1]),
                static_cast<long long>(s.link_bytes[2][1]));
    std::fflush(stdout);
  }
}

// bench/multinode_bench.sh: per mode, `steps` steps of a larger MLP; rank 0
// prints step time, bytes per step on each link, the final loss against
// plain stage 3 (JSON lines).
void Bench(Communicator* comm, int steps) {
  const int rank = comm->rank();
  const Mode modes[] = {
      {"stage3", 3, DType::kF32, 1, false, false, false},
      {"hybrid_shard", 3, DType::kF32, 1, false, false, true},
      {"hpZ", 3, DType::kF32, 2, false, false, false},
      {"qwZ", 3, DType::kF32, 1, true, false, false},
      {"qgZ_int8", 3, DType::kF32, 1, false, true, false},
      {"qgZ_int4", 3, DType::kF32, 1, false, true, false},
      {"qwZ_qgZ_hpZ", 3, DType::kF32, 2, true, true, false},
  };
  double base_loss = 0.0;
  for (const Mode& m : modes) {
    Config c = ModeConfig(m);
    c.stage3_param_persistence_threshold = 100;
    c.reduce_bucket_size = 1 << 16;
    if (std::string(m.name) == "qgZ_int4") c.quantized_gradients_bits = 4;
    MlpSpec spec;
    spec.in = 64;
    spec.hidden = 1024;
    spec.steps = steps;
    spec.record_steps = false;
    double t1 = 0.0;
    spec.hook = [&](Engine*, int step, int index) {
      if (step == 1 && index == -1) t1 = MPI_Wtime();
      return absl::OkStatus();
    };
    auto got = TrainMlp(c, comm, spec);
    const double t2 = MPI_Wtime();
    Expect(got.ok(), rank, std::string(m.name) + ": " + std::string(got.status().message()));
    if (!got.ok()) continue;
    const EngineStats& s = got->stats;
    int64_t inter = 0, intra = 0;
    for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
      inter += s.link_bytes[k][1];
      intra += s.link_bytes[k][0];
    }
    const double loss = MlpEvalLoss(spec, *got);
    if (std::string(m.name) == "stage3") base_loss = loss;
    if (rank == 0) {
      std::printf("{\"bench\":\"multinode\",\"mode\":\"%s\",\"nodes\":%d,\"ranks\":%d,"
                  "\"psi\":%lld,\"steps\":%d,\"step_ms\":%.3f,\"inter_bytes_per_step\":%.0f,"
                  "\"intra_bytes_per_step\":%.0f,\"final_loss\":%.6g,"
                  "\"loss_vs_stage3\":%.5f}\n",
                  m.name, s.nodes, comm->world_size(), static_cast<long long>(s.trainable_numel),
                  steps, 1e3 * (t2 - t1) / (steps - 1), static_cast<double>(inter) / steps,
                  static_cast<double>(intra) / steps, loss,
                  base_loss > 0 ? (loss - base_loss) / base_loss : 0.0);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero

int main(int argc, char** argv) {
  using namespace zero;
  std::vector<int> nodes;
  std::string source = "ZERO_NODE_ID";
  bool topology_only = false;
  int bench_steps = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--nodes") == 0 && i + 1 < argc) {
      std::stringstream ss(argv[++i]);
      std::string x;
      while (std::getline(ss, x, ',')) nodes.push_back(std::stoi(x));
    } else if (std::strcmp(argv[i], "--expect-source") == 0 && i + 1 < argc) {
      source = argv[++i];
    } else if (std::strcmp(argv[i], "--topology-only") == 0) {
      topology_only = true;
    } else if (std::strcmp(argv[i], "--bench") == 0 && i + 1 < argc) {
      bench_steps = std::max(2, std::atoi(argv[++i]));
    }
  }
  auto comm = MakeMpiCommunicator(nullptr);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  Communicator* c = comm->get();
  c->set_timeout_seconds(120);
  const int rank = c->rank();
  auto topo = DetectTopology(c, -1);
  testing::Expect(topo.ok(), rank, "topology: " + std::string(topo.status().message()));
  if (topo.ok()) {
    std::vector<int> sizes;
    for (int k = 0; k < topo->nodes; ++k) sizes.push_back(static_cast<int>(topo->RanksOnNode(k).size()));
    std::string got;
    for (int n : sizes) got += (got.empty() ? "" : ",") + std::to_string(n);
    testing::Expect(sizes == nodes, rank, "node sizes " + got);
    testing::Expect(topo->source == source, rank, "topology source " + topo->source);
    const char* id = std::getenv("ZERO_NODE_ID");
    std::printf("{\"multihost\":\"topology\",\"rank\":%d,\"node\":%d,\"nodes\":\"%s\","
                "\"source\":\"%s\",\"ZERO_NODE_ID\":\"%s\",\"local_rank\":\"%s\"}\n",
                rank, topo->node(), got.c_str(), topo->source.c_str(), id ? id : "",
                std::getenv("OMPI_COMM_WORLD_LOCAL_RANK") ? std::getenv("OMPI_COMM_WORLD_LOCAL_RANK") : "");
    std::fflush(stdout);
  }
  if (bench_steps > 0) {
    testing::Bench(c, bench_steps);
  } else if (!topology_only) {
    testing::Modes(c);
  }
  return testing::SumChecksOverRanks(c, "multihost");
}

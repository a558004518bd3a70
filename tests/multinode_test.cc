// Beyond one node, over thread ranks grouped into "nodes" by
// zero_ranks_per_node (docs/ARCHITECTURE.md, "Nodes, hybrid sharding and
// ZeRO++"; the real multi-host launch is //tests:multihost_launch_test):
// topology from launcher hints, Split and AllToAllV, per-link counting;
// hybrid sharding and hpZ train to the single-rank result; qwZ/qgZ end
// within 1 % of the unquantized loss after 200 steps; inter- and intra-node
// bytes per step equal the formulas of the architecture doc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "core/comm/link_counting_communicator.h"
#include "core/comm/thread_communicator.h"
#include "core/comm/topology.h"
#include "kernels/quant_math.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {
namespace {

constexpr int kAG = static_cast<int>(CollectiveKind::kAllGather);
constexpr int kRS = static_cast<int>(CollectiveKind::kReduceScatter);
constexpr int kAR = static_cast<int>(CollectiveKind::kAllReduce);

// ---- topology -------------------------------------------------------------

NodeHint Ompi(int local, int size) {
  NodeHint h;
  h.source = "OMPI_COMM_WORLD_LOCAL_RANK";
  h.local_rank = local;
  h.local_size = size;
  return h;
}
NodeHint Named(const std::string& source, const std::string& key) {
  NodeHint h;
  h.source = source;
  h.key = key;
  return h;
}

TEST(TopologyTest, OpenMpiLocalRanksBySlot) {
  auto t = TopologyFromHints({Ompi(0, 2), Ompi(1, 2), Ompi(0, 3), Ompi(1, 3), Ompi(2, 3)}, 3);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->nodes, 2);
  EXPECT_EQ(t->node_of, (std::vector<int>{0, 0, 1, 1, 1}));
  EXPECT_EQ(t->local_rank, (std::vector<int>{0, 1, 0, 1, 2}));
  EXPECT_EQ(t->node(), 1);
  EXPECT_EQ(t->uniform_ranks_per_node(), -1);
}

TEST(TopologyTest, OpenMpiRoundRobinRefused) {
  auto t = TopologyFromHints({Ompi(0, 2), Ompi(0, 2), Ompi(1, 2), Ompi(1, 2)}, 0);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not by slot"), std::string::npos) << t.status();
  EXPECT_NE(t.status().message().find("rank 1"), std::string::npos) << t.status();
}

TEST(TopologyTest, NamedNodesInOrderOfLowestRank) {
  auto t = TopologyFromHints({Named("ZERO_NODE_ID", "b"), Named("ZERO_NODE_ID", "a"),
                              Named("ZERO_NODE_ID", "b"), Named("ZERO_NODE_ID", "a")},
                             1);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->node_of, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(t->local_rank, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(t->uniform_ranks_per_node(), 2);
  EXPECT_EQ(t->RanksOnNode(1), (std::vector<int>{1, 3}));
}

TEST(TopologyTest, MixedSourcesRefused) {
  auto t = TopologyFromHints({Named("SLURM_NODEID", "0"), Named("hostname", "x")}, 0);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("rank 1"), std::string::npos);
}

TEST(TopologyTest, DetectOverEveryRankAndOverride) {
  // ZERO_NODE_ID is read by every thread alike here (one process): one node.
  setenv("ZERO_NODE_ID", "hostA", 1);
  RunThreads(3, [](int rank, Communicator* comm) {
    auto t = DetectTopology(comm, -1);
    ASSERT_TRUE(t.ok()) << t.status();
    EXPECT_EQ(t->source, "ZERO_NODE_ID");
    EXPECT_EQ(t->nodes, 1);
    EXPECT_EQ(t->local_rank[rank], rank);
    auto o = DetectTopology(comm, 1);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(o->nodes, 3);
    EXPECT_FALSE(DetectTopology(comm, 2).ok()) << "2 does not divide 3";
  });
  unsetenv("ZERO_NODE_ID");
}

// ---- communicators --------------------------------------------------------

TEST(SplitTest, ThreadSplitRanksByKey) {
  RunThreads(5, [](int rank, Communicator* comm) {
    auto sub = comm->Split(rank % 2, -rank);  // reversed order within a color
    ASSERT_TRUE(sub.ok()) << sub.status();
    const int size = rank % 2 == 0 ? 3 : 2;
    EXPECT_EQ((*sub)->world_size(), size);
    std::vector<float> mine{static_cast<float>(rank)}, all(size);
    ASSERT_TRUE((*sub)->AllGatherV(mine.data(), all.data(), std::vector<int64_t>(size, 1),
                                   DType::kF32)
                    .ok());
    std::vector<float> want = rank % 2 == 0 ? std::vector<float>{4, 2, 0}
                                            : std::vector<float>{3, 1};
    EXPECT_EQ(all, want);
    EXPECT_EQ(all[(*sub)->rank()], static_cast<float>(rank));
  });
}

TEST(SplitTest, ThreadAllToAllV) {
  const int w = 3;
  RunThreads(w, [&](int rank, Communicator* comm) {
    // Rank r sends r + q + 1 values to rank q, each value 100 r + q.
    std::vector<int64_t> sc(w), rc(w);
    std::vector<float> send;
    for (int q = 0; q < w; ++q) {
      sc[q] = rank + q + 1;
      rc[q] = q + rank + 1;
      for (int i = 0; i < sc[q]; ++i) send.push_back(100.0f * rank + q);
    }
    std::vector<float> recv(6 + 3 * rank, -1.0f);
    ASSERT_TRUE(comm->AllToAllV(send.data(), sc, recv.data(), rc, DType::kF32).ok());
    size_t at = 0;
    for (int r = 0; r < w; ++r) {
      for (int i = 0; i < r + rank + 1; ++i) EXPECT_EQ(recv[at++], 100.0f * r + rank);
    }
    EXPECT_EQ(at, recv.size());
  });
}

// Ranks 0,1 on node 0 and 2,3 on node 1: per peer, as the header says.
TEST(LinkCountingTest, PerPeerModel) {
  RunThreads(4, [](int rank, Communicator* comm) {
    auto dup = comm->Duplicate();
    ASSERT_TRUE(dup.ok());
    auto links = std::make_shared<LinkCounters>();
    LinkCountingCommunicator c(std::move(*dup), {0, 0, 1, 1}, links);
    std::vector<float> buf(400, 1.0f);
    ASSERT_TRUE(c.AllGatherV(buf.data() + 10 * rank, buf.data(), {10, 10, 10, 10}, DType::kF32).ok());
    EXPECT_EQ(links->Elems(CollectiveKind::kAllGather, Link::kIntra), 10);
    EXPECT_EQ(links->Elems(CollectiveKind::kAllGather, Link::kInter), 20);
    EXPECT_EQ(links->Bytes(CollectiveKind::kAllGather, Link::kInter), 80);
    std::vector<float> out(40);
    ASSERT_TRUE(c.ReduceScatterV(buf.data(), out.data(), {40, 40, 40, 40}).ok());
    EXPECT_EQ(links->Elems(CollectiveKind::kReduceScatter, Link::kIntra), 40);
    EXPECT_EQ(links->Elems(CollectiveKind::kReduceScatter, Link::kInter), 80);
    ASSERT_TRUE(c.AllReduce(buf.data(), 100, ReduceOp::kSum).ok());
    EXPECT_EQ(links->Elems(CollectiveKind::kAllReduce, Link::kIntra), 50);   // 2n(L-1)/W
    EXPECT_EQ(links->Elems(CollectiveKind::kAllReduce, Link::kInter), 100);  // 2n(W-L)/W
    // Split sub-communicators keep the node map of their members.
    auto cross = c.Split(rank % 2, rank);
    ASSERT_TRUE(cross.ok());
    const auto* cc = static_cast<LinkCountingCommunicator*>(cross->get());
    EXPECT_EQ(cc->node_of(), (std::vector<int>{0, 1}));
    // Totals equal the plain counters.
    const CommCounters& k = c.counters();
    EXPECT_EQ(k.sent[kAG], 30);
    EXPECT_EQ(k.sent[kRS], 120);
    EXPECT_EQ(k.sent[kAR], 150);
  });
}

// ---- training --------------------------------------------------------------

// Two "nodes" of two thread ranks.
Config Cfg(int stage, DType t = DType::kF32) {
  Config c = SmallMlpConfig(stage, t);
  c.ranks_per_node = 2;
  return c;
}

MlpResult SingleRank(Config c, const MlpSpec& spec) {
  c.stage = 0;
  c.mics_shard_size = -1;
  c.hybrid_shard_per_node = false;
  c.hpz_partition_size = 1;
  c.quantized_weights = c.quantized_gradients = false;
  c.ranks_per_node = -1;
  return TrainAt(c, 1, spec);
}

class HybridTest : public ::testing::TestWithParam<int> {};

// Hybrid S=2 at W=4 (mics_shard_size, and the FSDP name): the fp32 result
// of single-rank training within the stage tests' tolerance; states sharded
// over S (12 Psi_S / S bytes of optimizer state, Psi_S padded for S ranks).
TEST_P(HybridTest, MatchesSingleRank) {
  const int stage = GetParam();
  MlpSpec spec;
  const MlpResult ref = SingleRank(Cfg(stage), spec);
  for (bool fsdp_name : {false, true}) {
    Config c = Cfg(stage);
    if (fsdp_name) {
      c.hybrid_shard_per_node = true;
    } else {
      c.mics_shard_size = 2;
    }
    const std::vector<MlpResult> all = TrainAll(c, 4, spec);
    for (int r = 0; r < 4; ++r) {
      EXPECT_LE(MaxRelDiff(all[r], ref), 1e-6) << "stage " << stage << " rank " << r;
      EXPECT_EQ(MaxRelDiff(all[r], all[0]), 0.0) << "replicas agree bit for bit";
      const EngineStats& s = all[r].stats;
      EXPECT_EQ(s.world_size, 2);
      EXPECT_EQ(s.replicas, 2);
      // fp32: m and v; the master is the working copy's owned range.
      EXPECT_EQ(s.master_bytes + s.optimizer_bytes, 8 * s.padded_numel / 2);
      EXPECT_EQ(s.padded_numel % (2 * 64), 0);
      // The shard's gradient crossed the replicas (an all-reduce per
      // reduction, inter-node: the replica of rank r is r +- 2).
      EXPECT_GT(s.link_bytes[kAR][1], 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, HybridTest, ::testing::Values(1, 2, 3));

TEST(HybridTest, SaveOnOneReplicaResumesBitwise) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/hybrid_ckpt";
  std::filesystem::remove_all(dir);
  Config c = Cfg(3);
  c.mics_shard_size = 2;
  MlpSpec spec;
  spec.ckpt_dir = dir;
  spec.save_after = 5;
  const MlpResult whole = TrainAt(c, 4, spec);
  MlpSpec resume;
  resume.resume_dir = dir;
  resume.resume_tag = "mid";
  const MlpResult resumed = TrainAt(c, 4, resume);
  EXPECT_EQ(MaxRelDiff(resumed, whole), 0.0);
  // Written by one group: a world-2 checkpoint.
  EXPECT_TRUE(std::filesystem::exists(dir + "/mid/rank_00001.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/mid/rank_00002.bin"));
}

TEST(HybridTest, BadSizesRefused) {
  Config c = Cfg(2);
  c.mics_shard_size = 3;
  RunThreads(4, [&](int, Communicator* comm) {
    auto e = Engine::Create(c, comm);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.status().message().find("mics_shard_size"), std::string::npos);
  });
  // hpZ / qwZ / qgZ inside hybrid groups: refused on every rank, naming
  // both keys (docs/DEEPSPEED_COMPAT.md), never half applied.
  for (int which = 0; which < 3; ++which) {
    Config m = Cfg(3);
    m.mics_shard_size = 2;
    if (which == 0) m.hpz_partition_size = 2;
    if (which == 1) m.quantized_weights = true;
    if (which == 2) m.quantized_gradients = true;
    const char* key = which == 0   ? "zero_hpz_partition_size"
                      : which == 1 ? "zero_quantized_weights"
                                   : "zero_quantized_gradients";
    RunThreads(4, [&](int, Communicator* comm) {
      auto e = Engine::Create(m, comm);
      ASSERT_FALSE(e.ok()) << key;
      EXPECT_NE(e.status().message().find(key), std::string::npos) << e.status();
      EXPECT_NE(e.status().message().find("hybrid sharding"), std::string::npos) << e.status();
    });
  }
  Config z = Cfg(0);
  z.mics_shard_size = 2;
  RunThreads(2, [&](int, Communicator* comm) {
    EXPECT_FALSE(Engine::Create(z, comm).ok()) << "stage 0 has no shards";
  });
}

// hpZ at 2 nodes x 2 ranks: the same params as plain stage 3 bit for bit
// (the secondary shards hold the gathered values), the single-rank result
// within fp32 tolerance, and the secondary shards' memory accounted.
TEST(HpzTest, EqualsPlainStage3) {
  MlpSpec spec;
  Config plain = Cfg(3);
  Config hpz = Cfg(3);
  hpz.hpz_partition_size = 2;
  const MlpResult a = TrainAt(plain, 4, spec);
  const MlpResult b = TrainAt(hpz, 4, spec);
  EXPECT_EQ(MaxRelDiff(b, a), 0.0);
  EXPECT_LE(MaxRelDiff(b, SingleRank(plain, spec)), 1e-6);
  // Secondary shard per gathered (not persistent) param: its piece of
  // numel split over the 2 ranks of the group, fp32.
  int64_t want = 0;
  for (const auto& p : b.params) {
    const int64_t n = static_cast<int64_t>(p.size());
    if (n >= plain.stage3_param_persistence_threshold && n != 8 /* frozen */) want += (n + 1) / 2 * 4;
  }
  EXPECT_EQ(b.stats.hpz_secondary_bytes, want) << "rank 0 holds the larger half";
  EXPECT_EQ(a.stats.hpz_secondary_bytes, 0);
}

// With one node there is no cross-node hop: qgZ's hierarchical
// reduce-scatter quantizes nothing and matches single-rank training.
TEST(QgzTest, OneNodeQuantizesNothing) {
  MlpSpec spec;
  Config c = Cfg(3);
  c.ranks_per_node = 4;
  c.quantized_gradients = true;
  const MlpResult got = TrainAt(c, 4, spec);
  EXPECT_LE(MaxRelDiff(got, SingleRank(c, spec)), 1e-6);
  EXPECT_EQ(got.stats.link_bytes[kRS][1], 0);
}

// ---- quantized training: the loss after 200 steps --------------------------

struct QuantCase {
  const char* name;
  bool qw, qg, hpz;
  int bits;
  bool feedback = true;
};

class QuantLossTest : public ::testing::TestWithParam<QuantCase> {};

// Final loss (8 held-out batches) within 1 % of unquantized stage 3 at the
// same world, after 200 steps (qgZ with its default error feedback; the
// last case, int4 without it, is reported, not bounded: ~2 % off).
TEST_P(QuantLossTest, WithinOnePercentAfter200Steps) {
  const QuantCase q = GetParam();
  MlpSpec spec;
  spec.steps = 200;
  spec.record_steps = false;
  Config plain = Cfg(3);
  Config c = plain;
  c.quantized_weights = q.qw;
  c.quantized_gradients = q.qg;
  c.quantized_gradients_bits = q.bits;
  if (q.hpz) c.hpz_partition_size = 2;
  c.quantized_gradients_error_feedback = q.feedback;
  const double base = MlpEvalLoss(spec, TrainAt(plain, 4, spec));
  const MlpResult got = TrainAt(c, 4, spec);
  const double loss = MlpEvalLoss(spec, got);
  const double rel = std::fabs(loss - base) / base;
  std::printf("{\"test\":\"quant_loss\",\"case\":\"%s\",\"loss\":%.6g,\"unquantized\":%.6g,"
              "\"rel\":%.4g}\n",
              q.name, loss, base, rel);
  if (q.feedback) {
    EXPECT_LE(rel, 0.01) << q.name << ": " << loss << " vs " << base;
  } else {
    // Reported, not bounded: how far int4 drifts without error feedback.
    EXPECT_TRUE(std::isfinite(loss)) << q.name;
  }
  if (q.qg) {
    EXPECT_GT(got.stats.link_bytes[kRS][1], 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, QuantLossTest,
    ::testing::Values(QuantCase{"qwZ", true, false, false, 8},
                      QuantCase{"qgZ_int8", false, true, false, 8},
                      QuantCase{"qgZ_int4", false, true, false, 4},
                      QuantCase{"qwZ_qgZ8_hpZ", true, true, true, 8},
                      QuantCase{"qwZ_qgZ4_hpZ", true, true, true, 4},
                      QuantCase{"qgZ_int4_no_feedback", false, true, false, 4, false}),
    [](const ::testing::TestParamInfo<QuantCase>& i) { return std::string(i.param.name); });

// ---- traffic per link against docs/ARCHITECTURE.md ------------------------

// One stage-3 step of the big MLP (Psi = 6003) at N = 2 nodes x L = 2
// ranks, fp16 working copy, no persistent params; the caller gathers for
// forward and again for backward.
struct Traffic {
  EngineStats s;
  double psi, pad;
};

Traffic RunStep(Config c) {
  MlpSpec spec;
  spec.hidden = 500;
  spec.steps = 1;
  c.stage3_param_persistence_threshold = 0;
  c.reduce_bucket_size = 2000;
  const std::vector<MlpResult> all = TrainAll(c, 4, spec);
  Traffic t;
  t.s = all[0].stats;  // rank 0: node 0; the last shard's padding is on node 1
  t.psi = static_cast<double>(t.s.trainable_numel);
  t.pad = static_cast<double>(t.s.padded_numel - t.s.trainable_numel);
  return t;
}

double Bytes(const EngineStats& s, int kind, int link) {
  return static_cast<double>(s.link_bytes[kind][link]);
}

TEST(TrafficTest, PerLinkFormulas) {
  const double W = 4, L = 2;
  Config base = Cfg(3, DType::kF16);
  const Traffic plain = RunStep(base);
  const double psi = plain.psi, pad = plain.pad;
  // Plain stage 3: two all-gathers, each 2 (fp16) bytes x Psi(W-L)/W across
  // nodes and Psi(L-1)/W inside; the reduce-scatter in fp16 too (DeepSpeed's
  // default communication_data_type for an fp16 model), in fp32 when the
  // config says so.
  EXPECT_NEAR(Bytes(plain.s, kAG, 1), 2 * 2 * psi * (W - L) / W, 2 * 2 * pad);
  EXPECT_NEAR(Bytes(plain.s, kAG, 0), 2 * 2 * psi * (L - 1) / W, 2 * 2 * pad);
  EXPECT_NEAR(Bytes(plain.s, kRS, 1), 2 * psi * (W - L) / W, 2 * pad);
  EXPECT_NEAR(Bytes(plain.s, kRS, 0), 2 * psi * (L - 1) / W, 2 * pad);
  Config fp32_comm = base;
  fp32_comm.communication_data_type = DType::kF32;
  const Traffic plain32 = RunStep(fp32_comm);
  EXPECT_NEAR(Bytes(plain32.s, kRS, 1), 4 * psi * (W - L) / W, 4 * pad);
  EXPECT_NEAR(Bytes(plain32.s, kRS, 0), 4 * psi * (L - 1) / W, 4 * pad);
  // Links partition the plain counters.
  for (int k : {kAG, kRS, kAR}) {
    EXPECT_EQ(plain.s.link_bytes[k][0] + plain.s.link_bytes[k][1], plain.s.sent_bytes[k]);
    EXPECT_EQ(plain.s.link_elems[k][0] + plain.s.link_elems[k][1], plain.s.sent[k]);
  }

  // hpZ (P = L): the backward all-gather stays in the node: one inter-node
  // all-gather per step; inside, Psi(L-1)/W (forward) + Psi(L-1)/L (backward).
  Config hc = base;
  hc.hpz_partition_size = 2;
  const Traffic hpz = RunStep(hc);
  EXPECT_NEAR(Bytes(hpz.s, kAG, 1), 2 * psi * (W - L) / W, 2 * pad);
  EXPECT_NEAR(Bytes(hpz.s, kAG, 0), 2 * psi * (L - 1) / W + 2 * psi * (L - 1) / L, 2 * 2 * pad + 8);
  EXPECT_NEAR(Bytes(hpz.s, kAG, 1), Bytes(plain.s, kAG, 1) / 2, 2 * pad);

  // qwZ: int8 blocks of 128 with an fp32 scale, both gathers:
  // (1 + 4/128) bytes per value; with hpZ only the forward one crosses
  // nodes: >= 3.5x fewer inter-node weight bytes than plain fp16.
  const double q8 = 1.0 + 4.0 / 128;
  Config wc = base;
  wc.quantized_weights = true;
  const Traffic qw = RunStep(wc);
  // Per slice: at most one partial block scale (4) and 3 padding bytes;
  // 4 params x 2 peers x 2 gathers.
  EXPECT_NEAR(Bytes(qw.s, kAG, 1), 2 * q8 * psi * (W - L) / W, 2 * q8 * pad + 16 * 7);
  wc.hpz_partition_size = 2;
  const Traffic qwh = RunStep(wc);
  EXPECT_LE(Bytes(qwh.s, kAG, 1) * 3.5, Bytes(plain.s, kAG, 1));
  std::printf("{\"test\":\"traffic\",\"inter_ag_plain_fp16\":%.0f,\"inter_ag_qwz\":%.0f,"
              "\"inter_ag_qwz_hpz\":%.0f,\"cut\":%.3f}\n",
              Bytes(plain.s, kAG, 1), Bytes(qw.s, kAG, 1), Bytes(qwh.s, kAG, 1),
              Bytes(plain.s, kAG, 1) / Bytes(qwh.s, kAG, 1));

  // qgZ: inside the node an fp32 reduce-scatter of the whole bucket
  // (Psi(L-1)/L values), across nodes Psi(N-1)/W values quantized.
  for (int bits : {8, 4}) {
    Config gc = base;
    gc.quantized_gradients = true;
    gc.quantized_gradients_bits = bits;
    const Traffic qg = RunStep(gc);
    const double per_value = (bits == 8 ? 1.0 : 0.5) + 4.0 / 128;
    const double inter_values = static_cast<double>(qg.s.link_elems[kRS][1]);
    EXPECT_NEAR(inter_values, psi * (2 - 1) / W, pad + 1);
    EXPECT_NEAR(Bytes(qg.s, kRS, 1), per_value * inter_values, 7.0 * 8 /* buckets */ + 4 * 8);
    EXPECT_NEAR(Bytes(qg.s, kRS, 0), 4 * psi * (L - 1) / L, 4 * pad);
    // Against the same values in fp16 (int4) / in zero's fp32 (int8).
    const double dense = (bits == 4 ? 2.0 : 4.0) * inter_values;
    EXPECT_GE(dense / Bytes(qg.s, kRS, 1), 3.5) << bits;
    std::printf("{\"test\":\"traffic\",\"qgz_bits\":%d,\"inter_rs_bytes\":%.0f,"
                "\"inter_rs_plain_fp32\":%.0f,\"cut_vs_dense\":%.3f}\n",
                bits, Bytes(qg.s, kRS, 1), Bytes(plain32.s, kRS, 1),
                dense / Bytes(qg.s, kRS, 1));
  }
}

}  // namespace
}  // namespace testing
}  // namespace zero

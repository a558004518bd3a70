// Progress of long work through the C ABI (1.6, zero_progress_fn): save,
// load, export, reshard and the NVMe tier's preallocation and first write
// report bytes done rising to a total that matches the bytes the work moves
// (state elements x 4 per state on this rank; the tier's files); a nonzero
// return cancels with ZERO_CANCELLED, alike on every rank for save and load,
// leaving earlier tags whole and nothing half-written under the output name.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zero_c.h"

namespace {

constexpr int kWorld = 2;
constexpr int64_t kN = 3 << 20;  // 12 MiB of master per model: several 4 MiB reports per rank

std::string Dir(const std::string& name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t ? t : "/tmp") + "/" + name;
}

bool Exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// What a callback saw; cancels at its `cancel_at`-th call (1-based) of `cancel_what`.
struct Seen {
  struct Call {
    std::string what;
    int64_t done, total;
  };
  std::mutex mu;
  std::vector<Call> calls;
  int cancel_at = 0;
  std::string cancel_what;
  int counted = 0;

  static int32_t Fn(void* user, const char* what, int64_t done, int64_t total) {
    Seen* s = static_cast<Seen*>(user);
    std::lock_guard<std::mutex> l(s->mu);
    s->calls.push_back({what, done, total});
    if (s->cancel_what == what && ++s->counted == s->cancel_at) return 1;
    return 0;
  }
  std::vector<Call> Of(const std::string& what) {
    std::vector<Call> out;
    for (const Call& c : calls) {
      if (c.what == what) out.push_back(c);
    }
    return out;
  }
};

// done rises strictly, ends at total, total fixed.
void ExpectMonotonicToTotal(const std::vector<Seen::Call>& calls, int64_t total,
                            const std::string& what) {
  ASSERT_FALSE(calls.empty()) << what;
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i].total, total) << what << " call " << i;
    if (i > 0) { EXPECT_GT(calls[i].done, calls[i - 1].done) << what << " call " << i; }
  }
  EXPECT_EQ(calls.back().done, total) << what;
}

zero_engine_t* Make(zero_comm_t* comm, const std::string& json, Seen* prealloc = nullptr,
                    zero_status want = ZERO_OK) {
  zero_engine_t* e = nullptr;
  EXPECT_EQ(zero_engine_create_json(json.c_str(), comm, &e), ZERO_OK) << zero_last_error();
  if (prealloc) { EXPECT_EQ(zero_engine_set_progress(e, &Seen::Fn, prealloc), ZERO_OK); }
  std::vector<float> init(kN);
  for (int64_t i = 0; i < kN; ++i) init[i] = 0.001f * static_cast<float>(i % 1000);
  int64_t shape[1] = {kN};
  zero_param_desc d = ZERO_PARAM_DESC_INIT;
  d.name = "w";
  d.ndim = 1;
  d.shape = shape;
  d.init = init.data();
  int32_t id;
  EXPECT_EQ(zero_engine_register_param(e, &d, &id), ZERO_OK);
  EXPECT_EQ(zero_engine_finalize(e), want) << zero_last_error();
  return e;
}

void Step(zero_engine_t* e) {
  void* g;
  ASSERT_EQ(zero_engine_grad_buffer(e, 0, &g), ZERO_OK);
  for (int64_t i = 0; i < kN; ++i) static_cast<float*>(g)[i] = 1e-3f * static_cast<float>(i % 7);
  ASSERT_EQ(zero_engine_grad_ready(e, 0), ZERO_OK);
  ASSERT_EQ(zero_engine_step(e, nullptr), ZERO_OK) << zero_last_error();
}

const char kStage2[] =
    R"({"zero_optimization": {"stage": 2}, "steps_per_print": 0,
        "optimizer": {"type": "Adam", "params": {"lr": 0.01}}})";

void OnRanks(const std::function<void(int, zero_comm_t*)>& fn) {
  zero_comm_t* comms[kWorld];
  ASSERT_EQ(zero_comm_create_threads(kWorld, comms), ZERO_OK);
  std::vector<std::thread> ts;
  for (int r = 0; r < kWorld; ++r) ts.emplace_back([&, r] { fn(r, comms[r]); });
  for (auto& t : ts) t.join();
  for (auto* c : comms) zero_comm_destroy(c);
}

// Adam in fp32: master, exp_avg, exp_avg_sq, 4 bytes each, of this rank's elements.
constexpr int64_t kRankBytes = 3 * 4 * kN / kWorld;

TEST(ProgressCapiTest, SaveAndLoadReportTheirBytes) {
  const std::string dir = Dir("progress_save");
  OnRanks([&](int rank, zero_comm_t* comm) {
    zero_engine_t* e = Make(comm, kStage2);
    Step(e);
    Seen seen;
    ASSERT_EQ(zero_engine_set_progress(e, &Seen::Fn, &seen), ZERO_OK);
    ASSERT_EQ(zero_engine_save(e, dir.c_str(), "t1"), ZERO_OK) << zero_last_error();
    ExpectMonotonicToTotal(seen.Of("save"), kRankBytes, "save rank " + std::to_string(rank));
    EXPECT_GE(seen.Of("save").size(), 3u);  // 18 MiB in 4 MiB pieces
    ASSERT_EQ(zero_engine_load(e, dir.c_str(), "t1", nullptr), ZERO_OK) << zero_last_error();
    ExpectMonotonicToTotal(seen.Of("load"), kRankBytes, "load rank " + std::to_string(rank));
    // Off again: nothing more reported.
    ASSERT_EQ(zero_engine_set_progress(e, nullptr, nullptr), ZERO_OK);
    const size_t n = seen.calls.size();
    ASSERT_EQ(zero_engine_save(e, dir.c_str(), "t2"), ZERO_OK) << zero_last_error();
    EXPECT_EQ(seen.calls.size(), n);
    zero_engine_destroy(e);
  });
}

TEST(ProgressCapiTest, CancelledSaveAndLoadFailAlikeAndKeepEarlierTags) {
  const std::string dir = Dir("progress_cancel");
  OnRanks([&](int rank, zero_comm_t* comm) {
    zero_engine_t* e = Make(comm, kStage2);
    Step(e);
    std::vector<float> want(kN), got(kN);
    ASSERT_EQ(zero_engine_read_master(e, 0, want.data()), ZERO_OK);
    ASSERT_EQ(zero_engine_save(e, dir.c_str(), "good"), ZERO_OK) << zero_last_error();
    Step(e);
    Seen seen;
    if (rank == 1) {  // only rank 1 cancels, at its second report
      seen.cancel_what = "save";
      seen.cancel_at = 2;
    }
    ASSERT_EQ(zero_engine_set_progress(e, &Seen::Fn, &seen), ZERO_OK);
    EXPECT_EQ(zero_engine_save(e, dir.c_str(), "bad"), ZERO_CANCELLED) << zero_last_error();
    const std::string msg = zero_last_error();
    EXPECT_NE(msg.find("cancelled by the progress callback"), std::string::npos) << msg;
    if (rank == 0) { EXPECT_NE(msg.find("rank 1"), std::string::npos) << msg; }
    if (rank == 1) { EXPECT_EQ(seen.Of("save").size(), 2u); }  // nothing after the cancel
    EXPECT_FALSE(Exists(dir + "/bad"));

    // The engine goes on after a cancelled save; latest still names the good
    // tag. A load cancelled (on rank 0 only) fails alike and leaves the
    // engine unusable (its state partly overwritten); a new one loads.
    if (rank == 0) {
      std::ifstream latest(dir + "/latest");
      std::string tag;
      latest >> tag;
      EXPECT_EQ(tag, "good");
    }
    Step(e);
    EXPECT_EQ(zero_engine_save(e, dir.c_str(), "after"), ZERO_OK) << zero_last_error();
    seen.cancel_what = rank == 0 ? "load" : "";
    seen.counted = 0;
    seen.cancel_at = 1;
    EXPECT_EQ(zero_engine_load(e, dir.c_str(), "good", nullptr), ZERO_CANCELLED)
        << zero_last_error();
    EXPECT_EQ(zero_engine_load(e, dir.c_str(), "good", nullptr), ZERO_CANCELLED);
    EXPECT_NE(std::string(zero_last_error()).find("unusable"), std::string::npos)
        << zero_last_error();
    zero_engine_destroy(e);
    e = Make(comm, kStage2);
    ASSERT_EQ(zero_engine_load(e, dir.c_str(), "good", nullptr), ZERO_OK) << zero_last_error();
    ASSERT_EQ(zero_engine_read_master(e, 0, got.data()), ZERO_OK);
    EXPECT_EQ(got, want);
    zero_engine_destroy(e);
  });
}

TEST(ProgressCapiTest, ExportAndReshardReportAndCancel) {
  const std::string dir = Dir("progress_export");
  OnRanks([&](int, zero_comm_t* comm) {
    zero_engine_t* e = Make(comm, kStage2);
    ASSERT_EQ(zero_engine_save(e, dir.c_str(), "t"), ZERO_OK) << zero_last_error();
    zero_engine_destroy(e);
  });
  const std::string out = dir + "/w.safetensors";
  Seen seen;
  ASSERT_EQ(zero_checkpoint_export_safetensors_progress(dir.c_str(), nullptr, out.c_str(),
                                                        ZERO_DTYPE_F32, &Seen::Fn, &seen),
            ZERO_OK) << zero_last_error();
  ExpectMonotonicToTotal(seen.Of("export"), 4 * kN, "export");  // fp32 master of every element
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_GE(st.st_size, 4 * kN);

  // Every state of every element, rewritten for 3 ranks.
  const std::string re = dir + "/re3";
  ASSERT_EQ(zero_checkpoint_reshard(dir.c_str(), "t", re.c_str(), 3, &Seen::Fn, &seen), ZERO_OK)
      << zero_last_error();
  // Bytes read: each new rank reads the whole old sections it overlaps (their
  // checksums cover them): halves [0, 1.5M) and [1.5M, 3M) into thirds ->
  // 1.5M + 3M + 1.5M elements, of 3 states.
  ExpectMonotonicToTotal(seen.Of("reshard"), 3 * 4 * 2 * kN, "reshard");
  EXPECT_TRUE(Exists(re + "/t"));

  Seen stop;
  stop.cancel_what = "export";
  stop.cancel_at = 1;
  const std::string out2 = dir + "/w2.safetensors";
  EXPECT_EQ(zero_checkpoint_export_safetensors_progress(dir.c_str(), "t", out2.c_str(),
                                                        ZERO_DTYPE_BF16, &Seen::Fn, &stop),
            ZERO_CANCELLED);
  EXPECT_NE(std::string(zero_last_error()).find("cancelled"), std::string::npos);
  EXPECT_FALSE(Exists(out2));
  stop.cancel_what = "reshard";
  stop.counted = 0;
  const std::string re2 = dir + "/re2";
  EXPECT_EQ(zero_checkpoint_reshard(dir.c_str(), "t", re2.c_str(), 2, &Seen::Fn, &stop),
            ZERO_CANCELLED);
  EXPECT_FALSE(Exists(re2 + "/t"));
  EXPECT_EQ(zero_checkpoint_reshard(dir.c_str(), "t", re2.c_str(), 0, nullptr, nullptr),
            ZERO_INVALID_ARGUMENT);
  EXPECT_EQ(zero_checkpoint_reshard(nullptr, "t", re2.c_str(), 2, nullptr, nullptr),
            ZERO_INVALID_ARGUMENT);
}

TEST(ProgressCapiTest, NvmePreallocationAndFirstWrite) {
  const std::string dir = Dir("progress_nvme");
  ::mkdir(dir.c_str(), 0700);
  const std::string json =
      R"({"zero_optimization": {"stage": 2, "sub_group_size": 262144, "offload_optimizer":
          {"device": "nvme", "nvme_path": ")" + dir + R"("}}, "steps_per_print": 0,
          "optimizer": {"type": "Adam", "params": {"lr": 0.01}}})";
  OnRanks([&](int rank, zero_comm_t* comm) {
    Seen seen;
    zero_engine_t* e = Make(comm, json, &seen);
    zero_stats st = ZERO_STATS_INIT;
    ASSERT_EQ(zero_engine_stats(e, &st), ZERO_OK);
    ExpectMonotonicToTotal(seen.Of("nvme preallocate"), st.nvme_bytes, "preallocate");
    ExpectMonotonicToTotal(seen.Of("nvme initialize"), st.nvme_write_bytes, "initialize");
    EXPECT_GE(seen.Of("nvme initialize").size(), 2u) << "rank " << rank;  // a report per chunk
    EXPECT_GE(st.nvme_bytes, kRankBytes);
    zero_engine_destroy(e);
  });
  // Stage 3 params on NVMe: their files' preallocation, per group file.
  // (Also: init values of more than ParamRegistry::kInitChunk owned
  // elements once overflowed the cast buffer of this path.)
  const std::string params_json =
      R"({"zero_optimization": {"stage": 3, "sub_group_size": 262144, "offload_param":
          {"device": "nvme", "nvme_path": ")" + dir + R"("}}, "steps_per_print": 0,
          "optimizer": {"type": "Adam", "params": {"lr": 0.01}}})";
  OnRanks([&](int rank, zero_comm_t* comm) {
    Seen seen;
    zero_engine_t* e = Make(comm, params_json, &seen);
    zero_stats st = ZERO_STATS_INIT;
    ASSERT_EQ(zero_engine_stats(e, &st), ZERO_OK);
    EXPECT_GE(st.nvme_bytes, 4 * kN / kWorld);  // the fp32 working shard
    ExpectMonotonicToTotal(seen.Of("nvme preallocate"), st.nvme_bytes,
                           "param files rank " + std::to_string(rank));
    zero_engine_destroy(e);
  });
  // Cancelled during the first write: finalize fails on the rank that
  // cancelled, with the status and how far it got.
  zero_comm_t* self = nullptr;
  ASSERT_EQ(zero_comm_create_self(&self), ZERO_OK);
  Seen stop;
  stop.cancel_what = "nvme initialize";
  stop.cancel_at = 2;
  zero_engine_t* e = Make(self, json, &stop, ZERO_CANCELLED);
  EXPECT_NE(std::string(zero_last_error()).find("offload_optimizer.nvme_path"), std::string::npos)
      << zero_last_error();
  zero_engine_destroy(e);
  zero_comm_destroy(self);
}

}  // namespace

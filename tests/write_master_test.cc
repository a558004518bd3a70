// write_master (zero_engine_write_master): setting a param after finalize is
// the same as having registered it with those values — an engine written to
// trains bit for bit like one created with the values, at every stage,
// world, precision and with NVMe offload; frozen params too; refusals.
// write_master_range (1.5): the same values written in pieces train the same;
// one row written leaves every other element as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/thread_communicator.h"
#include "core/engine/engine.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

std::vector<float> Values(int64_t n, float seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = std::sin(seed + 0.37f * static_cast<float>(i));
  return v;
}

struct Masters {
  std::vector<std::vector<float>> masters;
};

// Registers w [37, 11] (straddles shards), b [11], e [5] frozen; initial
// values from `seed`; if `write_seed` >= 0 writes values from it after
// finalize (whole with write_master, or with write_master_range in pieces of
// `piece` elements when piece > 0); then trains 4 steps with gradients computed from the gathered
// working copy (so stale working copies would show).
Masters Train(const Config& c, Communicator* comm, float seed, float write_seed,
              int64_t piece = 0) {
  auto e = Engine::Create(c, comm);
  EXPECT_TRUE(e.ok()) << e.status();
  const std::vector<std::vector<int64_t>> shapes = {{37, 11}, {11}, {5}};
  std::vector<int> ids;
  for (size_t k = 0; k < shapes.size(); ++k) {
    ParamSpec p;
    p.name = absl::StrCat("p", k);
    p.shape = shapes[k];
    p.dtype = k == 2 ? DType::kF32 : c.dtype;
    p.trainable = k != 2;
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    std::vector<float> init = Values(n, seed + k);
    p.init = init.data();
    ids.push_back(*(*e)->RegisterParam(p));
  }
  EXPECT_TRUE((*e)->Finalize().ok());
  if (write_seed >= 0) {
    for (size_t k = 0; k < ids.size(); ++k) {
      std::vector<float> v = Values(*(*e)->ParamNumel(ids[k]), write_seed + k);
      if (piece == 0) {
        absl::Status s = (*e)->WriteMaster(ids[k], v.data());
        EXPECT_TRUE(s.ok()) << s;
        continue;
      }
      for (int64_t a = 0; a < static_cast<int64_t>(v.size()); a += piece) {
        const int64_t n = std::min<int64_t>(piece, static_cast<int64_t>(v.size()) - a);
        absl::Status s = (*e)->WriteMasterRange(ids[k], a, n, v.data() + a);
        EXPECT_TRUE(s.ok()) << s;
      }
    }
  }
  for (int step = 0; step < 4; ++step) {
    for (int k = 0; k < 2; ++k) {
      const int64_t n = *(*e)->ParamNumel(ids[k]);
      auto w = (*e)->Gather(ids[k]);
      EXPECT_TRUE(w.ok()) << w.status();
      std::vector<float> wf(n);
      (*e)->device()->DownloadF32(*w, c.dtype, wf.data(), n);
      EXPECT_TRUE((*e)->Release(ids[k]).ok());
      std::vector<float> g(n);
      for (int64_t i = 0; i < n; ++i) g[i] = 0.1f * wf[i] + 0.01f * static_cast<float>(step);
      auto gb = (*e)->GradBuffer(ids[k]);
      EXPECT_TRUE(gb.ok()) << gb.status();
      (*e)->device()->UploadF32(g.data(), *gb, c.dtype, n);
      EXPECT_TRUE((*e)->GradReady(ids[k]).ok());
    }
    auto info = (*e)->Step();
    EXPECT_TRUE(info.ok()) << info.status();
  }
  Masters r;
  for (int id : ids) {
    std::vector<float> m(*(*e)->ParamNumel(id));
    EXPECT_TRUE((*e)->ReadMaster(id, m.data()).ok());
    r.masters.push_back(m);
  }
  return r;
}

TEST(WriteMasterTest, TrainsLikeAnEngineCreatedWithTheValues) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      for (int world : {1, 3}) {
        for (int nvme = 0; nvme < 2; ++nvme) {
          Config c = SmallMlpConfig(stage, t);
          c.stage3_param_persistence_threshold = 20;  // b stays whole at stage 3
          if (nvme) {
            c.offload_optimizer.device = OffloadDevice::kNvme;
            c.offload_optimizer.nvme_path = tmp ? tmp : "/tmp";
            if (stage == 3) {
              c.offload_param.device = OffloadDevice::kNvme;
              c.offload_param.nvme_path = c.offload_optimizer.nvme_path;
            }
          }
          std::vector<Masters> want(world), got(world), ranged(world);
          std::mutex mu;
          RunThreads(world, [&](int rank, Communicator* comm) {
            Masters a = Train(c, comm, 2.0f, -1);
            Masters b = Train(c, comm, 7.0f, 2.0f);
            Masters d = Train(c, comm, 7.0f, 2.0f, /*piece=*/7);
            std::lock_guard<std::mutex> l(mu);
            want[rank] = a;
            got[rank] = b;
            ranged[rank] = d;
          });
          for (int r = 0; r < world; ++r) {
            ASSERT_EQ(want[r].masters.size(), got[r].masters.size());
            ASSERT_EQ(want[r].masters.size(), ranged[r].masters.size());
            for (size_t k = 0; k < want[r].masters.size(); ++k) {
              EXPECT_EQ(want[r].masters[k], got[r].masters[k])
                  << "stage " << stage << " " << DTypeName(t) << " world " << world
                  << " nvme " << nvme << " rank " << r << " param " << k;
              EXPECT_EQ(want[r].masters[k], ranged[r].masters[k])
                  << "write_master_range, stage " << stage << " " << DTypeName(t)
                  << " world " << world << " nvme " << nvme << " rank " << r << " param " << k;
            }
          }
        }
      }
    }
  }
}

// One row of a stage-3 matrix (padding_idx-style) written at world 3: that
// row holds the values in master and gathered working copy, every other
// element is unchanged, at every stage; a range outside the param is refused
// naming it, count 0 does nothing.
TEST(WriteMasterTest, RangeWritesOnlyThatRange) {
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 3}) {
      RunThreads(world, [&](int, Communicator* comm) {
        Config c = SmallMlpConfig(stage, DType::kBF16);
        c.stage3_param_persistence_threshold = 20;
        auto e = Engine::Create(c, comm);
        ASSERT_TRUE(e.ok());
        ParamSpec p;
        p.name = "emb";
        p.shape = {37, 11};
        p.dtype = DType::kBF16;
        std::vector<float> init = Values(37 * 11, 3.0f);
        p.init = init.data();
        ASSERT_TRUE((*e)->RegisterParam(p).ok());
        ParamSpec q;
        q.name = "frozen";
        q.shape = {5, 4};
        q.dtype = DType::kF32;
        q.trainable = false;
        std::vector<float> qinit = Values(20, 5.0f);
        q.init = qinit.data();
        ASSERT_TRUE((*e)->RegisterParam(q).ok());
        ASSERT_TRUE((*e)->Finalize().ok());
        const std::vector<float> row(11, 0.0f);
        ASSERT_TRUE((*e)->WriteMasterRange(0, 4 * 11, 11, row.data()).ok());
        ASSERT_TRUE((*e)->WriteMasterRange(1, 8, 4, row.data()).ok());
        ASSERT_TRUE((*e)->WriteMasterRange(0, 37 * 11, 0, row.data()).ok());
        std::vector<float> want = init;
        for (int i = 0; i < 11; ++i) want[4 * 11 + i] = 0.0f;
        std::vector<float> m(37 * 11);
        ASSERT_TRUE((*e)->ReadMaster(0, m.data()).ok());
        EXPECT_EQ(m, want) << "stage " << stage << " world " << world;
        auto w = (*e)->Gather(0);
        ASSERT_TRUE(w.ok()) << w.status();
        std::vector<float> wf(37 * 11);
        (*e)->device()->DownloadF32(*w, DType::kBF16, wf.data(), 37 * 11);
        ASSERT_TRUE((*e)->Release(0).ok());
        for (int64_t i = 0; i < 37 * 11; ++i) {
          // bf16 working copy of the fp32 master
          EXPECT_NEAR(wf[i], want[i], std::fabs(want[i]) / 128) << i;
          if (i / 11 == 4) {
            EXPECT_EQ(wf[i], 0.0f) << i;
          }
        }
        auto f = (*e)->Gather(1);
        ASSERT_TRUE(f.ok());
        std::vector<float> fz(static_cast<float*>(*f), static_cast<float*>(*f) + 20);
        ASSERT_TRUE((*e)->Release(1).ok());
        std::vector<float> fwant = qinit;
        for (int i = 8; i < 12; ++i) fwant[i] = 0.0f;
        EXPECT_EQ(fz, fwant);
        absl::Status s = (*e)->WriteMasterRange(0, 37 * 11 - 5, 11, row.data());
        EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
        EXPECT_NE(s.message().find("'emb'"), std::string::npos) << s;
        EXPECT_EQ((*e)->WriteMasterRange(0, -1, 1, row.data()).code(),
                  absl::StatusCode::kOutOfRange);
        ASSERT_TRUE((*e)->Gather(0).ok());
        s = (*e)->WriteMasterRange(0, 0, 11, row.data());
        EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
        ASSERT_TRUE((*e)->Release(0).ok());
      });
    }
  }
}

TEST(WriteMasterTest, RefusedWhileGatheredOrMidAccumulation) {
  RunThreads(1, [&](int, Communicator* comm) {
    Config c = SmallMlpConfig(2, DType::kF32);
    c.gradient_accumulation_steps = 2;
    auto e = Engine::Create(c, comm);
    ASSERT_TRUE(e.ok());
    ParamSpec p;
    p.name = "w";
    p.shape = {8};
    ASSERT_TRUE((*e)->RegisterParam(p).ok());
    ASSERT_TRUE((*e)->Finalize().ok());
    std::vector<float> v(8, 1.0f);
    ASSERT_TRUE((*e)->Gather(0).ok());
    absl::Status s = (*e)->WriteMaster(0, v.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("'w': the param is gathered"), std::string::npos) << s;
    ASSERT_TRUE((*e)->Release(0).ok());
    ASSERT_TRUE((*e)->GradBuffer(0).ok());
    ASSERT_TRUE((*e)->GradReady(0).ok());
    ASSERT_TRUE((*e)->Step().ok());  // micro-step 1 of 2
    s = (*e)->WriteMaster(0, v.data());
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_EQ((*e)->WriteMaster(5, v.data()).code(), absl::StatusCode::kInvalidArgument);
  });
}

}  // namespace
}  // namespace testing
}  // namespace zero

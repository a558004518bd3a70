// Described initial values (InitSpec, fill callbacks; docs/ARCHITECTURE.md,
// "The engine's life"): Philox4x32-10's known answers; a spec gives bitwise
// the same params at every world size and stage; its statistics; a fill
// callback is asked only for what the rank holds and each stage-3 element by
// exactly one rank; a failing callback fails finalize on every rank naming
// the param; specs hold no numel-sized buffer before finalize.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/thread_communicator.h"
#include "core/engine/engine.h"
#include "core/engine/init_spec.h"
#include "core/engine/param_registry.h"
#include "core/partition/layout.h"
#include "kernels/philox_math.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

TEST(Philox, KnownAnswers) {
  // Random123's kat_vectors for philox4x32_10.
  struct Kat {
    math::Philox4x32 ctr;
    uint32_t k0, k1;
    math::Philox4x32 want;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const math::Philox4x32 got = math::Philox4x32_10(k.ctr, k.k0, k.k1);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(got.v[j], k.want.v[j]) << j;
  }
}

std::vector<float> Whole(const InitSpec& s, const std::string& name,
                         const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(n);
  GenerateInit(s, ParamNameHash(name), shape, 0, n, v.data());
  return v;
}

void MeanStd(const std::vector<float>& v, double* mean, double* sd) {
  double s = 0, s2 = 0;
  for (float x : v) s += x;
  *mean = s / v.size();
  for (float x : v) s2 += (x - *mean) * (x - *mean);
  *sd = std::sqrt(s2 / v.size());
}

TEST(InitSpec, StatisticsAndConstants) {
  const int64_t n = 1 << 20;  // sampling error of a mean: ~sd / 1024
  double m, sd;
  InitSpec u;
  u.kind = InitKind::kUniform;
  u.low = -2;
  u.high = 3;
  u.seed = 7;
  std::vector<float> v = Whole(u, "u", {n});
  MeanStd(v, &m, &sd);
  EXPECT_NEAR(m, 0.5, 0.01);
  EXPECT_NEAR(sd, 5 / std::sqrt(12.0), 0.01);
  for (float x : v) ASSERT_TRUE(x >= -2 && x < 3) << x;

  InitSpec g;
  g.kind = InitKind::kNormal;
  g.mean = 1;
  g.std = 2;
  v = Whole(g, "g", {n});
  MeanStd(v, &m, &sd);
  EXPECT_NEAR(m, 1, 0.01);
  EXPECT_NEAR(sd, 2, 0.01);

  InitSpec t;
  t.kind = InitKind::kTruncNormal;
  t.low = -2;
  t.high = 2;
  v = Whole(t, "t", {n});
  MeanStd(v, &m, &sd);
  EXPECT_NEAR(m, 0, 0.01);
  EXPECT_NEAR(sd, 0.8796, 0.01);  // N(0,1) truncated to [-2, 2]
  for (float x : v) ASSERT_TRUE(x >= -2 && x <= 2) << x;

  // nn.Linear(1024, 256).weight: U(-1/sqrt(1024), 1/sqrt(1024)).
  InitSpec k;
  k.kind = InitKind::kKaimingUniform;
  v = Whole(k, "k", {256, 1024});
  MeanStd(v, &m, &sd);
  EXPECT_NEAR(sd, (1 / 32.0) / std::sqrt(3.0), 1e-3);
  for (float x : v) ASSERT_LE(std::fabs(x), 1 / 32.0f);
  // Its bias: the same bound from fan_in.
  InitSpec b;
  b.kind = InitKind::kFanInUniform;
  b.fan_in = 1024;
  v = Whole(b, "b", {256});
  for (float x : v) ASSERT_LE(std::fabs(x), 1 / 32.0f);

  InitSpec c;
  c.kind = InitKind::kConstant;
  c.value = 0.25;
  for (float x : Whole(c, "c", {100})) ASSERT_EQ(x, 0.25f);
  c.kind = InitKind::kOnes;
  for (float x : Whole(c, "c", {100})) ASSERT_EQ(x, 1.0f);
  c.kind = InitKind::kZeros;
  for (float x : Whole(c, "c", {100})) ASSERT_EQ(x, 0.0f);

  // Any range is the matching slice of the whole; names and seeds differ.
  std::vector<float> whole = Whole(g, "g", {1000}), part(300);
  GenerateInit(g, ParamNameHash("g"), {1000}, 500, 300, part.data());
  EXPECT_EQ(0, std::memcmp(part.data(), whole.data() + 500, 300 * sizeof(float)));
  EXPECT_NE(Whole(g, "g", {16}), Whole(g, "h", {16}));
  InitSpec g2 = g;
  g2.seed = 1;
  EXPECT_NE(Whole(g, "g", {16}), Whole(g2, "g", {16}));
}

TEST(InitSpec, Refusals) {
  ParamRegistry reg(DType::kF32);
  InitSpec s;
  s.kind = InitKind::kKaimingUniform;
  ParamSpec p;
  p.name = "bias";
  p.shape = {8};
  p.init_spec = &s;
  auto id = reg.Register(p);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.status().message().find("'bias'"), std::string::npos) << id.status();
  s.kind = InitKind::kUniform;
  s.low = 2;
  s.high = 1;
  EXPECT_FALSE(reg.Register(p).ok());
  std::vector<float> values(8);
  s.low = 0;
  p.init = values.data();
  EXPECT_FALSE(reg.Register(p).ok());  // two sources
}

struct Model {
  std::vector<std::string> names = {"w", "b", "emb", "ln", "frozen"};
  std::vector<std::vector<int64_t>> shapes = {{37, 11}, {37}, {300, 4}, {11}, {5}};
  std::vector<InitSpec> specs;
  Model() {
    specs.resize(5);
    specs[0].kind = InitKind::kKaimingUniform;
    specs[0].seed = 42;
    specs[1].kind = InitKind::kFanInUniform;
    specs[1].fan_in = 11;
    specs[1].seed = 42;
    specs[2].kind = InitKind::kNormal;
    specs[2].seed = 42;
    specs[3].kind = InitKind::kOnes;
    specs[4].kind = InitKind::kConstant;
    specs[4].value = -0.5;
  }
};

// Registers the model by spec and reads every param back: ReadMaster
// (trainable) and Gather (all). Collective.
void ReadBack(const Config& c, Communicator* comm, const Model& m,
              std::vector<std::vector<float>>* master, std::vector<std::vector<float>>* gathered) {
  auto e = Engine::Create(c, comm);
  ASSERT_TRUE(e.ok()) << e.status();
  for (size_t k = 0; k < m.names.size(); ++k) {
    ParamSpec p;
    p.name = m.names[k];
    p.shape = m.shapes[k];
    p.trainable = k != 4;
    p.init_spec = &m.specs[k];
    ASSERT_TRUE((*e)->RegisterParam(p).ok());
  }
  absl::Status s = (*e)->Finalize();
  ASSERT_TRUE(s.ok()) << s;
  master->assign(m.names.size(), {});
  gathered->assign(m.names.size(), {});
  for (int id = 0; id < static_cast<int>(m.names.size()); ++id) {
    const int64_t n = *(*e)->ParamNumel(id);
    if (id != 4) {
      (*master)[id].resize(n);
      ASSERT_TRUE((*e)->ReadMaster(id, (*master)[id].data()).ok());
    }
    auto w = (*e)->Gather(id);
    ASSERT_TRUE(w.ok()) << w.status();
    (*gathered)[id].resize(n);
    (*e)->device()->DownloadF32(*w, DType::kF32, (*gathered)[id].data(), n);
    ASSERT_TRUE((*e)->Release(id).ok());
  }
}

TEST(InitSpec, SameAtEveryWorldAndStage) {
  Model m;
  for (int stage = 0; stage <= 3; ++stage) {
    for (int world : {1, 3, 4}) {
      Config c = SmallMlpConfig(stage, DType::kF32);
      c.stage3_param_persistence_threshold = 20;  // "ln" stays whole at stage 3
      std::vector<std::vector<std::vector<float>>> master(world), gathered(world);
      RunThreads(world, [&](int rank, Communicator* comm) {
        ReadBack(c, comm, m, &master[rank], &gathered[rank]);
      });
      for (int r = 0; r < world; ++r) {
        for (size_t k = 0; k < m.names.size(); ++k) {
          const std::vector<float> want = Whole(m.specs[k], m.names[k], m.shapes[k]);
          ASSERT_EQ(gathered[r][k].size(), want.size());
          EXPECT_EQ(0, std::memcmp(gathered[r][k].data(), want.data(), want.size() * 4))
              << "gather stage " << stage << " world " << world << " rank " << r << " "
              << m.names[k];
          if (k != 4) {
            EXPECT_EQ(0, std::memcmp(master[r][k].data(), want.data(), want.size() * 4))
                << "master stage " << stage << " world " << world << " rank " << r << " "
                << m.names[k];
          }
        }
      }
    }
  }
}

float FillValue(const char* name, int64_t i) {
  return std::sin(0.01f * static_cast<float>(i) + static_cast<float>(name[0]));
}

struct Recorder {
  std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> calls;
  std::string fail_on;  // this param's callback returns 7
};

int32_t RecordingFill(void* user, const char* name, int64_t offset, int64_t count, float* out) {
  auto* r = static_cast<Recorder*>(user);
  r->calls.push_back({name, {offset, count}});
  if (r->fail_on == name) return 7;
  for (int64_t k = 0; k < count; ++k) out[k] = FillValue(name, offset + k);
  return 0;
}

TEST(InitFill, Stage3AsksEachElementOfOneRank) {
  const std::vector<std::string> names = {"a", "b", "c"};
  const std::vector<int64_t> numels = {1000, 77, 300};
  for (int world : {1, 3, 4}) {
    Config c = SmallMlpConfig(3, DType::kF32);
    c.stage3_param_persistence_threshold = 0;  // nothing persistent
    c.sub_group_size = 512;                    // several groups
    std::vector<Recorder> rec(world);
    std::vector<std::vector<std::vector<float>>> master(world);
    RunThreads(world, [&](int rank, Communicator* comm) {
      auto e = Engine::Create(c, comm);
      ASSERT_TRUE(e.ok()) << e.status();
      for (size_t k = 0; k < names.size(); ++k) {
        ParamSpec p;
        p.name = names[k];
        p.shape = {numels[k]};
        p.fill = RecordingFill;
        p.fill_user = &rec[rank];
        ASSERT_TRUE((*e)->RegisterParam(p).ok());
      }
      absl::Status s = (*e)->Finalize();
      ASSERT_TRUE(s.ok()) << s;
      master[rank].resize(names.size());
      for (int id = 0; id < 3; ++id) {
        master[rank][id].resize(numels[id]);
        ASSERT_TRUE((*e)->ReadMaster(id, master[rank][id].data()).ok());
      }
    });
    std::vector<LayoutParam> lps;
    for (int k = 0; k < 3; ++k) lps.push_back({k, numels[k], DType::kF32});
    const Layout layout(lps, world, c.sub_group_size);
    for (int k = 0; k < 3; ++k) {
      std::vector<int> owner(numels[k], -1);
      for (int r = 0; r < world; ++r) {
        const Slice sl = layout.SliceOn(k, r);
        for (const auto& call : rec[r].calls) {
          if (call.first != names[k]) continue;
          const int64_t off = call.second.first, cnt = call.second.second;
          EXPECT_GE(off, sl.param_offset) << names[k] << " rank " << r;
          EXPECT_LE(off + cnt, sl.param_offset + sl.numel) << names[k] << " rank " << r;
          for (int64_t i = off; i < off + cnt; ++i) {
            EXPECT_TRUE(owner[i] == -1 || owner[i] == r) << names[k] << " element " << i;
            owner[i] = r;
          }
        }
        for (int64_t i = 0; i < numels[k]; ++i) {
          ASSERT_EQ(master[r][k][i], FillValue(names[k].c_str(), i)) << names[k] << " " << i;
        }
      }
      for (int64_t i = 0; i < numels[k]; ++i) {
        ASSERT_NE(owner[i], -1) << names[k] << " element " << i << " never asked for";
      }
    }
  }
}

TEST(InitFill, FailingCallbackFailsFinalizeOnEveryRank) {
  for (int stage : {0, 3}) {
    const int world = 3;
    Config c = SmallMlpConfig(stage, DType::kF32);
    std::vector<Recorder> rec(world);
    rec[1].fail_on = "w";
    std::vector<absl::Status> got(world);
    RunThreads(world, [&](int rank, Communicator* comm) {
      auto e = Engine::Create(c, comm);
      ASSERT_TRUE(e.ok()) << e.status();
      for (const char* name : {"v", "w"}) {
        ParamSpec p;
        p.name = name;
        p.shape = {500};
        p.fill = RecordingFill;
        p.fill_user = &rec[rank];
        ASSERT_TRUE((*e)->RegisterParam(p).ok());
      }
      got[rank] = (*e)->Finalize();
      // The engine is broken afterwards.
      EXPECT_FALSE((*e)->Finalize().ok());
    });
    for (int r = 0; r < world; ++r) {
      EXPECT_FALSE(got[r].ok()) << "rank " << r;
      EXPECT_NE(got[r].message().find("'w'"), std::string::npos) << got[r];
      EXPECT_NE(got[r].message().find("returned 7"), std::string::npos) << got[r];
      EXPECT_NE(got[r].message().find("rank 1"), std::string::npos) << got[r];
    }
  }
}

TEST(InitSpec, RegistryHoldsNoFullCopy) {
  ParamRegistry reg(DType::kF32);
  InitSpec s;
  s.kind = InitKind::kNormal;
  ParamSpec p;
  p.name = "huge";
  p.shape = {8192, 8192};  // 64M elements
  p.init_spec = &s;
  ASSERT_TRUE(reg.Register(p).ok());
  EXPECT_EQ(reg.init_bytes(), 0);
  ParamSpec z;  // no source: zeros, no copy either
  z.name = "zeros";
  z.shape = {8192, 8192};
  ASSERT_TRUE(reg.Register(z).ok());
  EXPECT_EQ(reg.init_bytes(), 0);
  ParamSpec f;
  f.name = "fill";
  f.shape = {8192, 8192};
  f.fill = RecordingFill;
  ASSERT_TRUE(reg.Register(f).ok());
  EXPECT_EQ(reg.init_bytes(), 0);
  std::vector<float> values(1000);
  ParamSpec v;
  v.name = "values";
  v.shape = {1000};
  v.init = values.data();
  ASSERT_TRUE(reg.Register(v).ok());
  EXPECT_EQ(reg.init_bytes(), 4000);  // values are still copied
  // Producing a range of the huge param uses a bounded buffer.
  int64_t pieces = 0, most = 0;
  reg.ProduceInit(reg.at(0), 5, 3 * ParamRegistry::kInitChunk, [&](int64_t, int64_t n, const float*) {
    ++pieces;
    most = std::max(most, n);
  });
  EXPECT_EQ(pieces, 3);
  EXPECT_EQ(most, ParamRegistry::kInitChunk);
}

}  // namespace
}  // namespace testing
}  // namespace zero

// The engine's optimizers (one rank) against plain double-precision
// references written here; LR schedules against their closed forms;
// gradient accumulation against one large step.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "core/comm/thread_communicator.h"
#include "core/engine/engine.h"
#include "core/optim/lr_schedule.h"
#include "kernels/cast_math.h"

namespace zero {
namespace {

constexpr int kN = 1000;

uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
double Rand(uint64_t i) { return static_cast<double>(Mix(i) >> 11) / 9007199254740992.0 * 2 - 1; }

float Round(double v, DType t) {
  float f = static_cast<float>(v);
  if (t == DType::kF16) return math::HalfToFloat(math::FloatToHalf(f));
  if (t == DType::kBF16) return math::Bf16ToFloat(math::FloatToBf16(f));
  return f;
}

// Runs `steps` optimizer steps of one param with gradients Rand(...) and
// returns the master weights. `micro` micro-steps per step, each handing in
// grads(step, micro).
std::vector<float> RunEngine(Config c, int steps, int micro,
                             double (*grad)(int, int, int)) {
  c.steps_per_print = 0;
  c.gradient_accumulation_steps = micro;
  auto comm = std::move(MakeThreadCommunicators(1)[0]);
  auto e = Engine::Create(c, comm.get());
  EXPECT_TRUE(e.ok()) << e.status();
  std::vector<float> init(kN);
  for (int i = 0; i < kN; ++i) init[i] = static_cast<float>(Rand(i + 777));
  ParamSpec p;
  p.name = "w";
  p.shape = {kN};
  p.dtype = c.dtype;
  p.init = init.data();
  EXPECT_TRUE((*e)->RegisterParam(p).ok());
  EXPECT_TRUE((*e)->Finalize().ok());
  for (int s = 0; s < steps; ++s) {
    for (int m = 0; m < micro; ++m) {
      auto g = (*e)->GradBuffer(0);
      EXPECT_TRUE(g.ok());
      for (int i = 0; i < kN; ++i) {
        float v = static_cast<float>(grad(s, m, i));
        if (c.dtype == DType::kF32) static_cast<float*>(*g)[i] = v;
        if (c.dtype == DType::kF16) static_cast<uint16_t*>(*g)[i] = math::FloatToHalf(v);
        if (c.dtype == DType::kBF16) static_cast<uint16_t*>(*g)[i] = math::FloatToBf16(v);
      }
      EXPECT_TRUE((*e)->GradReady(0).ok());
      EXPECT_TRUE((*e)->Step().ok());
    }
  }
  std::vector<float> out(kN);
  EXPECT_TRUE((*e)->ReadMaster(0, out.data()).ok());
  // The working copy is the master rounded to the working dtype.
  auto w = (*e)->Gather(0);
  for (int i = 0; i < kN; i += 97) {
    float wv = c.dtype == DType::kF32 ? static_cast<float*>(*w)[i]
               : c.dtype == DType::kF16 ? math::HalfToFloat(static_cast<uint16_t*>(*w)[i])
                                        : math::Bf16ToFloat(static_cast<uint16_t*>(*w)[i]);
    EXPECT_EQ(wv, Round(out[i], c.dtype));
  }
  return out;
}

double G(int s, int m, int i) { return Rand(100000 * (s + 1) + 1000 * m + i); }

// torch.optim.Adam / AdamW and SGD written out in double.
std::vector<double> Reference(const Config& c, int steps, DType gt) {
  std::vector<double> p(kN), m(kN, 0), v(kN, 0);
  for (int i = 0; i < kN; ++i) p[i] = static_cast<float>(Rand(i + 777));
  for (int t = 1; t <= steps; ++t) {
    for (int i = 0; i < kN; ++i) {
      double g = Round(G(t - 1, 0, i), gt);
      if (c.optimizer == OptimizerType::kSgd) {
        g += c.weight_decay * p[i];
        if (c.momentum != 0) {
          m[i] = t == 1 ? g : c.momentum * m[i] + g;
          g = c.nesterov ? g + c.momentum * m[i] : m[i];
        }
        p[i] -= c.lr * g;
        continue;
      }
      bool decoupled = c.optimizer == OptimizerType::kAdamW || c.adam_w_mode;
      if (decoupled) {
        p[i] *= 1 - c.lr * c.weight_decay;  // torch.optim.AdamW
      } else {
        g += c.weight_decay * p[i];  // torch.optim.Adam (L2)
      }
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
      double bc1 = 1 - std::pow(c.beta1, t), bc2 = 1 - std::pow(c.beta2, t);
      p[i] -= c.lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + c.eps);
    }
  }
  return p;
}

double MaxRel(const std::vector<float>& a, const std::vector<double>& b) {
  double d = 0, mag = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    d = std::max(d, std::fabs(a[i] - b[i]));
    mag = std::max(mag, std::fabs(b[i]));
  }
  return d / mag;
}

struct OptCase {
  const char* name;
  OptimizerType type;
  bool adam_w_mode;
  double momentum;
  bool nesterov;
};

TEST(OptimizerTest, MatchesDoublePrecisionReference) {
  const OptCase cases[] = {{"AdamW", OptimizerType::kAdamW, true, 0, false},
                           {"Adam(L2)", OptimizerType::kAdam, false, 0, false},
                           {"Adam(w_mode)", OptimizerType::kAdam, true, 0, false},
                           {"SGD", OptimizerType::kSgd, true, 0, false},
                           {"SGD momentum", OptimizerType::kSgd, true, 0.9, false},
                           {"SGD nesterov", OptimizerType::kSgd, true, 0.9, true}};
  for (const OptCase& oc : cases) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      Config c;
      c.dtype = t;
      c.optimizer = oc.type;
      c.adam_w_mode = oc.adam_w_mode;
      c.momentum = oc.momentum;
      c.nesterov = oc.nesterov;
      c.lr = 1e-2;
      c.weight_decay = 0.1;
      c.loss_scale = 1.0;  // static 1: compare optimizer math alone
      auto got = RunEngine(c, 8, 1, G);
      auto ref = Reference(c, 8, t);
      // Master weights are fp32 in every mode; gradients reach them rounded
      // to the working dtype, which the reference reproduces.
      EXPECT_LE(MaxRel(got, ref), 1e-6) << oc.name << " " << DTypeName(t);
    }
  }
}

double Micro(int s, int m, int i) { return Rand(100000 * (s + 1) + 1000 * m + i) / 4.0; }
double Full(int s, int, int i) {
  double sum = 0;
  for (int m = 0; m < 4; ++m) sum += Rand(100000 * (s + 1) + 1000 * m + i);
  return sum / 4.0;
}

TEST(AccumulationTest, KMicroStepsOfScaledGradsEqualOneFullStep) {
  for (DType t : {DType::kF32, DType::kBF16}) {
    Config c;
    c.dtype = t;
    c.lr = 1e-2;
    auto accumulated = RunEngine(c, 5, 4, Micro);
    auto full = RunEngine(c, 5, 1, Full);
    std::vector<double> fd(full.begin(), full.end());
    EXPECT_LE(MaxRel(accumulated, fd), t == DType::kF32 ? 1e-6 : 2e-2) << DTypeName(t);
  }
}

TEST(LrScheduleTest, WarmupLRLogAndLinear) {
  Config c;
  c.scheduler = SchedulerType::kWarmupLR;
  c.warmup_min_lr = 0.001;
  c.warmup_max_lr = 0.01;
  c.warmup_num_steps = 100;
  LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.LrAt(-1), 0.001);  // set at construction
  EXPECT_DOUBLE_EQ(s.LrForStep(0), 0.001);  // DeepSpeed steps after the update
  EXPECT_DOUBLE_EQ(s.LrAt(0), 0.001);
  EXPECT_NEAR(s.LrAt(9), 0.001 + 0.009 * std::log(10.0) / std::log(100.0), 1e-15);
  EXPECT_DOUBLE_EQ(s.LrAt(100), 0.01);
  EXPECT_DOUBLE_EQ(s.LrAt(5000), 0.01);
  c.warmup_type = WarmupType::kLinear;
  LrSchedule lin(c);
  EXPECT_NEAR(lin.LrAt(25), 0.001 + 0.009 * 0.25, 1e-15);
}

TEST(LrScheduleTest, WarmupDecayLR) {
  Config c;
  c.scheduler = SchedulerType::kWarmupDecayLR;
  c.warmup_min_lr = 0;
  c.warmup_max_lr = 0.01;
  c.warmup_num_steps = 10;
  c.total_num_steps = 110;
  c.warmup_type = WarmupType::kLinear;
  LrSchedule s(c);
  EXPECT_NEAR(s.LrAt(5), 0.005, 1e-15);
  EXPECT_NEAR(s.LrAt(10), 0.01, 1e-15);         // (110-10)/(110-10)
  EXPECT_NEAR(s.LrAt(60), 0.01 * 0.5, 1e-15);   // halfway down
  EXPECT_NEAR(s.LrAt(110), 0.0, 1e-15);
  EXPECT_NEAR(s.LrAt(500), 0.0, 1e-15);         // clamped at 0
}

TEST(LrScheduleTest, WarmupCosineLR) {
  Config c;
  c.scheduler = SchedulerType::kWarmupCosineLR;
  c.lr = 0.02;
  c.warmup_min_ratio = 0.1;
  c.warmup_num_steps = 10;
  c.total_num_steps = 110;
  c.cos_min_ratio = 0.01;
  c.warmup_type = WarmupType::kLinear;
  LrSchedule s(c);
  EXPECT_DOUBLE_EQ(s.LrAt(-1), 0.0);
  EXPECT_NEAR(s.LrAt(5), 0.02 * (0.1 + 0.5 * 0.9), 1e-15);
  // After warmup: ratio = cos_min + (1 - cos_min) * (1 + cos(pi * k / 100)) / 2
  // with k = it - warmup + 1.
  EXPECT_NEAR(s.LrAt(59), 0.02 * (0.01 + 0.99 * 0.5), 1e-12);  // k = 50
  EXPECT_NEAR(s.LrAt(109), 0.02 * 0.01, 1e-12);               // k = 100
}

TEST(LrScheduleTest, EngineUsesScheduleAndSkipsDoNotAdvanceIt) {
  Config c;
  c.scheduler = SchedulerType::kWarmupLR;
  c.warmup_min_lr = 0.0;
  c.warmup_max_lr = 0.1;
  c.warmup_num_steps = 4;
  c.warmup_type = WarmupType::kLinear;
  c.steps_per_print = 0;
  auto comm = std::move(MakeThreadCommunicators(1)[0]);
  auto e = *Engine::Create(c, comm.get());
  ParamSpec p;
  p.name = "w";
  p.shape = {4};
  ASSERT_TRUE(e->RegisterParam(p).ok());
  ASSERT_TRUE(e->Finalize().ok());
  std::vector<double> lrs;
  for (int s = 0; s < 5; ++s) {
    auto g = e->GradBuffer(0);
    static_cast<float*>(*g)[0] = s == 2 ? INFINITY : 1.0f;  // fp32: inf skips too
    ASSERT_TRUE(e->GradReady(0).ok());
    auto info = e->Step();
    ASSERT_TRUE(info.ok());
    lrs.push_back(info->lr);
    EXPECT_EQ(info->skipped, s == 2);
  }
  // Steps 0,1 use LrAt(-1), LrAt(0); the skipped step reports LrAt(1) and
  // does not consume it; the next two use LrAt(1), LrAt(2).
  EXPECT_DOUBLE_EQ(lrs[0], 0.0);
  EXPECT_DOUBLE_EQ(lrs[1], 0.0);
  EXPECT_DOUBLE_EQ(lrs[3], 0.025);
  EXPECT_DOUBLE_EQ(lrs[4], 0.05);
}

}  // namespace
}  // namespace zero

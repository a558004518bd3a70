#include "tests/testing/mlp_harness.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <thread>

#include "core/comm/thread_communicator.h"
#include "core/common/status_macros.h"
#include "tests/testing/muon_reference.h"
#include "kernels/cast_math.h"
#include "tests/testing/moments_rounding.h"

namespace zero {
namespace testing {
namespace {

uint64_t SplitMix(uint64_t* s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double Uniform(uint64_t* s) {
  return static_cast<double>(SplitMix(s) >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
}

struct Shapes {
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<bool> trainable;
};

Shapes ModelShapes(const MlpSpec& m) {
  Shapes s;
  s.names = {"embed", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  s.shapes = {{m.in}, {m.hidden, m.in}, {m.hidden}, {m.out, m.hidden}, {m.out}};
  s.trainable = {!m.frozen_embedding, true, true, true, true};
  return s;
}

std::vector<std::vector<double>> InitialParams(const MlpSpec& m) {
  Shapes s = ModelShapes(m);
  uint64_t seed = 42;
  std::vector<std::vector<double>> p;
  const double fan_in[] = {1.0, static_cast<double>(m.in), static_cast<double>(m.in),
                           static_cast<double>(m.hidden), static_cast<double>(m.hidden)};
  for (size_t i = 0; i < s.shapes.size(); ++i) {
    int64_t n = 1;
    for (int64_t d : s.shapes[i]) n *= d;
    std::vector<double> v(n);
    // Rounded to float: engine and reference start from the same values.
    for (auto& x : v) x = static_cast<float>(Uniform(&seed) / std::sqrt(fan_in[i]) * (i == 0 ? 0.1 : 1.0));
    p.push_back(std::move(v));
  }
  return p;
}

// One micro-batch of the global batch for step `step`, micro-step `micro`.
void Batch(const MlpSpec& m, int step, int micro, std::vector<double>* x,
           std::vector<double>* t) {
  uint64_t seed = 1000003ull * static_cast<uint64_t>(step * 64 + micro) + 7;
  x->resize(static_cast<size_t>(m.global_batch) * m.in);
  t->resize(static_cast<size_t>(m.global_batch) * m.out);
  for (int r = 0; r < m.global_batch; ++r) {
    for (int a = 0; a < m.in; ++a) (*x)[r * m.in + a] = Uniform(&seed);
    for (int j = 0; j < m.out; ++j) {
      double s = 0;
      for (int a = 0; a < m.in; ++a) s += (*x)[r * m.in + a] * (((a + j) % 5) - 2);
      (*t)[r * m.out + j] = std::sin(0.3 * s);
    }
  }
}

// Gradient of the mean loss over rows [lo, hi) of the batch, in double.
// p: embed, w1, b1, w2, b2. Returns gradients for all five.
std::vector<std::vector<double>> Grad(const MlpSpec& m,
                                      const std::vector<std::vector<double>>& p,
                                      const std::vector<double>& x,
                                      const std::vector<double>& t, int lo,
                                      int hi) {
  std::vector<std::vector<double>> g(p.size());
  for (size_t i = 0; i < p.size(); ++i) g[i].assign(p[i].size(), 0.0);
  const double inv = 1.0 / (hi - lo);
  std::vector<double> xin(m.in), h(m.hidden), dy(m.out), dh(m.hidden);
  for (int r = lo; r < hi; ++r) {
    for (int a = 0; a < m.in; ++a) xin[a] = x[r * m.in + a] + p[0][a];
    for (int j = 0; j < m.hidden; ++j) {
      double z = p[2][j];
      for (int a = 0; a < m.in; ++a) z += p[1][j * m.in + a] * xin[a];
      h[j] = std::tanh(z);
    }
    for (int k = 0; k < m.out; ++k) {
      double y = p[4][k];
      for (int j = 0; j < m.hidden; ++j) y += p[3][k * m.hidden + j] * h[j];
      dy[k] = (y - t[r * m.out + k]) * inv;
      g[4][k] += dy[k];
      for (int j = 0; j < m.hidden; ++j) g[3][k * m.hidden + j] += dy[k] * h[j];
    }
    for (int j = 0; j < m.hidden; ++j) {
      double d = 0;
      for (int k = 0; k < m.out; ++k) d += dy[k] * p[3][k * m.hidden + j];
      dh[j] = d * (1.0 - h[j] * h[j]);
      g[2][j] += dh[j];
      for (int a = 0; a < m.in; ++a) {
        g[1][j * m.in + a] += dh[j] * xin[a];
        g[0][a] += dh[j] * p[1][j * m.in + a];
      }
    }
  }
  return g;
}

double LoadAs(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return math::HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return math::Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
  }
  return 0;
}

void StoreAs(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = math::FloatToHalf(static_cast<float>(v)); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = math::FloatToBf16(static_cast<float>(v)); break;
  }
}

}  // namespace

Config SmallMlpConfig(int stage, DType dtype) {
  Config c;
  c.stage = stage;
  c.dtype = dtype;
  c.lr = 1e-2;
  c.weight_decay = 0.01;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 30;
  c.initial_scale_power = 8;
  c.reduce_bucket_size = 100;
  c.stage3_param_persistence_threshold = 10;
  return c;
}

void ApplyStepMode(const std::string& mode, Config* config) {
  if (mode == "gas2_clip") {
    config->gradient_accumulation_steps = 2;
    config->gradient_clipping = 0.05;
  } else if (mode == "sgd") {
    config->optimizer = OptimizerType::kSgd;
    config->momentum = 0.9;
  } else if (mode == "lion") {
    config->optimizer = OptimizerType::kLion;
    config->lr = 1e-3;  // DeepSpeed's Lion default; sign steps are lr-sized
    config->beta2 = 0.99;
    config->weight_decay = 0.1;
  } else if (mode == "adagrad") {
    config->optimizer = OptimizerType::kAdagrad;
    // Its first step is lr * sign(g) for |g| >> eps: lr-sized wherever bf16
    // rounding flips a tiny gradient's sign; 1e-3 keeps that under bf16's
    // tolerance (DeepSpeed's default is 1e-2).
    config->lr = 1e-3;
    config->eps = 1e-10;
  } else if (mode == "muon") {
    // DeepSpeed's MuonWithAuxAdam defaults for the matrices (lr 0.02,
    // momentum 0.95, Nesterov, 5 Newton-Schulz steps); the biases on AdamW.
    config->optimizer = OptimizerType::kMuon;
    config->muon_lr = 0.02;
    config->adam_lr = 1e-2;
    config->weight_decay = 0.1;
  }
}

absl::StatusOr<std::unique_ptr<Engine>> MakeMlpEngine(const Config& config,
                                                      Communicator* comm,
                                                      const MlpSpec& spec) {
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Create(config, comm));
  if (spec.make_device) RETURN_IF_ERROR(e->SetDevice(spec.make_device()));
  Shapes s = ModelShapes(spec);
  auto init = InitialParams(spec);
  for (size_t i = 0; i < s.names.size(); ++i) {
    std::vector<float> f(init[i].begin(), init[i].end());
    ParamSpec ps;
    ps.name = s.names[i];
    ps.shape = s.shapes[i];
    ps.dtype = s.trainable[i] ? config.dtype : DType::kF32;
    ps.init = f.data();
    ps.trainable = s.trainable[i];
    RETURN_IF_ERROR(e->RegisterParam(ps).status());
  }
  RETURN_IF_ERROR(e->Finalize());
  return e;
}

namespace {

absl::StatusOr<MlpResult> TrainEngine(const std::unique_ptr<Engine>& e, const Config& config,
                                      Communicator* comm, const MlpSpec& spec) {
  Shapes s = ModelShapes(spec);
  std::vector<int> ids;
  for (size_t i = 0; i < s.names.size(); ++i) ids.push_back(static_cast<int>(i));
  const int W = comm->world_size(), rank = comm->rank();
  const int local = spec.global_batch / W;
  const int gas = static_cast<int>(e->config().gradient_accumulation_steps);
  const DType t = config.dtype;
  MlpResult res;
  std::vector<double> x, tg;
  int start = 0;
  if (!spec.resume_dir.empty()) {
    RETURN_IF_ERROR(e->Load(spec.resume_dir, spec.resume_tag, spec.load_options));
    const EngineStats st = e->Stats();
    start = static_cast<int>(st.global_step + st.skipped_steps);
  }
  for (int step = start; step < spec.steps; ++step) {
    if (step == spec.save_after) {
      RETURN_IF_ERROR(e->Save(spec.ckpt_dir, spec.save_tag, spec.save_options));
    }
    if (spec.hook) RETURN_IF_ERROR(spec.hook(e.get(), step, -1));
    for (int micro = 0; micro < gas; ++micro) {
      Batch(spec, step, micro, &x, &tg);
      // Forward: gather every param, read the working copy.
      std::vector<std::vector<double>> p(ids.size());
      for (size_t i = 0; i < ids.size(); ++i) {
        ASSIGN_OR_RETURN(void* d, e->Gather(ids[i]));
        ASSIGN_OR_RETURN(int64_t n, e->ParamNumel(ids[i]));
        DType pt = s.trainable[i] ? t : DType::kF32;
        // Device memory (a GPU) is read through a host copy.
        std::vector<char> host(n * DTypeSize(pt));
        if (spec.caller_copy) {
          spec.caller_copy(e->device(), host.data(), d, host.size());
        } else {
          e->device()->Copy(host.data(), d, host.size());
        }
        p[i].resize(n);
        for (int64_t k = 0; k < n; ++k) p[i][k] = LoadAs(host.data(), pt, k);
        RETURN_IF_ERROR(e->Release(ids[i]));
      }
      auto g = Grad(spec, p, x, tg, rank * local, (rank + 1) * local);
      // Backward: stage 3 gathers the layer again, as FSDP does.
      if (spec.regather_for_backward) {
        for (int i = static_cast<int>(ids.size()) - 1; i >= 0; --i) {
          ASSIGN_OR_RETURN(void* d, e->Gather(ids[i]));
          (void)d;
          RETURN_IF_ERROR(e->Release(ids[i]));
        }
      }
      const double scale = e->loss_scale() / gas;
      for (int i = static_cast<int>(ids.size()) - 1; i >= 0; --i) {
        if (!s.trainable[i]) continue;
        ASSIGN_OR_RETURN(void* gb, e->GradBuffer(ids[i]));
        std::vector<char> host(g[i].size() * DTypeSize(t));
        for (size_t k = 0; k < g[i].size(); ++k) StoreAs(host.data(), t, k, g[i][k] * scale);
        if (step == spec.inf_step && rank == spec.inf_rank && i == 3) {
          StoreAs(host.data(), t, 1, std::numeric_limits<double>::infinity());
        }
        if (spec.caller_copy) {
          spec.caller_copy(e->device(), gb, host.data(), host.size());
        } else {
          e->device()->Copy(gb, host.data(), host.size());
        }
        RETURN_IF_ERROR(e->GradReady(ids[i]));
        if (spec.hook) RETURN_IF_ERROR(spec.hook(e.get(), step, i));
      }
      ASSIGN_OR_RETURN(StepInfo info, e->Step());
      if (info.boundary && spec.record_steps) res.steps.push_back(info);
    }
  }
  if (!spec.final_tag.empty()) RETURN_IF_ERROR(e->Save(spec.ckpt_dir, spec.final_tag));
  for (size_t i = 0; i < ids.size(); ++i) {
    ASSIGN_OR_RETURN(int64_t n, e->ParamNumel(ids[i]));
    std::vector<float> out(n);
    RETURN_IF_ERROR(e->ReadMaster(ids[i], out.data()));
    res.params.push_back(std::move(out));
    res.names.push_back(s.names[i]);
  }
  res.stats = e->Stats();
  return res;
}

}  // namespace

absl::StatusOr<MlpResult> TrainMlp(const Config& config, Communicator* comm,
                                   const MlpSpec& spec) {
  ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, MakeMlpEngine(config, comm, spec));
  absl::StatusOr<MlpResult> r = TrainEngine(e, config, comm, spec);
  if (!r.ok() && spec.after_failure) spec.after_failure(e.get(), r.status());
  return r;
}

double MlpEvalLoss(const MlpSpec& m, const MlpResult& r, int batches) {
  std::vector<std::vector<double>> p;
  for (const auto& v : r.params) p.emplace_back(v.begin(), v.end());
  std::vector<double> x, t, xin(m.in), h(m.hidden);
  double sum = 0.0;
  int rows = 0;
  for (int b = 0; b < batches; ++b) {
    Batch(m, 1000000 + b, 0, &x, &t);
    for (int row = 0; row < m.global_batch; ++row, ++rows) {
      for (int a = 0; a < m.in; ++a) xin[a] = x[row * m.in + a] + p[0][a];
      for (int j = 0; j < m.hidden; ++j) {
        double z = p[2][j];
        for (int a = 0; a < m.in; ++a) z += p[1][j * m.in + a] * xin[a];
        h[j] = std::tanh(z);
      }
      for (int k = 0; k < m.out; ++k) {
        double y = p[4][k];
        for (int j = 0; j < m.hidden; ++j) y += p[3][k * m.hidden + j] * h[j];
        const double d = y - t[row * m.out + k];
        sum += 0.5 * d * d;
      }
    }
  }
  return sum / rows;
}

MlpResult TrainMlpReference(const Config& config, const MlpSpec& spec) {
  const Config before = ReferenceHyperParams(config);
  Config switched = config;
  switched.moments_format = spec.moments_format_after;
  const Config after = ReferenceHyperParams(switched);
  const Config* cfg = &before;  // the hyperparameters and moments format of a step
  Shapes s = ModelShapes(spec);
  auto p = InitialParams(spec);
  std::vector<std::vector<double>> m(p.size()), v(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    m[i].assign(p[i].size(), 0.0);
    v[i].assign(p[i].size(), 0.0);
  }
  const int gas = before.gradient_accumulation_steps > 0
                      ? static_cast<int>(before.gradient_accumulation_steps)
                      : 1;
  int64_t t = 0;
  MlpResult res;
  std::vector<double> x, tg;
  // offload_optimizer.delayed_update: the forward and backward of a step
  // read `seen`, the params as they were before the last boundary's update
  // (docs/ARCHITECTURE.md, "Offload"); exact mode reads `p` itself.
  const bool delayed = before.offload_optimizer.delayed_update;
  std::vector<std::vector<double>> seen = p;
  for (int step = 0; step < spec.steps; ++step) {
    if (step == spec.save_after) seen = p;  // a save lands the update in flight
    if (step == spec.moments_format_switch) {
      cfg = &after;
      RoundMoments(after, s.trainable, &m, &v);  // the load stores them so
    }
    const Config& c = *cfg;
    std::vector<std::vector<double>> g(p.size());
    for (size_t i = 0; i < p.size(); ++i) g[i].assign(p[i].size(), 0.0);
    for (int micro = 0; micro < gas; ++micro) {
      Batch(spec, step, micro, &x, &tg);
      auto gm = Grad(spec, delayed ? seen : p, x, tg, 0, spec.global_batch);
      for (size_t i = 0; i < p.size(); ++i) {
        for (size_t k = 0; k < p[i].size(); ++k) g[i][k] += gm[i][k] / gas;
      }
    }
    seen = p;  // every boundary, skipped or not, publishes the last update
    if (step == spec.inf_step) continue;  // overflow: skip, no state change
    double sumsq = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      if (!s.trainable[i]) continue;
      for (double gk : g[i]) sumsq += gk * gk;
    }
    double coef = 1.0;
    if (c.gradient_clipping > 0) {
      double clip = (std::sqrt(sumsq) + 1e-6) / c.gradient_clipping;
      if (clip > 1) coef = 1.0 / clip;
    }
    ++t;
    const bool muon = c.optimizer == OptimizerType::kMuon;
    const double lr = muon && c.adam_lr >= 0 ? c.adam_lr : c.lr;
    for (size_t i = 0; i < p.size(); ++i) {
      if (!s.trainable[i]) continue;
      if (muon && s.shapes[i].size() == 2) {  // the MLP's hidden matrices
        MuonReferenceHyper h;
        h.lr = c.muon_lr >= 0 ? c.muon_lr : c.lr;
        h.weight_decay = c.weight_decay;
        h.momentum = c.muon_momentum;
        h.nesterov = c.muon_nesterov;
        h.ns_steps = c.muon_ns_steps;
        std::vector<double> gi(g[i].size());
        for (size_t k = 0; k < gi.size(); ++k) gi[k] = g[i][k] * coef;
        MuonReferenceStep(h, gi, s.shapes[i][0], s.shapes[i][1], &p[i], &m[i]);
        continue;
      }
      for (size_t k = 0; k < p[i].size(); ++k) {
        double gk = g[i][k] * coef;
        if (c.optimizer == OptimizerType::kLion) {  // DeepSpeed's Lion
          const double interp = c.beta1 * m[i][k] + (1 - c.beta1) * gk;
          const double sign = interp > 0 ? 1.0 : interp < 0 ? -1.0 : 0.0;
          p[i][k] = p[i][k] * (1 - lr * c.weight_decay) - lr * sign;
          m[i][k] = c.beta2 * m[i][k] + (1 - c.beta2) * gk;
          continue;
        }
        if (c.optimizer == OptimizerType::kAdagrad) {  // DeepSpeed's Adagrad
          gk += c.weight_decay * p[i][k];
          v[i][k] += gk * gk;
          p[i][k] -= lr * gk / (std::sqrt(v[i][k]) + c.eps);
          continue;
        }
        if (c.optimizer == OptimizerType::kSgd) {
          if (c.weight_decay != 0) gk += c.weight_decay * p[i][k];
          if (c.momentum != 0) {
            m[i][k] = t == 1 ? gk : c.momentum * m[i][k] + (1 - c.dampening) * gk;
            gk = c.nesterov ? gk + c.momentum * m[i][k] : m[i][k];
          }
          p[i][k] -= lr * gk;
          continue;
        }
        const bool decoupled = c.optimizer == OptimizerType::kAdamW || c.adam_w_mode;
        if (!decoupled) gk += c.weight_decay * p[i][k];
        m[i][k] = c.beta1 * m[i][k] + (1 - c.beta1) * gk;
        v[i][k] = c.beta2 * v[i][k] + (1 - c.beta2) * gk * gk;
        double mhat = m[i][k] / (1 - std::pow(c.beta1, t));
        double vhat = v[i][k] / (1 - std::pow(c.beta2, t));
        double upd = mhat / (std::sqrt(vhat) + c.eps);
        if (decoupled) upd += c.weight_decay * p[i][k];
        p[i][k] -= lr * upd;
      }
    }
    RoundMoments(c, s.trainable, &m, &v);  // as optimizer.moments_format stores them
  }
  for (size_t i = 0; i < p.size(); ++i) {
    res.params.emplace_back(p[i].begin(), p[i].end());
    res.names.push_back(s.names[i]);
  }
  return res;
}

double MaxRelDiff(const MlpResult& a, const MlpResult& b) {
  double diff = 0, mag = 0;
  for (size_t i = 0; i < b.params.size() && i < a.params.size(); ++i) {
    for (size_t k = 0; k < b.params[i].size(); ++k) {
      diff = std::max(diff, std::fabs(static_cast<double>(a.params[i][k]) - b.params[i][k]));
      mag = std::max(mag, std::fabs(static_cast<double>(b.params[i][k])));
    }
  }
  if (a.params.size() != b.params.size()) return std::numeric_limits<double>::infinity();
  return diff / mag;
}

void RunThreads(int world, const std::function<void(int, Communicator*)>& fn) {
  auto comms = MakeThreadCommunicators(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { fn(r, comms[r].get()); });
  }
  for (auto& th : threads) th.join();
}

}  // namespace testing
}  // namespace zero

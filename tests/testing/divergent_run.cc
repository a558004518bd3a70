#include "tests/testing/divergent_run.h"

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>

#include "core/comm/thread_communicator.h"
#include "core/common/status_macros.h"
#include "core/engine/engine.h"

namespace zero {
namespace testing {
namespace {

constexpr int64_t kNumel[kDivergentParams] = {13, 10, 10, 10, 7};

std::vector<float> InitialValues(int p) {
  std::vector<float> v(kNumel[p]);
  for (int64_t i = 0; i < kNumel[p]; ++i) v[i] = 0.05f * std::sin(1.3f * i + 0.9f * p);
  return v;
}

// A gradient that depends on the gathered values (stage 3 must hand the
// right ones), the rank's data and the micro-step.
void FillGrad(int p, int rank, int step, int micro, const std::vector<float>& w, float* g) {
  for (int64_t i = 0; i < kNumel[p]; ++i) {
    g[i] = std::sin(0.1f * (i + 1) + 0.7f * p + 0.3f * rank + 0.05f * step + 0.01f * micro) *
           (1.0f + 0.1f * w[i]);
  }
}

absl::Status TrainSteps(Engine* e, int rank, const DivergentPlan& plan, int gas,
                        const std::vector<int>& ids) {
  const int steps = plan.steps_of ? plan.steps_of(rank) : plan.steps;
  std::vector<std::vector<float>> w(kDivergentParams);
  for (int step = 0; step < steps; ++step) {
    const int micros = gas + (plan.extra_micros ? plan.extra_micros(rank, step) : 0);
    for (int m = 0; m < micros; ++m) {
      auto used = [&](int p) { return !plan.uses || plan.uses(rank, step, m, p); };
      for (int p = 0; p < kDivergentParams; ++p) {  // forward
        if (!used(p)) continue;
        ASSIGN_OR_RETURN(void* data, e->Gather(ids[p]));
        w[p].resize(kNumel[p]);
        std::memcpy(w[p].data(), data, kNumel[p] * sizeof(float));
      }
      for (int p = kDivergentParams - 1; p >= 0; --p) {  // backward
        if (!used(p)) continue;
        ASSIGN_OR_RETURN(void* g, e->GradBuffer(ids[p]));
        if (plan.zero_grad && plan.zero_grad(rank, step, m, p)) {
          std::memset(g, 0, kNumel[p] * sizeof(float));
        } else {
          FillGrad(p, rank, step, m, w[p], static_cast<float*>(g));
        }
        RETURN_IF_ERROR(e->GradReady(ids[p]));
        RETURN_IF_ERROR(e->Release(ids[p]));
      }
      RETURN_IF_ERROR(e->Step().status());
    }
  }
  return absl::OkStatus();
}

}  // namespace

const char* DivergentParamName(int p) {
  static const char* const kNames[kDivergentParams] = {
      "shared.weight", "experts.0.weight", "experts.1.weight", "experts.2.weight", "head.bias"};
  return kNames[p];
}

Config DivergentConfig(int stage, int gas) {
  Config c;
  c.stage = stage;
  c.dtype = DType::kF32;
  c.lr = 1e-2;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 60;
  c.gradient_accumulation_steps = gas;
  c.reduce_bucket_size = 16;  // about one param per bucket
  c.stage3_param_persistence_threshold = 0;
  return c;
}

DivergentOutcome RunDivergent(const Config& config, int rank, Communicator* comm,
                              const DivergentPlan& plan) {
  DivergentOutcome out;
  auto made = Engine::Create(config, comm);
  if (!made.ok()) {
    out.status = made.status();
    return out;
  }
  std::unique_ptr<Engine> e = std::move(*made);
  std::vector<int> ids(kDivergentParams);
  for (int p = 0; p < kDivergentParams; ++p) {
    std::vector<float> init = InitialValues(p);
    ParamSpec spec;
    spec.name = DivergentParamName(p);
    spec.shape = {kNumel[p]};
    spec.init = init.data();
    auto id = e->RegisterParam(spec);
    if (!id.ok()) {
      out.status = id.status();
      return out;
    }
    ids[p] = *id;
  }
  out.status = e->Finalize();
  const auto t0 = std::chrono::steady_clock::now();
  if (out.status.ok()) {
    out.status = TrainSteps(e.get(), rank, plan, static_cast<int>(config.gradient_accumulation_steps), ids);
  }
  if (out.status.ok() && plan.saves && plan.saves(rank)) {
    out.status = e->Save(plan.save_dir, "end");
  }
  if (out.status.ok() && plan.reads_state && plan.reads_state(rank)) {
    for (int p = 0; p < kDivergentParams && out.status.ok(); ++p) {
      std::vector<float> v(kNumel[p]);
      out.status = e->ReadMaster(ids[p], v.data());
    }
  }
  if (out.status.ok()) {
    out.params.resize(kDivergentParams);
    for (int p = 0; p < kDivergentParams && out.status.ok(); ++p) {
      out.params[p].resize(kNumel[p]);
      out.status = e->ReadMaster(ids[p], out.params[p].data());
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.flight_record = e->FlightRecord();
  return out;
}

std::vector<DivergentCase> DivergentCases(int stage, int world, const std::string& save_dir) {
  const int l = world - 1;
  std::vector<DivergentCase> out;
  // The last rank does not call experts.1 at step 1 (an expert that got no
  // tokens there): at stages 0-2 it counts as a zero gradient from that
  // rank (ignore_unused_parameters), bit for bit the run where it handed in
  // zeros; at stage 3 the ranks part ways at its gather: an error naming it.
  auto skipped = [l](int rank, int step, int, int p) { return rank == l && step == 1 && p == 2; };
  {
    DivergentCase c;
    c.name = "skipped_expert";
    c.plan.uses = [skipped](int r, int s, int m, int p) { return !skipped(r, s, m, p); };
    c.trains = stage <= 2;
    c.reference.zero_grad = skipped;
    c.message = {"ranks diverged at collective", "experts.1.weight", "step 1",
                 "different params"};
    out.push_back(c);
  }
  if (stage == 0 || stage == 2) {  // the same with ignore_unused_parameters false
    DivergentCase c;
    c.name = "skipped_expert_not_ignored";
    c.ignore_unused_parameters = false;
    c.plan.uses = [skipped](int r, int s, int m, int p) { return !skipped(r, s, m, p); };
    c.message = {"ranks diverged at collective", "experts.1.weight", "step 1",
                 "different params"};
    out.push_back(c);
  }
  if (stage == 1) {  // stage 1 reduces at the boundary: the check names them
    DivergentCase c;
    c.name = "skipped_expert_not_ignored";
    c.ignore_unused_parameters = false;
    c.plan.uses = [skipped](int r, int s, int m, int p) { return !skipped(r, s, m, p); };
    c.message = {"ignore_unused_parameters is false", "'experts.1.weight' (rank " +
                                                          std::to_string(l) + ")"};
    c.checked_at_boundary = true;
    out.push_back(c);
  }
  {  // skipped at each micro-step of an accumulation of 2, by another rank
    DivergentCase c;
    c.name = "skipped_in_accumulation";
    c.gas = 2;
    auto skip = [](int rank, int step, int micro, int p) {
      return (rank == 0 && micro == 0 && p == 4) || (rank == 1 && micro == 1 && p == 1) ||
             (rank == 1 && step == 2 && p == 0);
    };
    c.plan.uses = [skip](int r, int s, int m, int p) { return !skip(r, s, m, p); };
    c.trains = stage <= 2;
    c.reference.zero_grad = skip;
    c.message = {"ranks diverged at collective", "'head.bias'"};
    out.push_back(c);
  }
  {  // rank r only ever uses expert r % 3
    DivergentCase c;
    c.name = "branch_per_rank";
    c.plan.uses = [](int rank, int, int, int p) { return p == 0 || p == 4 || p == 1 + rank % 3; };
    c.trains = stage <= 2;
    c.reference.zero_grad = [](int rank, int, int, int p) {
      return p >= 1 && p <= 3 && p != 1 + rank % 3;
    };
    c.message = {"ranks diverged at collective", "experts.0.weight", "experts.1.weight"};
    out.push_back(c);
  }
  {  // the last rank has one batch fewer, then every rank saves
    DivergentCase c;
    c.name = "fewer_steps_then_save";
    c.plan.steps_of = [l](int rank) { return rank == l ? 2 : 3; };
    c.plan.saves = [](int) { return true; };
    c.plan.save_dir = save_dir + "/fewer_steps";
    c.message = {"ranks diverged at collective", "save_checkpoint", "must be made on every rank"};
    out.push_back(c);
  }
  {  // accumulation 2; the last rank runs one micro-step more, then all save
    DivergentCase c;
    c.name = "extra_micro_step_then_save";
    c.gas = 2;
    c.plan.extra_micros = [l](int rank, int step) { return rank == l && step == 0 ? 1 : 0; };
    c.plan.saves = [](int) { return true; };
    c.plan.save_dir = save_dir + "/extra_micro";
    c.message = {"ranks diverged at collective", "save_checkpoint"};
    out.push_back(c);
  }
  {  // a save on rank 0 alone while the others go on training
    DivergentCase c;
    c.name = "save_on_rank0_only";
    c.plan.steps_of = [](int rank) { return rank == 0 ? 2 : 3; };
    c.plan.saves = [](int rank) { return rank == 0; };
    c.plan.save_dir = save_dir + "/subset_save";
    c.message = {"save_checkpoint", "must be made on every rank"};
    out.push_back(c);
  }
  if (stage >= 1) {  // a state_dict on rank 0 alone while the others train
    DivergentCase c;
    c.name = "state_read_on_rank0_only";
    c.plan.steps_of = [](int rank) { return rank == 0 ? 2 : 3; };
    c.plan.reads_state = [](int rank) { return rank == 0; };
    c.message = {"read_master", "must be made on every rank"};
    out.push_back(c);
  }
  return out;
}

std::string CheckDivergentRank(const DivergentCase& c, int rank, const DivergentOutcome& got,
                               const DivergentOutcome* ref) {
  const std::string who = c.name + ", rank " + std::to_string(rank) + ": ";
  if (c.trains) {
    if (!got.status.ok()) return who + "failed: " + got.status.ToString();
    if (ref == nullptr || !ref->status.ok()) return who + "the reference failed";
    if (got.params != ref->params) return who + "params differ from the reference's";
    return "";
  }
  if (got.status.ok()) return who + "finished; a failure was expected";
  if (got.seconds >= 2.5) {
    return who + "failed after " + std::to_string(got.seconds) + " s: " + got.status.ToString();
  }
  for (const std::string& m : c.message) {
    if (got.status.message().find(m) == std::string::npos) {
      return who + "the error lacks '" + m + "': " + got.status.ToString();
    }
  }
  return "";
}

std::vector<DivergentOutcome> RunDivergentOnThreads(const Config& config, int world,
                                                    const DivergentPlan& plan) {
  auto comms = MakeThreadCommunicators(world);
  std::vector<DivergentOutcome> out(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] { out[r] = RunDivergent(config, r, comms[r].get(), plan); });
  }
  for (auto& t : threads) t.join();
  return out;
}

}  // namespace testing
}  // namespace zero

// A small MLP trained through the C++ engine, and the same training in plain
// double precision: the reference that multi-rank tests compare against.
//
// Model: y = W2 tanh(W1 (x + e) + b1) + b2, loss = mean over samples of
// 0.5 |y - t|^2. `e` is a frozen param. Each step draws a fresh global batch;
// rank r of W takes rows [r*B/W, (r+1)*B/W) of each micro-batch.
#ifndef ZERO_TESTS_TESTING_MLP_HARNESS_H_
#define ZERO_TESTS_TESTING_MLP_HARNESS_H_

#include <cmath>
#include <functional>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/ckpt/shard_view.h"
#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/engine/engine.h"

namespace zero {
namespace testing {

struct MlpSpec {
  int in = 8;
  int hidden = 25;  // odd sizes make params straddle shards
  int out = 3;
  int global_batch = 12;  // divisible by 1, 2, 3 and 4
  int steps = 10;
  bool frozen_embedding = true;
  // Inject +inf into one gradient element on rank `inf_rank` at this step
  // (-1: never). Every rank (and the reference) must skip that step.
  int inf_step = -1;
  int inf_rank = 0;
  bool regather_for_backward = true;  // stage 3 gathers twice per step
  // Checkpoints. Save to ckpt_dir/save_tag after `save_after` steps (-1:
  // never) and to ckpt_dir/final_tag at the end (empty: never).
  std::string ckpt_dir;
  int save_after = -1;
  std::string save_tag = "mid";
  std::string final_tag;
  ckpt::SaveOptions save_options;  // of the save after `save_after` steps
  // Resume: load resume_dir/resume_tag (empty: latest) after finalize and
  // train only the steps that remain.
  std::string resume_dir, resume_tag;
  ckpt::LoadOptions load_options;
  // Where the engine keeps its state (null: the default CPU device).
  std::function<std::unique_ptr<Device>()> make_device;
  // How the caller moves bytes to and from the pointers gather and
  // grad_buffer hand out (null: the engine device's Copy, ordered with its
  // work). The stand-in device's CallerCopy is not ordered with the device's
  // queue, like a copy on the framework's own stream.
  std::function<void(Device* d, void* dst, const void* src, size_t bytes)> caller_copy;
  // Called before each step's first micro-step (index -1) and after each
  // GradReady (index: the param's) for the killed-rank and soak tests, which
  // save, load, export or kill the process there. An error stops training.
  std::function<absl::Status(Engine* e, int step, int index)> hook;
  // Called with the engine and the error when training fails (before the
  // engine is destroyed): the fault tests check that it refuses more calls.
  std::function<void(Engine* e, const absl::Status& error)> after_failure;
  bool record_steps = true;  // keep every step's StepInfo (a soak does not)
  // TrainMlpReference only: from step `moments_format_switch` on (-1:
  // never) the moments are stored as `moments_format_after`, as when a
  // checkpoint saved after that many steps is loaded into an engine of that
  // format (the loaded moments are rounded to it at the load).
  int moments_format_switch = -1;
  MomentsFormat moments_format_after = MomentsFormat::kF32;
};

struct MlpResult {
  std::vector<std::vector<float>> params;  // master fp32, registration order
  std::vector<std::string> names;
  std::vector<StepInfo> steps;
  EngineStats stats;
};

// The config the MLP tests start from: lr 1e-2, AdamW with decay 0.01, small
// buckets (several reductions per step, params split across them), fp16
// scale 2^8 (gradients * 256 stay finite), small stage-3 persistence.
Config SmallMlpConfig(int stage, DType dtype);

// The step scenarios the boundary tests share, on a SmallMlpConfig:
// "gas2_clip" (accumulation 2, clipping 0.05: small enough to clip) and
// "sgd" (SGD, momentum 0.9), "lion" (Lion, lr 1e-3, betas (0.9, 0.99),
// decay 0.1) and "adagrad" (Adagrad, lr 1e-3, eps 1e-10); any other mode leaves
// `config` as it is.
void ApplyStepMode(const std::string& mode, Config* config);

// The MLP's params registered on a new, finalized engine. Collective.
absl::StatusOr<std::unique_ptr<Engine>> MakeMlpEngine(const Config& config,
                                                      Communicator* comm,
                                                      const MlpSpec& spec);

// Trains through an engine over `comm`. Collective: every rank calls it.
absl::StatusOr<MlpResult> TrainMlp(const Config& config, Communicator* comm,
                                   const MlpSpec& spec);

// The same training on one rank, in double, Adam/AdamW/SGD/Lion/Adagrad
// written out here
// (independent of kernels/), with DeepSpeed's clipping and skip semantics.
MlpResult TrainMlpReference(const Config& config, const MlpSpec& spec);

// The mean loss of a result's params over `batches` fixed evaluation
// batches (drawn apart from the training ones), in double.
double MlpEvalLoss(const MlpSpec& spec, const MlpResult& r, int batches = 8);

// max |a - b| / max |b| over all params.
double MaxRelDiff(const MlpResult& a, const MlpResult& b);

// Runs fn(rank, comm) on `world` threads over a thread communicator group.
void RunThreads(int world,
                const std::function<void(int, Communicator*)>& fn);

}  // namespace testing
}  // namespace zero

#endif  // ZERO_TESTS_TESTING_MLP_HARNESS_H_

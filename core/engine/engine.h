// The engine: owns where every byte of model state lives and when it moves
// (DESIGN.md, "The engine's life"). The caller owns the model's math; it asks
// for params (gather/release), hands in gradients (grad_buffer/grad_ready)
// and calls Step() once per micro-step.
#ifndef ZERO_CORE_ENGINE_ENGINE_H_
#define ZERO_CORE_ENGINE_ENGINE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/ckpt/shard_view.h"
#include "core/comm/comm_stream.h"
#include "core/comm/communicator.h"
#include "core/config/config.h"
#include "core/device/device.h"
#include "core/offload/nvme_tier.h"
#include "core/offload/param_file.h"
#include "core/engine/grad_bucket.h"
#include "core/optim/loss_scaler.h"
#include "core/optim/lr_schedule.h"
#include "core/partition/layout.h"
#include "kernels/adam_math.h"

namespace zero {

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  const float* init = nullptr;  // numel values or null for zeros; copied
  bool trainable = true;
};

struct StepInfo {
  bool boundary = false;
  bool skipped = false;
  int64_t global_step = 0;
  int64_t skipped_steps = 0;
  double loss_scale = 1.0;
  double grad_norm = 0.0;
  double lr = 0.0;
};

struct EngineStats {
  int rank = 0, world_size = 1, stage = 0;
  int64_t trainable_numel = 0, padded_numel = 0;
  int64_t master_bytes = 0, optimizer_bytes = 0, grad_bytes = 0;
  int64_t param_bytes = 0, frozen_bytes = 0, buffer_bytes = 0;
  int64_t live_gathered_bytes = 0, live_gathered_high_water = 0;
  int64_t sent[static_cast<int>(CollectiveKind::kCount)] = {};
  int64_t sent_bytes[static_cast<int>(CollectiveKind::kCount)] = {};
  int64_t collective_calls = 0;
  int64_t global_step = 0, skipped_steps = 0, micro_step = 0;
  // NVMe optimizer offload (zero when off). master_bytes and optimizer_bytes
  // above count host-resident bytes only; with NVMe that is the staging
  // buffers (optimizer_bytes), bounded by buffer_count sub-groups.
  int64_t nvme_bytes = 0;                  // state files on disk (both slots)
  int64_t nvme_read_bytes = 0, nvme_write_bytes = 0;  // cumulative
  int nvme_direct_io = 0, nvme_uring = 0;  // 1: O_DIRECT / io_uring in use
  std::string offload_note;                // fallbacks taken (O_DIRECT, io_uring)
};

class Engine {
 public:
  // `comm` is not owned and must outlive the engine; the engine talks over a
  // duplicate of it, so the caller may keep using `comm` meanwhile.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const Config& config,
                                                        Communicator* comm);
  ~Engine();

  // Before finalize: where model state lives (default: the CPU device, or
  // the communicator's GPU for a device communicator).
  absl::Status SetDevice(std::unique_ptr<Device> device);
  Device* device() const { return device_.get(); }

  absl::StatusOr<int> RegisterParam(const ParamSpec& spec);
  absl::Status Finalize();

  int num_params() const { return static_cast<int>(params_.size()); }
  absl::StatusOr<int> FindParam(const std::string& name) const;
  absl::StatusOr<int64_t> ParamNumel(int id) const;
  // What was registered for param `id` (init values are not kept).
  absl::StatusOr<ParamSpec> ParamInfo(int id) const;
  // The engine's own copy of the name (valid for its life); id must be valid.
  const char* ParamName(int id) const { return params_[id].name.c_str(); }

  absl::StatusOr<void*> Gather(int id);
  absl::Status Release(int id);
  absl::StatusOr<void*> GradBuffer(int id);
  absl::Status GradReady(int id);
  absl::StatusOr<StepInfo> Step();
  absl::Status ReadMaster(int id, float* out);
  void ReportSamples(int64_t n) { samples_ += n; }

  // This rank's owned fp32 optimizer state of group g, elements [begin,
  // begin+len) of its owned range; array 0 master, 1 m (SGD: momentum), 2 v.
  // Works wherever the state lives (memory or NVMe): for checkpoints.
  absl::Status ReadOwnedState(int g, int array, int64_t begin, int64_t len, float* out);
  absl::Status WriteOwnedState(int g, int array, int64_t begin, int64_t len, const float* in);

  double loss_scale() const { return scaler_.scale(); }
  EngineStats Stats() const;
  const Config& config() const { return config_; }
  const Layout& layout() const { return layout_; }

  // COLLECTIVE. Checkpoints (DESIGN.md, Checkpoints; core/ckpt/). Save only
  // at an optimizer boundary (not mid-accumulation). Load after Finalize
  // with every param released; `tag` empty loads DIR/latest. World size and
  // stage may differ from the saving run.
  absl::Status Save(const std::string& dir, const std::string& tag,
                    const ckpt::SaveOptions& options = {});
  absl::Status Load(const std::string& dir, const std::string& tag,
                    const ckpt::LoadOptions& options = {});

 private:
  struct Param {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
    int64_t numel;
    bool trainable;
    int li = -1;               // index in layout_.params() (trainable)
    std::vector<float> init;   // until Finalize
    DeviceBuffer whole;        // frozen, or stage-3 persistent working copy
    bool persistent = false;   // stage 3: kept whole on every rank
    int gather_refs = 0;
    bool reduced_at_boundary = false;  // stage 0 bookkeeping
  };
  struct GroupState {
    int64_t owned_begin = 0, owned_len = 0;  // within the group
    DeviceBuffer master, m, v;  // fp32, owned range
    DeviceBuffer working;       // stage <= 2: padded group; 3: own shard
    DeviceBuffer grads;         // stage <= 1: padded group; 2-3: own shard
  };
  struct Live {  // a stage-3 gathered param
    DeviceBuffer buf;
    int refs = 0;
    CommStream::Handle pending;  // prefetch in flight
  };

  Engine(const Config& config, std::unique_ptr<Communicator> comm);

  absl::Status Check(bool finalized, const char* call) const;
  absl::Status CheckId(int id, const char* call) const;
  absl::Status Fail(absl::Status s);  // records the first failure
  absl::Status VerifyRanksAgree();
  absl::Status BindCommToDevice();
  absl::Status AllocateState();
  void ResolveAuto();

  // Gradient buckets.
  absl::Status FlushBucket(int b, bool boundary);
  absl::Status ReduceBucket(const std::vector<int>& ids, const void* data,
                            const std::vector<int64_t>& offsets, bool boundary);
  absl::Status ReduceLeftoversStage0();
  absl::Status ReduceScatterFlatStage1(const std::vector<float*>& g32);

  // Stage 3.
  absl::Status GatherInto(int li, void* dst);
  absl::Status EnsureBudget(int64_t need, int id);
  void Prefetch(int id);
  void FreeLive(int id);

  absl::StatusOr<StepInfo> Boundary();
  absl::Status PublishWorkingCopy();
  absl::Status OffloadedUpdate(const std::vector<float*>& g32,
                               const math::AdamScalars& adam,
                               const math::SgdScalars& sgd);
  void MaybePrint(const StepInfo& info);
  void* WorkingPtr(int li) const;  // stage <= 2
  // NVMe optimizer offload: files created and initial state written.
  absl::Status CreateNvmeTier();
  // offload_param.device "nvme" (stage 3): the own working shard on disk.
  bool ParamsOnNvme() const;
  absl::Status CreateParamFiles();
  // Checkpoints with NVMe optimizer offload: master/m/v read into host
  // buffers for a save or load, written back (load) and released after.
  absl::Status MaterializeOffloaded();
  absl::Status SpillOffloaded(bool write_back);

  // Checkpoints (engine.cc, end).
  absl::Status CheckpointPrecondition(const char* call);
  ckpt::ShardView MakeShardView();
  absl::Status RebuildWorkingFromMaster();

  Config config_;
  std::unique_ptr<Communicator> comm_;  // data: buffers in device memory
  std::unique_ptr<Device> device_;
  // Host memory for ZeRO-Offload (optimizer states on the CPU).
  std::unique_ptr<Device> host_ = MakeCpuDevice();
  bool OptimizerOnHost() const {
    return config_.offload_optimizer.device == OffloadDevice::kCpu && !device_->host_accessible();
  }
  // Scalars and checks in host memory: comm_ itself for host communicators,
  // a device-staging view of it for device ones.
  std::unique_ptr<Communicator> ctrl_owned_;
  Communicator* ctrl_ = nullptr;
  std::unique_ptr<CommStream> stream_;
  const int rank_, world_;
  bool finalized_ = false;
  absl::Status broken_;  // first collective failure; poisons the engine

  std::vector<Param> params_;
  std::unordered_map<std::string, int> by_name_;
  Layout layout_;
  std::vector<GroupState> groups_;
  // Set when offload_optimizer.device is "nvme": master/m/v live there and
  // GroupState's master/m/v stay empty.
  std::unique_ptr<offload::NvmeTier> nvme_;
  // One per group when offload_param.device is "nvme" (stage 3); then
  // GroupState::working is empty.
  std::vector<std::unique_ptr<offload::ParamFile>> param_files_;
  std::vector<int> trainable_ids_;  // layout index -> param id

  GradBuckets buckets_;
  std::vector<DeviceBuffer> g32_;  // fp32 owned gradients, when not in place
  DeviceBuffer pack_, recv_;  // fp32 staging for reductions
  int64_t pack_cap_ = 0;

  std::unordered_map<int, Live> live_;
  int64_t live_bytes_ = 0, live_high_water_ = 0;
  std::vector<int> trace_;       // stage-3 gather order seen in step 1
  bool trace_done_ = false;
  size_t trace_pos_ = 0;

  LossScaler scaler_;
  LrSchedule schedule_;
  int64_t micro_step_ = 0;       // micro-steps since the last boundary
  int64_t total_micro_steps_ = 0;
  int64_t global_step_ = 0, skipped_steps_ = 0;
  int64_t samples_ = 0, samples_at_print_ = 0;
  std::chrono::steady_clock::time_point last_print_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_ENGINE_H_

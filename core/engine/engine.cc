#include "core/engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <future>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/ckpt/agree.h"
#include "core/ckpt/checkpoint_reader.h"
#include "core/ckpt/checkpoint_writer.h"
#include "core/comm/staging_communicator.h"
#include "core/common/errors.h"
#include "core/common/status_macros.h"
#include "kernels/adam_math.h"
#include "kernels/norm_math.h"

namespace zero {
namespace {

constexpr int kMaxDims = 8;

std::string ShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const Config& config,
                                                       Communicator* comm) {
  if (comm == nullptr) return absl::InvalidArgumentError("engine: comm is null");
  Config c = config;
  RETURN_IF_ERROR(c.Resolve(comm->world_size()));
  comm->set_timeout_seconds(c.comm_timeout_seconds);
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> own, comm->Duplicate());
  own->set_timeout_seconds(c.comm_timeout_seconds);
  return std::unique_ptr<Engine>(new Engine(c, std::move(own)));
}

Engine::Engine(const Config& config, std::unique_ptr<Communicator> comm)
    : config_(config),
      comm_(std::move(comm)),
      device_(MakeCpuDevice()),
      ctrl_(comm_.get()),
      stream_(std::make_unique<CommStream>(config.OverlapComm())),
      rank_(comm_->rank()),
      world_(comm_->world_size()),
      scaler_(config.dtype == DType::kF16 && config.loss_scale == 0.0,
              config.loss_scale, config.initial_scale_power,
              config.loss_scale_window, config.hysteresis,
              config.consecutive_hysteresis, config.min_loss_scale),
      schedule_(config),
      last_print_(std::chrono::steady_clock::now()) {}

Engine::~Engine() {
  // Finish in-flight reductions before their buffers go away.
  if (stream_) (void)stream_->Drain();
  live_.clear();
}

absl::Status Engine::Fail(absl::Status s) {
  if (!s.ok() && broken_.ok()) broken_ = s;
  return s;
}

absl::Status Engine::Check(bool finalized, const char* call) const {
  if (!broken_.ok()) {
    return absl::Status(broken_.code(),
                        absl::StrCat(call, ": the engine failed earlier and is "
                                           "unusable: ", broken_.message()));
  }
  if (finalized != finalized_) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, finalized ? ": call finalize first" : ": not allowed after finalize"));
  }
  return absl::OkStatus();
}

absl::Status Engine::CheckId(int id, const char* call) const {
  if (id < 0 || id >= num_params()) {
    return absl::InvalidArgumentError(absl::StrCat(
        call, ": no param with id ", id, " (", num_params(), " registered)"));
  }
  return absl::OkStatus();
}

absl::Status Engine::SetDevice(std::unique_ptr<Device> device) {
  RETURN_IF_ERROR(Check(false, "set_device"));
  if (device == nullptr) return absl::InvalidArgumentError("set_device: null device");
  if (!params_.empty()) {
    return absl::FailedPreconditionError(
        "set_device: choose the device before registering params");
  }
  (void)stream_->Drain();
  device_ = std::move(device);
  return absl::OkStatus();
}

// Pairs the communicator with the device: a host communicator over device
// memory stages through the host; a device communicator needs device memory
// and gets a device-staging view for the engine's host-side scalars.
absl::Status Engine::BindCommToDevice() {
  if (comm_->device_memory()) {
    if (device_->host_accessible()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "finalize: the ", comm_->backend_name(), " communicator moves GPU "
          "memory but the engine's device is ", device_->name()));
    }
    ctrl_owned_ = MakeDeviceControlCommunicator(comm_.get(), device_.get());
    ctrl_ = ctrl_owned_.get();
  } else if (!device_->host_accessible()) {
    comm_ = MakeStagingCommunicator(std::move(comm_), device_.get());
    ctrl_ = comm_.get();
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Engine::RegisterParam(const ParamSpec& spec) {
  RETURN_IF_ERROR(Check(false, "register_param"));
  if (spec.name.empty()) {
    return absl::InvalidArgumentError("register_param: empty name");
  }
  if (by_name_.count(spec.name)) {
    return absl::InvalidArgumentError(
        absl::StrCat("register_param '", spec.name, "': name already registered"));
  }
  if (spec.shape.size() > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register_param '", spec.name, "': ndim ", spec.shape.size(), " > ", kMaxDims));
  }
  int64_t numel = 1;
  for (int64_t d : spec.shape) {
    if (d < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "register_param '", spec.name, "': shape ", ShapeText(spec.shape),
          " has a dimension < 1"));
    }
    numel *= d;
  }
  if (spec.trainable && spec.dtype != config_.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "register_param '", spec.name, "': dtype ", DTypeName(spec.dtype),
        " but trainable params must use the engine's working dtype ",
        DTypeName(config_.dtype), " (fp16.enabled / bf16.enabled)"));
  }
  Param p;
  p.name = spec.name;
  p.shape = spec.shape;
  p.dtype = spec.dtype;
  p.numel = numel;
  p.trainable = spec.trainable;
  if (spec.init) {
    p.init.assign(spec.init, spec.init + numel);
  } else {
    p.init.assign(numel, 0.0f);
  }
  params_.push_back(std::move(p));
  by_name_[spec.name] = num_params() - 1;
  return num_params() - 1;
}

absl::StatusOr<int> Engine::FindParam(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return absl::NotFoundError(absl::StrCat("no param named '", name, "'"));
  }
  return it->second;
}

absl::StatusOr<int64_t> Engine::ParamNumel(int id) const {
  RETURN_IF_ERROR(CheckId(id, "param_numel"));
  return params_[id].numel;
}

absl::StatusOr<ParamSpec> Engine::ParamInfo(int id) const {
  RETURN_IF_ERROR(CheckId(id, "param_info"));
  const Param& p = params_[id];
  ParamSpec s;
  s.name = p.name;
  s.shape = p.shape;
  s.dtype = p.dtype;
  s.trainable = p.trainable;
  return s;
}

// Every rank must have registered the same params: rank 0's description is
// broadcast, each rank finds its first difference, and a MAX all-reduce tells
// every rank the earliest difference anywhere, so all fail alike.
absl::Status Engine::VerifyRanksAgree() {
  if (world_ == 1) return absl::OkStatus();
  std::vector<std::string> mine;
  for (const Param& p : params_) {
    mine.push_back(absl::StrCat(p.name, " ", ShapeText(p.shape), " ",
                                DTypeName(p.dtype),
                                p.trainable ? " trainable" : " frozen"));
  }
  std::string text = absl::StrJoin(mine, "\n");
  auto h = stream_->Submit([&]() -> absl::Status {
    ScopedCountingKind k(ctrl_, CollectiveKind::kControl);
    int64_t len = static_cast<int64_t>(text.size());
    RETURN_IF_ERROR(ctrl_->Broadcast(&len, sizeof(len), 0));
    std::string root(len, '\0');
    if (rank_ == 0) root = text;
    if (len > 0) RETURN_IF_ERROR(ctrl_->Broadcast(&root[0], len, 0));
    std::vector<std::string> theirs =
        root.empty() ? std::vector<std::string>{}
                     : absl::StrSplit(root, '\n');
    size_t n = std::min(theirs.size(), mine.size());
    size_t first = std::numeric_limits<int32_t>::max();
    for (size_t i = 0; i < n; ++i) {
      if (theirs[i] != mine[i]) {
        first = i;
        break;
      }
    }
    if (first == static_cast<size_t>(std::numeric_limits<int32_t>::max()) &&
        theirs.size() != mine.size()) {
      first = n;
    }
    double v = -static_cast<double>(first);
    RETURN_IF_ERROR(ctrl_->AllReduce(&v, 1, ReduceOp::kMax));
    size_t earliest = static_cast<size_t>(-v);
    if (earliest == static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
      return absl::OkStatus();
    }
    auto at = [](const std::vector<std::string>& l, size_t i) {
      return i < l.size() ? absl::StrCat("'", l[i], "'") : std::string("nothing");
    };
    return MismatchError(
        absl::StrCat("finalize: ranks registered different params; first "
                     "difference at param #", earliest, ": rank 0 has ",
                     at(theirs, earliest), ", rank ", rank_, " has ",
                     at(mine, earliest)));
  });
  absl::Status s = stream_->Wait(h);
  (void)stream_->Drain();
  return s;
}

void Engine::ResolveAuto() {
  // As the HF integration resolves "auto": hidden^2 from the largest 2-D
  // trainable param.
  int64_t hidden2 = 0;
  for (const Param& p : params_) {
    if (p.trainable && p.shape.size() == 2) hidden2 = std::max(hidden2, p.numel);
  }
  const int64_t hidden = static_cast<int64_t>(std::sqrt(static_cast<double>(hidden2)));
  if (config_.reduce_bucket_size_auto) config_.reduce_bucket_size = std::max<int64_t>(hidden2, 1);
  if (config_.stage3_prefetch_bucket_size_auto) {
    config_.stage3_prefetch_bucket_size = static_cast<int64_t>(0.9 * hidden2);
  }
  if (config_.stage3_param_persistence_threshold_auto) {
    config_.stage3_param_persistence_threshold = 10 * hidden;
  }
}

absl::Status Engine::AllocateState() {
  Device* d = device_.get();
  const DType t = config_.dtype;
  const size_t es = DTypeSize(t);
  const int stage = config_.stage;
  const bool adam = config_.optimizer != OptimizerType::kSgd;
  const bool momentum = !adam && config_.momentum != 0.0;
  groups_.resize(layout_.groups().size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const LayoutGroup& lg = layout_.groups()[g];
    GroupState& gs = groups_[g];
    gs.owned_begin = stage == 0 ? 0 : lg.shard * rank_;
    gs.owned_len = stage == 0 ? lg.padded : lg.shard;
    if (config_.offload_optimizer.device != OffloadDevice::kNvme) {
      // ZeRO-Offload: with "cpu" and a GPU device, master and moments live in
      // host memory and the CPU updates them.
      Device* sd = OptimizerOnHost() ? host_.get() : d;
      ASSIGN_OR_RETURN(gs.master, DeviceBuffer::Make(sd, gs.owned_len * 4));
      if (adam || momentum) {
        ASSIGN_OR_RETURN(gs.m, DeviceBuffer::Make(sd, gs.owned_len * 4));
      }
      if (adam) {
        ASSIGN_OR_RETURN(gs.v, DeviceBuffer::Make(sd, gs.owned_len * 4));
      }
    }
    // Stage 3 with offload_param "nvme": the own shard lives in param_files_.
    const int64_t work_len = stage == 3 ? (ParamsOnNvme() ? 0 : lg.shard) : lg.padded;
    ASSIGN_OR_RETURN(gs.working, DeviceBuffer::Make(d, work_len * es));
    const int64_t grad_len = stage <= 1 ? lg.padded : lg.shard;
    ASSIGN_OR_RETURN(gs.grads, DeviceBuffer::Make(d, grad_len * es));
  }
  if (ParamsOnNvme()) RETURN_IF_ERROR(CreateParamFiles());
  // Initial values: master from the fp32 init, working copy cast from it.
  for (size_t li = 0; li < layout_.params().size(); ++li) {
    Param& p = params_[trainable_ids_[li]];
    const ParamPlace& pl = layout_.place(static_cast<int>(li));
    GroupState& gs = groups_[pl.group];
    // The part of [offset, offset+numel) that this rank owns.
    const int64_t lo = std::max(pl.offset, gs.owned_begin);
    const int64_t hi = std::min(pl.offset + pl.numel, gs.owned_begin + gs.owned_len);
    if (hi > lo && gs.master.data() != nullptr) {  // null: state on NVMe
      (OptimizerOnHost() ? host_.get() : d)
          ->UploadF32(p.init.data() + (lo - pl.offset),
                      gs.master.data<float>() + (lo - gs.owned_begin), DType::kF32, hi - lo);
    }
    if (stage <= 2) {
      d->UploadF32(p.init.data(), gs.working.data<char>() + pl.offset * es, t, p.numel);
    } else if (hi > lo && ParamsOnNvme()) {
      std::vector<char> cast((hi - lo) * es);
      d->UploadF32(p.init.data() + (lo - pl.offset), cast.data(), t, hi - lo);
      RETURN_IF_ERROR(param_files_[pl.group]->WriteCommitted(
          (lo - gs.owned_begin) * es, (hi - lo) * es, cast.data()));
    } else if (hi > lo) {
      d->UploadF32(p.init.data() + (lo - pl.offset),
                   gs.working.data<char>() + (lo - gs.owned_begin) * es, t, hi - lo);
    }
    if (stage == 3 && p.numel < config_.stage3_param_persistence_threshold) {
      p.persistent = true;
      ASSIGN_OR_RETURN(p.whole, DeviceBuffer::Make(d, p.numel * es));
      d->UploadF32(p.init.data(), p.whole.data(), t, p.numel);
    }
  }
  if (config_.offload_optimizer.device == OffloadDevice::kNvme) RETURN_IF_ERROR(CreateNvmeTier());
  for (Param& p : params_) {
    if (!p.trainable) {
      ASSIGN_OR_RETURN(p.whole, DeviceBuffer::Make(d, p.numel * DTypeSize(p.dtype)));
      d->UploadF32(p.init.data(), p.whole.data(), p.dtype, p.numel);
    }
    std::vector<float>().swap(p.init);
  }
  // Buckets hold reduce_bucket_size elements, but never more than the model
  // and never less than its largest param.
  int64_t largest = 1;
  for (const LayoutParam& lp : layout_.params()) largest = std::max(largest, lp.numel);
  int64_t cap = std::min(config_.reduce_bucket_size, std::max<int64_t>(layout_.total_padded(), 1));
  cap = std::max(cap, largest);
  RETURN_IF_ERROR(buckets_.Init(d, t, cap));
  pack_cap_ = cap;
  ASSIGN_OR_RETURN(pack_, DeviceBuffer::Make(d, pack_cap_ * 4));
  ASSIGN_OR_RETURN(recv_, DeviceBuffer::Make(d, pack_cap_ * 4));
  return absl::OkStatus();
}

// Master weights and moments of every group go to files under nvme_path,
// streamed in sub_group_size pieces (core/offload/nvme_tier.h). Called while
// the params' fp32 init values are still at hand.
absl::Status Engine::CreateNvmeTier() {
  const OffloadConfig& oc = config_.offload_optimizer;
  // The optimizer runs on the host over the staging buffers and writes the
  // working copy in place: the CPU device only, for now.
  if (device_->name() != "cpu") {
    return absl::UnimplementedError(absl::StrCat(
        "zero_optimization.offload_optimizer.device: \"nvme\" needs the cpu "
        "device in this version, not ", device_->name()));
  }
  const bool adam = config_.optimizer != OptimizerType::kSgd;
  offload::NvmeTierOptions o;
  o.dir = oc.nvme_path;
  o.tag = absl::StrFormat("zero_optim_r%d_p%d_%x", rank_, static_cast<int>(::getpid()),
                          reinterpret_cast<uintptr_t>(this));
  o.num_arrays = adam ? 3 : (config_.momentum != 0.0 ? 2 : 1);
  o.buffer_count = oc.buffer_count;
  o.chunk_elems = config_.sub_group_size;
  o.aio.queue_depth = config_.aio.queue_depth;
  o.aio.block_size = config_.aio.block_size;
  std::vector<int64_t> lens;
  for (const GroupState& gs : groups_) lens.push_back(gs.owned_len);
  ASSIGN_OR_RETURN(nvme_, offload::NvmeTier::Create(o, lens));
  const offload::NvmeTierStats st = nvme_->stats();
  if (!st.note.empty()) {
    std::fprintf(stderr, "[zero] rank %d: nvme offload under '%s': %s\n", rank_,
                 oc.nvme_path.c_str(), st.note.c_str());
  }
  // Initial master values from the params' init; moments start at zero.
  return nvme_->Initialize([&](const offload::NvmeTier::Chunk& c, float* const* arr) {
    const GroupState& gs = groups_[c.group];
    const int64_t a = gs.owned_begin + c.begin, b = a + c.len;  // group coordinates
    for (int li : layout_.groups()[c.group].members) {
      const ParamPlace& pl = layout_.place(li);
      const int64_t lo = std::max(pl.offset, a), hi = std::min(pl.offset + pl.numel, b);
      if (hi <= lo) continue;
      const Param& p = params_[trainable_ids_[li]];
      std::memcpy(arr[0] + (lo - a), p.init.data() + (lo - pl.offset), (hi - lo) * 4);
    }
    return absl::OkStatus();
  });
}

bool Engine::ParamsOnNvme() const {
  return config_.stage == 3 && config_.offload_param.device == OffloadDevice::kNvme;
}

// Stage 3, offload_param "nvme": each group's own shard of the working copy
// in a double-slot file (core/offload/param_file.h).
absl::Status Engine::CreateParamFiles() {
  if (device_->name() != "cpu") {
    return absl::UnimplementedError(absl::StrCat(
        "zero_optimization.offload_param.device: \"nvme\" needs the cpu "
        "device in this version, not ", device_->name()));
  }
  const size_t es = DTypeSize(config_.dtype);
  for (size_t g = 0; g < groups_.size(); ++g) {
    ASSIGN_OR_RETURN(
        auto f, offload::ParamFile::Create(
                    config_.offload_param.nvme_path,
                    absl::StrFormat("zero_param_r%d_p%d_%x_g%d.swp", rank_,
                                    static_cast<int>(::getpid()),
                                    reinterpret_cast<uintptr_t>(this), static_cast<int>(g)),
                    layout_.groups()[g].shard * static_cast<int64_t>(es)));
    param_files_.push_back(std::move(f));
  }
  return absl::OkStatus();
}

absl::Status Engine::ReadOwnedState(int g, int array, int64_t begin, int64_t len,
                                    float* out) {
  RETURN_IF_ERROR(Check(true, "read_owned_state"));
  if (g < 0 || g >= static_cast<int>(groups_.size()) || begin < 0 || len < 0 ||
      begin + len > groups_[g].owned_len || array < 0 || array > 2) {
    return absl::InvalidArgumentError("read_owned_state: range out of bounds");
  }
  if (nvme_) return nvme_->ReadRange(g, array, begin, len, out);
  const DeviceBuffer& b = array == 0 ? groups_[g].master : array == 1 ? groups_[g].m : groups_[g].v;
  if (b.data() == nullptr) return absl::InvalidArgumentError("read_owned_state: no such state");
  device_->DownloadF32(b.data<float>() + begin, DType::kF32, out, len);
  return absl::OkStatus();
}

absl::Status Engine::WriteOwnedState(int g, int array, int64_t begin, int64_t len,
                                     const float* in) {
  RETURN_IF_ERROR(Check(true, "write_owned_state"));
  if (g < 0 || g >= static_cast<int>(groups_.size()) || begin < 0 || len < 0 ||
      begin + len > groups_[g].owned_len || array < 0 || array > 2) {
    return absl::InvalidArgumentError("write_owned_state: range out of bounds");
  }
  if (nvme_) return nvme_->WriteRange(g, array, begin, len, in);
  DeviceBuffer& b = array == 0 ? groups_[g].master : array == 1 ? groups_[g].m : groups_[g].v;
  if (b.data() == nullptr) return absl::InvalidArgumentError("write_owned_state: no such state");
  device_->UploadF32(in, b.data<float>() + begin, DType::kF32, len);
  return absl::OkStatus();
}

absl::Status Engine::Finalize() {
  RETURN_IF_ERROR(Check(false, "finalize"));
  RETURN_IF_ERROR(BindCommToDevice());
  RETURN_IF_ERROR(Fail(VerifyRanksAgree()));
  ResolveAuto();
  std::vector<LayoutParam> lps;
  for (int id = 0; id < num_params(); ++id) {
    Param& p = params_[id];
    if (!p.trainable) continue;
    p.li = static_cast<int>(lps.size());
    lps.push_back({id, p.numel, p.dtype});
    trainable_ids_.push_back(id);
  }
  layout_ = Layout(lps, world_, config_.sub_group_size);
  RETURN_IF_ERROR(AllocateState());
  finalized_ = true;
  return absl::OkStatus();
}

void* Engine::WorkingPtr(int li) const {
  const ParamPlace& pl = layout_.place(li);
  return groups_[pl.group].working.data<char>() + pl.offset * DTypeSize(config_.dtype);
}

// ---- Stage 3: gather on demand, prefetch, live budget ---------------------

absl::Status Engine::GatherInto(int li, void* dst) {
  const ParamPlace& pl = layout_.place(li);
  const Slice s = layout_.SliceOn(li, rank_);
  const size_t es = DTypeSize(config_.dtype);
  const char* send = groups_[pl.group].working.data<char>() + s.shard_offset * es;
  std::vector<char> mine;  // offload_param "nvme": this rank's slice, from its file
  if (!param_files_.empty()) {
    mine.resize(std::max<size_t>(1, s.numel * es));
    RETURN_IF_ERROR(param_files_[pl.group]->Read(s.shard_offset * es, s.numel * es, mine.data()));
    send = mine.data();
  }
  return comm_->AllGatherV(send, dst, layout_.Counts(li), config_.dtype);
}

void Engine::FreeLive(int id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  if (it->second.pending) (void)stream_->Wait(it->second.pending);
  live_bytes_ -= static_cast<int64_t>(params_[id].numel * DTypeSize(config_.dtype));
  live_.erase(it);
}

absl::Status Engine::EnsureBudget(int64_t need, int id) {
  const int64_t es = DTypeSize(config_.dtype);
  const int64_t budget = config_.stage3_max_live_parameters * es;
  while (live_bytes_ + need > budget) {
    // Evict a prefetched param nobody holds yet (deterministic: lowest id).
    int victim = -1;
    for (const auto& [q, l] : live_) {
      if (l.refs == 0 && (victim < 0 || q < victim)) victim = q;
    }
    if (victim < 0) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "gather '", params_[id].name, "': stage3_max_live_parameters = ",
          config_.stage3_max_live_parameters, " elements cannot hold its ",
          need / es, " elements while ", live_bytes_ / es,
          " gathered elements are in use; raise the budget or release params "
          "sooner"));
    }
    FreeLive(victim);
  }
  return absl::OkStatus();
}

void Engine::Prefetch(int id) {
  if (!stream_->asynchronous() || !trace_done_ ||
      config_.stage3_prefetch_bucket_size <= 0) {
    return;
  }
  auto pos = std::find(trace_.begin() + trace_pos_, trace_.end(), id);
  if (pos == trace_.end()) return;
  trace_pos_ = static_cast<size_t>(pos - trace_.begin()) + 1;
  const int64_t es = DTypeSize(config_.dtype);
  const int64_t budget = config_.stage3_max_live_parameters * es;
  int64_t left = config_.stage3_prefetch_bucket_size;
  for (size_t j = trace_pos_; j < trace_.size() && left > 0; ++j) {
    const int q = trace_[j];
    Param& p = params_[q];
    if (p.persistent || live_.count(q)) continue;
    if (p.numel > left || live_bytes_ + p.numel * es > budget) break;
    auto buf = DeviceBuffer::Make(device_.get(), p.numel * es);
    if (!buf.ok()) break;
    Live l;
    l.buf = std::move(*buf);
    void* dst = l.buf.data();
    const int li = p.li;
    l.pending = stream_->Submit([this, li, dst] { return GatherInto(li, dst); });
    live_[q] = std::move(l);
    live_bytes_ += p.numel * es;
    live_high_water_ = std::max(live_high_water_, live_bytes_);
    left -= p.numel;
  }
}

absl::StatusOr<void*> Engine::Gather(int id) {
  RETURN_IF_ERROR(Check(true, "gather"));
  RETURN_IF_ERROR(CheckId(id, "gather"));
  Param& p = params_[id];
  if (!p.trainable || p.persistent) {
    ++p.gather_refs;
    return p.whole.data();
  }
  if (config_.stage <= 2) {
    ++p.gather_refs;
    return WorkingPtr(p.li);
  }
  if (total_micro_steps_ == 0 && !trace_done_) trace_.push_back(id);
  auto it = live_.find(id);
  if (it != live_.end()) {
    Live& l = it->second;
    if (l.pending) {
      absl::Status s = stream_->Wait(l.pending);
      l.pending = nullptr;
      RETURN_IF_ERROR(Fail(s));
    }
    ++l.refs;
    ++p.gather_refs;
    void* data = l.buf.data();
    Prefetch(id);
    return data;
  }
  const int64_t bytes = p.numel * DTypeSize(config_.dtype);
  RETURN_IF_ERROR(EnsureBudget(bytes, id));
  ASSIGN_OR_RETURN(DeviceBuffer buf, DeviceBuffer::Make(device_.get(), bytes));
  void* dst = buf.data();
  const int li = p.li;
  RETURN_IF_ERROR(Fail(stream_->Wait(stream_->Submit([this, li, dst] { return GatherInto(li, dst); }))));
  Live l;
  l.buf = std::move(buf);
  l.refs = 1;
  live_[id] = std::move(l);
  live_bytes_ += bytes;
  live_high_water_ = std::max(live_high_water_, live_bytes_);
  ++p.gather_refs;
  Prefetch(id);
  return dst;
}

absl::Status Engine::Release(int id) {
  RETURN_IF_ERROR(Check(true, "release"));
  RETURN_IF_ERROR(CheckId(id, "release"));
  Param& p = params_[id];
  if (p.gather_refs <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("release '", p.name, "': not gathered"));
  }
  --p.gather_refs;
  if (config_.stage == 3 && p.trainable && !p.persistent) {
    auto it = live_.find(id);
    if (it != live_.end() && --it->second.refs == 0) FreeLive(id);
  }
  return absl::OkStatus();
}

// ---- Gradients -------------------------------------------------------------

absl::StatusOr<void*> Engine::GradBuffer(int id) {
  RETURN_IF_ERROR(Check(true, "grad_buffer"));
  RETURN_IF_ERROR(CheckId(id, "grad_buffer"));
  Param& p = params_[id];
  if (!p.trainable) {
    return absl::FailedPreconditionError(absl::StrCat(
        "grad_buffer '", p.name, "': the param is frozen (trainable = 0)"));
  }
  GradBucket* b = &buckets_.current();
  int k = b->Find(id);
  if (k >= 0) {
    if (b->ready[k]) {
      return absl::FailedPreconditionError(absl::StrCat(
          "grad_buffer '", p.name, "': its gradient was already handed in "
          "this micro-step"));
    }
    return buckets_.SlotPtr(k);
  }
  if (!b->HasRoom(p.numel)) {
    if (!b->AllReady()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "grad_buffer '", p.name, "': the gradient bucket is full while a "
          "grad buffer is out without grad_ready (param '",
          params_[b->ids[std::find(b->ready.begin(), b->ready.end(), false) -
                         b->ready.begin()]].name,
          "'); call grad_ready sooner or raise reduce_bucket_size"));
    }
    RETURN_IF_ERROR(FlushBucket(buckets_.current_index(),
                                micro_step_ + 1 == config_.gradient_accumulation_steps));
    buckets_.Rotate();
    b = &buckets_.current();
    if (b->inflight) {
      absl::Status s = stream_->Wait(b->inflight);
      b->inflight = nullptr;
      RETURN_IF_ERROR(Fail(s));
    }
    b->Clear();
  }
  return buckets_.AddSlot(id, p.numel, device_.get());
}

absl::Status Engine::GradReady(int id) {
  RETURN_IF_ERROR(Check(true, "grad_ready"));
  RETURN_IF_ERROR(CheckId(id, "grad_ready"));
  GradBucket& b = buckets_.current();
  int k = b.Find(id);
  if (k < 0 || b.ready[k]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "grad_ready '", params_[id].name, "': ",
        k < 0 ? "no grad_buffer was taken for it" : "already handed in"));
  }
  b.ready[k] = true;
  if (b.used == b.capacity && b.AllReady()) {
    // Full: start its reduction now so it overlaps with what comes next.
    RETURN_IF_ERROR(FlushBucket(buckets_.current_index(),
                                micro_step_ + 1 == config_.gradient_accumulation_steps));
    buckets_.Rotate();
    GradBucket& nb = buckets_.current();
    if (nb.inflight) {
      absl::Status s = stream_->Wait(nb.inflight);
      nb.inflight = nullptr;
      RETURN_IF_ERROR(Fail(s));
    }
    nb.Clear();
  }
  return absl::OkStatus();
}

absl::Status Engine::FlushBucket(int bi, bool boundary) {
  GradBucket& b = buckets_.at(bi);
  if (b.ids.empty()) return absl::OkStatus();
  std::vector<int> ids = b.ids;
  std::vector<int64_t> offsets = b.offsets;
  const void* data = b.data.data();
  b.inflight = stream_->Submit([this, ids = std::move(ids),
                                offsets = std::move(offsets), data, boundary] {
    return ReduceBucket(ids, data, offsets, boundary);
  });
  b.Clear();
  return absl::OkStatus();
}

// Runs on the comm stream. Stages 0-1 add the bucket into the full gradient
// (and stage 0 all-reduces it on the boundary micro-step); stages 2-3
// reduce-scatter it so each rank keeps only the sum of its own shard.
absl::Status Engine::ReduceBucket(const std::vector<int>& ids, const void* data,
                                  const std::vector<int64_t>& offsets,
                                  bool boundary) {
  const DType t = config_.dtype;
  const size_t es = DTypeSize(t);
  const char* base = static_cast<const char*>(data);
  float* pack = pack_.data<float>();
  float* recv = recv_.data<float>();
  const float inv_world = 1.0f / static_cast<float>(world_);
  if (config_.stage <= 1) {
    for (size_t k = 0; k < ids.size(); ++k) {
      const Param& p = params_[ids[k]];
      const ParamPlace& pl = layout_.place(p.li);
      device_->Accumulate(groups_[pl.group].grads.data<char>() + pl.offset * es,
                      base + offsets[k] * es, t, p.numel);
    }
    if (config_.stage == 0 && boundary && world_ > 1) {
      int64_t n = 0;
      for (int id : ids) {
        const Param& p = params_[id];
        device_->ToF32(groups_[layout_.place(p.li).group].grads.data<char>() +
                       layout_.place(p.li).offset * es, t, pack + n, p.numel, 1.0f);
        n += p.numel;
      }
      RETURN_IF_ERROR(comm_->AllReduce(pack, n, ReduceOp::kSum));
      n = 0;
      for (int id : ids) {
        Param& p = params_[id];
        const ParamPlace& pl = layout_.place(p.li);
        device_->ToF32(pack + n, DType::kF32, pack + n, p.numel, inv_world);
        device_->FromF32(pack + n, groups_[pl.group].grads.data<char>() + pl.offset * es, t, p.numel);
        p.reduced_at_boundary = true;
        n += p.numel;
      }
    }
    return absl::OkStatus();
  }
  std::vector<int64_t> counts(world_, 0);
  int64_t pos = 0;
  for (int r = 0; r < world_; ++r) {
    for (size_t k = 0; k < ids.size(); ++k) {
      const Slice s = layout_.SliceOn(params_[ids[k]].li, r);
      if (s.numel == 0) continue;
      device_->ToF32(base + (offsets[k] + s.param_offset) * es, t, pack + pos, s.numel, 1.0f);
      pos += s.numel;
      counts[r] += s.numel;
    }
  }
  RETURN_IF_ERROR(comm_->ReduceScatterV(pack, recv, counts));
  pos = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    const int li = params_[ids[k]].li;
    const Slice s = layout_.SliceOn(li, rank_);
    if (s.numel == 0) continue;
    device_->AccumulateF32(groups_[layout_.place(li).group].grads.data<char>() +
                           s.shard_offset * es,
                       recv + pos, inv_world, t, s.numel);
    pos += s.numel;
  }
  return absl::OkStatus();
}

// Stage 0: params whose gradient was not handed in on the boundary
// micro-step still need their accumulated gradient all-reduced.
absl::Status Engine::ReduceLeftoversStage0() {
  const DType t = config_.dtype;
  const size_t es = DTypeSize(t);
  std::vector<int> todo;
  for (int id : trainable_ids_) {
    if (!params_[id].reduced_at_boundary) todo.push_back(id);
    params_[id].reduced_at_boundary = false;
  }
  size_t k = 0;
  while (k < todo.size()) {
    std::vector<int> batch;
    int64_t n = 0;
    while (k < todo.size() && (batch.empty() || n + params_[todo[k]].numel <= pack_cap_)) {
      n += params_[todo[k]].numel;
      batch.push_back(todo[k++]);
    }
    float* pack = pack_.data<float>();
    int64_t pos = 0;
    for (int id : batch) {
      const ParamPlace& pl = layout_.place(params_[id].li);
      device_->ToF32(groups_[pl.group].grads.data<char>() + pl.offset * es, t, pack + pos, params_[id].numel, 1.0f);
      pos += params_[id].numel;
    }
    RETURN_IF_ERROR(comm_->AllReduce(pack, pos, ReduceOp::kSum));
    pos = 0;
    for (int id : batch) {
      const ParamPlace& pl = layout_.place(params_[id].li);
      device_->ToF32(pack + pos, DType::kF32, pack + pos, params_[id].numel, 1.0f / world_);
      device_->FromF32(pack + pos, groups_[pl.group].grads.data<char>() + pl.offset * es, t, params_[id].numel);
      pos += params_[id].numel;
    }
  }
  return absl::OkStatus();
}

// Stage 1: the full gradients stay local through the micro-steps and are
// reduce-scattered once, after the last one, in pack-sized chunks.
absl::Status Engine::ReduceScatterFlatStage1(const std::vector<float*>& g32) {
  const DType t = config_.dtype;
  const size_t es = DTypeSize(t);
  float* pack = pack_.data<float>();
  for (size_t g = 0; g < groups_.size(); ++g) {
    const int64_t shard = layout_.groups()[g].shard;
    const int64_t chunk = std::max<int64_t>(1, pack_cap_ / world_);
    float* out = g32[g];
    for (int64_t a = 0; a < shard; a += chunk) {
      const int64_t len = std::min(chunk, shard - a);
      for (int r = 0; r < world_; ++r) {
        device_->ToF32(groups_[g].grads.data<char>() + (r * shard + a) * es, t,
                       pack + r * len, len, 1.0f);
      }
      RETURN_IF_ERROR(comm_->ReduceScatterV(pack, out + a,
                                            std::vector<int64_t>(world_, len)));
      device_->ToF32(out + a, DType::kF32, out + a, len, 1.0f / world_);
    }
  }
  return absl::OkStatus();
}

// ---- Step -------------------------------------------------------------------

absl::StatusOr<StepInfo> Engine::Step() {
  RETURN_IF_ERROR(Check(true, "step"));
  GradBucket& b = buckets_.current();
  if (!b.AllReady()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "step: param '",
        params_[b.ids[std::find(b.ready.begin(), b.ready.end(), false) - b.ready.begin()]].name,
        "' has a grad buffer out without grad_ready"));
  }
  const bool boundary = micro_step_ + 1 == config_.gradient_accumulation_steps;
  RETURN_IF_ERROR(FlushBucket(buckets_.current_index(), boundary));
  RETURN_IF_ERROR(Fail(stream_->Drain()));
  for (int i = 0; i < 2; ++i) {
    buckets_.at(i).inflight = nullptr;
    buckets_.at(i).Clear();
  }
  // Prefetched params nobody used this micro-step.
  std::vector<int> unused;
  for (const auto& [q, l] : live_) {
    if (l.refs == 0) unused.push_back(q);
  }
  for (int q : unused) FreeLive(q);
  if (!trace_done_ && total_micro_steps_ == 0) trace_done_ = true;
  trace_pos_ = 0;
  ++total_micro_steps_;
  if (!boundary) {
    ++micro_step_;
    StepInfo info;
    info.global_step = global_step_;
    info.skipped_steps = skipped_steps_;
    info.loss_scale = scaler_.scale();
    info.lr = schedule_.LrForStep(global_step_);
    return info;
  }
  micro_step_ = 0;
  auto info = Boundary();
  if (!info.ok()) return Fail(info.status());
  MaybePrint(*info);
  return info;
}

absl::StatusOr<StepInfo> Engine::Boundary() {
  const DType t = config_.dtype;
  const size_t es = DTypeSize(t);
  const int stage = config_.stage;
  // The owned gradients in fp32: fp32 shards of stages 0, 2, 3 are used in
  // place; otherwise a scratch kept across steps (no allocation per step).
  const bool in_place = t == DType::kF32 && stage != 1;
  if (!in_place && g32_.empty()) {
    g32_.resize(groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      ASSIGN_OR_RETURN(g32_[g], DeviceBuffer::Make(device_.get(), groups_[g].owned_len * 4));
    }
  }
  std::vector<float*> g32(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    g32[g] = in_place ? groups_[g].grads.data<float>() : g32_[g].data<float>();
  }
  double sumsq = 0.0;
  auto reduce = [&]() -> absl::Status {
    if (stage == 0 && world_ > 1) RETURN_IF_ERROR(ReduceLeftoversStage0());
    if (stage == 1) {
      RETURN_IF_ERROR(ReduceScatterFlatStage1(g32));
    } else if (!in_place) {
      for (size_t g = 0; g < groups_.size(); ++g) {
        device_->ToF32(groups_[g].grads.data(), t, g32[g], groups_[g].owned_len, 1.0f);
      }
    }
    for (size_t g = 0; g < groups_.size(); ++g) {
      sumsq += device_->SumSquares(g32[g], DType::kF32, groups_[g].owned_len);
    }
    // Norm and overflow in one all-reduce: a non-finite gradient anywhere
    // makes the global sum of squares non-finite.
    if (stage >= 1 && world_ > 1) {
      ScopedCountingKind k(ctrl_, CollectiveKind::kControl);
      RETURN_IF_ERROR(ctrl_->AllReduce(&sumsq, 1, ReduceOp::kSum));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(stream_->Wait(stream_->Submit(reduce)));
  (void)stream_->Drain();

  StepInfo info;
  info.boundary = true;
  const double scale = scaler_.scale();
  const bool overflow = !std::isfinite(sumsq);
  const double scaled_norm = std::sqrt(sumsq);
  info.grad_norm = overflow ? std::numeric_limits<double>::infinity() : scaled_norm / scale;
  info.lr = schedule_.LrForStep(global_step_);
  auto zero_grads = [&] {
    for (GroupState& gs : groups_) device_->Memset0(gs.grads.data(), gs.grads.bytes());
  };
  if (overflow) {
    zero_grads();
    RETURN_IF_ERROR(scaler_.Update(true));
    ++skipped_steps_;
    info.skipped = true;
    info.global_step = global_step_;
    info.skipped_steps = skipped_steps_;
    info.loss_scale = scaler_.scale();
    return info;
  }
  const float factor = static_cast<float>(
      math::UnscaleClipFactor(scaled_norm, scale, config_.gradient_clipping));
  const int64_t step = global_step_ + 1;
  math::SgdScalars sgd;
  sgd.lr = static_cast<float>(info.lr);
  sgd.momentum = static_cast<float>(config_.momentum);
  sgd.dampening = static_cast<float>(config_.dampening);
  sgd.weight_decay = static_cast<float>(config_.weight_decay);
  sgd.grad_scale = factor;
  sgd.nesterov = config_.nesterov;
  sgd.first_step = step == 1;
  const bool decoupled = config_.optimizer == OptimizerType::kAdamW ||
                         config_.adam_w_mode;
  const math::AdamScalars adam = math::MakeAdamScalars(
      static_cast<float>(info.lr), static_cast<float>(config_.beta1),
      static_cast<float>(config_.beta2), static_cast<float>(config_.eps),
      static_cast<float>(config_.weight_decay), decoupled, step, factor);
  // Elements [begin, begin+len) of group g's owned range; master/m/v point
  // at those elements (m, v may be null for SGD).
  // With offload_param "nvme" the working copy goes through `staged` to
  // the next slot of the group's param file.
  std::vector<char> staged;
  auto update = [&](size_t g, int64_t begin, int64_t len, float* master,
                    float* m, float* v) -> absl::Status {
    GroupState& gs = groups_[g];
    char* work = gs.working.data<char>() + ((stage == 3 ? 0 : gs.owned_begin) + begin) * es;
    if (!param_files_.empty()) {
      staged.resize(len * es);
      work = staged.data();
    }
    const float* grad = g32[g] + begin;
    if (config_.optimizer == OptimizerType::kSgd) {
      device_->SgdStep(sgd, grad, master, m, len, work, t);
    } else {
      device_->AdamStep(adam, grad, master, m, v, len, work, t);
    }
    if (!param_files_.empty()) return param_files_[g]->Write(begin * es, len * es, work);
    return absl::OkStatus();
  };
  if (nvme_) {
    // Streamed: read sub-group k+1 while updating k while writing k-1. The
    // step counts only if every rank wrote all of its state (one MAX).
    const int arrays = config_.optimizer != OptimizerType::kSgd
                           ? 3 : (config_.momentum != 0.0 ? 2 : 1);
    auto agree = [&](bool ok) -> absl::StatusOr<bool> {
      if (world_ == 1) return ok;
      double failed = ok ? 0.0 : 1.0;
      RETURN_IF_ERROR(stream_->Wait(stream_->Submit([&] {
        ScopedCountingKind k(ctrl_, CollectiveKind::kControl);
        return ctrl_->AllReduce(&failed, 1, ReduceOp::kMax);
      })));
      (void)stream_->Drain();
      return failed == 0.0;
    };
    RETURN_IF_ERROR(nvme_->Update(
        [&](const offload::NvmeTier::Chunk& c, float* const* arr) {
          return update(c.group, c.begin, c.len, arr[0], arrays > 1 ? arr[1] : nullptr,
                        arrays > 2 ? arr[2] : nullptr);
        },
        agree));
  } else if (OptimizerOnHost()) {
    RETURN_IF_ERROR(OffloadedUpdate(g32, adam, sgd));
  } else {
    // In memory; in sub_group_size pieces when the working copy is staged.
    const int64_t piece = param_files_.empty() ? std::numeric_limits<int64_t>::max()
                                               : std::max<int64_t>(1, config_.sub_group_size);
    for (size_t g = 0; g < groups_.size(); ++g) {
      GroupState& gs = groups_[g];
      for (int64_t b = 0; b < gs.owned_len; b += piece) {
        const int64_t len = std::min(piece, gs.owned_len - b);
        float* m = gs.m.data<float>();
        float* v = gs.v.data<float>();
        RETURN_IF_ERROR(update(g, b, len, gs.master.data<float>() + b, m ? m + b : nullptr,
                               v ? v + b : nullptr));
      }
    }
  }
  for (auto& f : param_files_) f->Commit();
  zero_grads();
  RETURN_IF_ERROR(stream_->Wait(stream_->Submit([this] { return PublishWorkingCopy(); })));
  (void)stream_->Drain();
  RETURN_IF_ERROR(scaler_.Update(false));
  ++global_step_;
  info.global_step = global_step_;
  info.skipped_steps = skipped_steps_;
  info.loss_scale = scaler_.scale();
  return info;
}

void Engine::MaybePrint(const StepInfo& info) {
  const int every = config_.steps_per_print;
  const int64_t n = global_step_ + skipped_steps_;
  if (rank_ != 0 || every <= 0 || n % every != 0) return;
  auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - last_print_).count();
  std::string samples;
  if (samples_ > samples_at_print_ && secs > 0) {
    samples = absl::StrCat(" samples/s=",
                           absl::StrFormat("%.1f", (samples_ - samples_at_print_) / secs));
  }
  std::printf("[zero] step=%lld loss_scale=%g grad_norm=%.6g lr=%.6g skipped=%lld%s\n",
              static_cast<long long>(n), info.loss_scale, info.grad_norm,
              info.lr, static_cast<long long>(skipped_steps_), samples.c_str());
  std::fflush(stdout);
  last_print_ = now;
  samples_at_print_ = samples_;
}

// ZeRO-Offload on a GPU: the optimizer state is in host memory. Pieces of
// the owned range stream through two pairs of host buffers (page-locked
// when offload_optimizer.pin_memory): while the CPU updates piece k, the
// gradients of piece k+1 come down and the working copy of piece k-1 goes up.
absl::Status Engine::OffloadedUpdate(const std::vector<float*>& g32,
                                     const math::AdamScalars& adam,
                                     const math::SgdScalars& sgd) {
  const DType t = config_.dtype;
  const size_t es = DTypeSize(t);
  const bool pin = config_.offload_optimizer.pin_memory;
  struct Piece {
    size_t g;
    int64_t begin, len;
  };
  std::vector<Piece> pieces;
  const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(config_.sub_group_size, 1 << 22));
  int64_t largest = 0;
  for (size_t g = 0; g < groups_.size(); ++g) {
    for (int64_t b = 0; b < groups_[g].owned_len; b += cap) {
      pieces.push_back({g, b, std::min(cap, groups_[g].owned_len - b)});
      largest = std::max(largest, pieces.back().len);
    }
  }
  if (pieces.empty()) return absl::OkStatus();
  // Two grad buffers and two working-copy buffers, freed on every path.
  std::vector<void*> bufs;
  auto free_all = [&] {
    for (void* p : bufs) device_->FreeHost(p, pin);
  };
  for (int i = 0; i < 4; ++i) {
    auto p = device_->AllocateHost(largest * (i < 2 ? sizeof(float) : es), pin);
    if (!p.ok()) {
      free_all();
      return p.status();
    }
    bufs.push_back(*p);
  }
  float* gbuf[2] = {static_cast<float*>(bufs[0]), static_cast<float*>(bufs[1])};
  char* wbuf[2] = {static_cast<char*>(bufs[2]), static_cast<char*>(bufs[3])};
  const int stage = config_.stage;
  auto down = [&](size_t k) {
    const Piece& p = pieces[k];
    return std::async(std::launch::async, [this, p, dst = gbuf[k % 2], src = g32[p.g]] {
      device_->Copy(dst, src + p.begin, p.len * sizeof(float));
    });
  };
  std::future<void> next = down(0), up;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    GroupState& gs = groups_[p.g];
    next.wait();
    if (k + 1 < pieces.size()) next = down(k + 1);
    float* m = gs.m.data<float>();
    float* v = gs.v.data<float>();
    float* master = gs.master.data<float>() + p.begin;
    if (config_.optimizer == OptimizerType::kSgd) {
      host_->SgdStep(sgd, gbuf[k % 2], master, m ? m + p.begin : nullptr, p.len, wbuf[k % 2], t);
    } else {
      host_->AdamStep(adam, gbuf[k % 2], master, m + p.begin, v + p.begin, p.len,
                      wbuf[k % 2], t);
    }
    if (up.valid()) up.wait();
    char* work = gs.working.data<char>() + ((stage == 3 ? 0 : gs.owned_begin) + p.begin) * es;
    up = std::async(std::launch::async, [this, work, src = wbuf[k % 2], bytes = p.len * es] {
      device_->Copy(work, src, bytes);
    });
  }
  up.wait();
  free_all();
  return absl::OkStatus();
}

absl::Status Engine::ReadMaster(int id, float* out) {
  RETURN_IF_ERROR(Check(true, "read_master"));
  RETURN_IF_ERROR(CheckId(id, "read_master"));
  if (out == nullptr) return absl::InvalidArgumentError("read_master: out is null");
  const Param& p = params_[id];
  if (!p.trainable) {
    device_->DownloadF32(p.whole.data(), p.dtype, out, p.numel);
    return absl::OkStatus();
  }
  const ParamPlace& pl = layout_.place(p.li);
  const GroupState& gs = groups_[pl.group];
  if (config_.stage == 0) {
    if (nvme_) return Fail(nvme_->ReadRange(pl.group, 0, pl.offset, p.numel, out));
    (OptimizerOnHost() ? host_.get() : device_.get())
        ->DownloadF32(gs.master.data<float>() + pl.offset, DType::kF32, out, p.numel);
    return absl::OkStatus();
  }
  // Gather into device memory (collectives move device buffers), then copy.
  ASSIGN_OR_RETURN(DeviceBuffer full, DeviceBuffer::Make(device_.get(), p.numel * 4));
  const Slice s = layout_.SliceOn(p.li, rank_);
  const float* send = gs.master.data<float>() + s.shard_offset;
  DeviceBuffer mine;  // NVMe or CPU offload: this rank's slice, copied up
  if (OptimizerOnHost()) {
    ASSIGN_OR_RETURN(mine, DeviceBuffer::Make(device_.get(), s.numel * 4));
    if (s.numel > 0) device_->Copy(mine.data(), send, s.numel * 4);
    send = mine.data<float>();
  } else if (nvme_) {
    ASSIGN_OR_RETURN(mine, DeviceBuffer::Make(device_.get(), s.numel * 4));
    if (s.numel > 0) {
      RETURN_IF_ERROR(Fail(nvme_->ReadRange(pl.group, 0, s.shard_offset, s.numel,
                                            mine.data<float>())));
    }
    send = mine.data<float>();
  }
  auto counts = layout_.Counts(p.li);
  float* dst = full.data<float>();
  RETURN_IF_ERROR(Fail(stream_->Wait(stream_->Submit([&] {
    ScopedCountingKind k(comm_.get(), CollectiveKind::kControl);
    return comm_->AllGatherV(send, dst, counts, DType::kF32);
  }))));
  (void)stream_->Drain();
  device_->DownloadF32(dst, DType::kF32, out, p.numel);
  return absl::OkStatus();
}

EngineStats Engine::Stats() const {
  EngineStats s;
  s.rank = rank_;
  s.world_size = world_;
  s.stage = config_.stage;
  s.trainable_numel = layout_.total_numel();
  s.padded_numel = layout_.total_padded();
  for (const GroupState& g : groups_) {
    s.master_bytes += g.master.bytes();
    s.optimizer_bytes += g.m.bytes() + g.v.bytes();
    s.grad_bytes += g.grads.bytes();
    s.param_bytes += g.working.bytes();
  }
  for (const Param& p : params_) {
    if (!p.trainable) s.frozen_bytes += p.whole.bytes();
    if (p.persistent) s.param_bytes += p.whole.bytes();
  }
  if (nvme_) {
    const offload::NvmeTierStats t = nvme_->stats();
    s.optimizer_bytes = t.host_bytes;  // staging buffers; master/m/v on disk
    s.nvme_bytes = t.file_bytes;
    s.nvme_read_bytes = t.bytes_read;
    s.nvme_write_bytes = t.bytes_written;
    s.nvme_direct_io = t.direct_io;
    s.nvme_uring = t.uring;
    s.offload_note = t.note;
  }
  for (const auto& f : param_files_) s.nvme_bytes += f->file_bytes();
  s.buffer_bytes = buckets_.bytes() + pack_.bytes() + recv_.bytes() + live_bytes_;
  for (const DeviceBuffer& b : g32_) s.buffer_bytes += b.bytes();
  s.live_gathered_bytes = live_bytes_;
  s.live_gathered_high_water = live_high_water_;
  for (int k = 0; k < static_cast<int>(CollectiveKind::kCount); ++k) {
    s.sent[k] = comm_->counters().sent[k].load();
    s.sent_bytes[k] = comm_->counters().sent_bytes[k].load();
  }
  s.collective_calls = comm_->counters().calls.load();
  s.global_step = global_step_;
  s.skipped_steps = skipped_steps_;
  s.micro_step = micro_step_;
  return s;
}

// ---- Checkpoints (core/ckpt/) ----------------------------------------------

absl::Status Engine::CheckpointPrecondition(const char* call) {
  RETURN_IF_ERROR(Check(true, call));
  for (int i = 0; i < 2; ++i) {
    if (!buckets_.at(i).ids.empty() || buckets_.at(i).inflight) {
      return absl::FailedPreconditionError(absl::StrCat(
          call, ": gradients of the next micro-step were already handed in; "
          "call it right after the step() that ends an accumulation"));
    }
  }
  return absl::OkStatus();
}

// NVMe optimizer offload: checkpoints see the owned state through host
// buffers filled from the files for the duration of a save or load (a
// temporary 12 bytes per owned element), written back after a load.
absl::Status Engine::MaterializeOffloaded() {
  if (!nvme_) return absl::OkStatus();
  const bool adam = config_.optimizer != OptimizerType::kSgd;
  const int arrays = adam ? 3 : (config_.momentum != 0.0 ? 2 : 1);
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupState& gs = groups_[g];
    DeviceBuffer* bufs[3] = {&gs.master, &gs.m, &gs.v};
    for (int a = 0; a < arrays; ++a) {
      ASSIGN_OR_RETURN(*bufs[a], DeviceBuffer::Make(device_.get(), gs.owned_len * 4));
      RETURN_IF_ERROR(nvme_->ReadRange(static_cast<int>(g), a, 0, gs.owned_len,
                                       bufs[a]->data<float>()));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::SpillOffloaded(bool write_back) {
  if (!nvme_) return absl::OkStatus();
  absl::Status s;
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupState& gs = groups_[g];
    DeviceBuffer* bufs[3] = {&gs.master, &gs.m, &gs.v};
    for (int a = 0; a < 3; ++a) {
      if (write_back && s.ok() && bufs[a]->data() != nullptr) {
        s = nvme_->WriteRange(static_cast<int>(g), a, 0, gs.owned_len, bufs[a]->data<float>());
      }
      bufs[a]->Reset();
    }
  }
  return s;
}

ckpt::ShardView Engine::MakeShardView() {
  ckpt::ShardView v;
  v.device = device_.get();
  v.rank = rank_;
  v.world = world_;
  v.stage = config_.stage;
  v.dtype = config_.dtype;
  v.config = &config_;
  const bool adam = config_.optimizer != OptimizerType::kSgd;
  const bool momentum = !adam && config_.momentum != 0.0;
  if (adam) v.states = {ckpt::kExpAvg, ckpt::kExpAvgSq};
  if (momentum) v.states = {ckpt::kMomentum};
  v.global_step = global_step_;
  v.skipped_steps = skipped_steps_;
  v.micro_step = micro_step_;
  v.scaler_dynamic = scaler_.dynamic();
  v.scaler = scaler_.state();
  for (const Param& p : params_) {
    ckpt::ParamView pv;
    pv.name = p.name;
    pv.shape = p.shape;
    pv.dtype = p.dtype;
    pv.numel = p.numel;
    pv.trainable = p.trainable;
    if (!p.trainable) {
      pv.whole = p.whole.data();
      v.params.push_back(std::move(pv));
      continue;
    }
    const ParamPlace& pl = layout_.place(p.li);
    GroupState& gs = groups_[pl.group];
    const int64_t lo = std::max(pl.offset, gs.owned_begin);
    const int64_t hi = std::min(pl.offset + p.numel, gs.owned_begin + gs.owned_len);
    if (hi > lo) {
      pv.own_offset = lo - pl.offset;
      pv.own_numel = hi - lo;
      const int64_t at = lo - gs.owned_begin;
      pv.state[ckpt::kMaster] = gs.master.data<float>() + at;
      if (adam) {
        pv.state[ckpt::kExpAvg] = gs.m.data<float>() + at;
        pv.state[ckpt::kExpAvgSq] = gs.v.data<float>() + at;
      }
      if (momentum) pv.state[ckpt::kMomentum] = gs.m.data<float>() + at;
    }
    for (int r = 0; r < world_; ++r) {
      const Slice s = layout_.SliceOn(p.li, r);
      if (s.numel > 0) pv.slices.push_back({r, s.param_offset, s.numel});
    }
    v.params.push_back(std::move(pv));
  }
  return v;
}

// Runs on the comm stream: the working copy is the cast of the master, and
// stages 1-2 gather it whole on every rank, as after an optimizer step.
absl::Status Engine::RebuildWorkingFromMaster() {
  const DType t = config_.dtype;
  const size_t es = DTypeSize(t);
  const int stage = config_.stage;
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupState& gs = groups_[g];
    if (!param_files_.empty()) {  // offload_param "nvme": the shard is on disk
      std::vector<char> cast(gs.owned_len * es);
      device_->FromF32(gs.master.data<float>(), cast.data(), t, gs.owned_len);
      RETURN_IF_ERROR(param_files_[g]->WriteCommitted(0, gs.owned_len * es, cast.data()));
    } else if (OptimizerOnHost()) {  // cast on the host, copy up
      std::vector<char> cast(gs.owned_len * es);
      host_->FromF32(gs.master.data<float>(), cast.data(), t, gs.owned_len);
      char* work = gs.working.data<char>() + (stage == 3 ? 0 : gs.owned_begin * es);
      device_->Copy(work, cast.data(), cast.size());
    } else {
      char* work = gs.working.data<char>() + (stage == 3 ? 0 : gs.owned_begin * es);
      device_->FromF32(gs.master.data<float>(), work, t, gs.owned_len);
    }
    device_->Memset0(gs.grads.data(), gs.grads.bytes());
  }
  device_->Synchronize();
  return PublishWorkingCopy();
}

// After the owners updated their shards of the working copy: stages 1-2
// all-gather the shards; stage 3 refreshes the params kept whole everywhere.
// Runs on the comm stream.
absl::Status Engine::PublishWorkingCopy() {
  const int stage = config_.stage;
  const DType t = config_.dtype;
  const size_t es = DTypeSize(t);
  if ((stage == 1 || stage == 2) && world_ > 1) {
    for (size_t g = 0; g < groups_.size(); ++g) {
      const LayoutGroup& lg = layout_.groups()[g];
      char* w = groups_[g].working.data<char>();
      RETURN_IF_ERROR(comm_->AllGatherV(w + lg.shard * rank_ * es, w,
                                        std::vector<int64_t>(world_, lg.shard), t));
    }
  }
  if (stage == 3) {
    for (int id : trainable_ids_) {
      Param& p = params_[id];
      if (p.persistent) RETURN_IF_ERROR(GatherInto(p.li, p.whole.data()));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Save(const std::string& dir, const std::string& tag,
                          const ckpt::SaveOptions& options) {
  absl::Status pre = CheckpointPrecondition("save");
  if (!broken_.ok()) return pre;
  if (pre.ok()) pre = MaterializeOffloaded();
  absl::Status s = stream_->Wait(stream_->Submit([&]() -> absl::Status {
    RETURN_IF_ERROR(ckpt::Agree(ctrl_, pre));
    return ckpt::SaveCheckpoint(MakeShardView(), ctrl_, dir, tag, options);
  }));
  (void)stream_->Drain();
  (void)SpillOffloaded(false);
  if (absl::IsDeadlineExceeded(s) || absl::IsAborted(s)) return Fail(s);
  return s;
}

absl::Status Engine::Load(const std::string& dir, const std::string& tag,
                          const ckpt::LoadOptions& options) {
  absl::Status pre = CheckpointPrecondition("load");
  if (!broken_.ok()) return pre;
  if (pre.ok() && micro_step_ != 0) {
    pre = absl::FailedPreconditionError(absl::StrCat(
        "load: in the middle of gradient accumulation (micro-step ", micro_step_,
        "); load right after the step() that ends an accumulation"));
  }
  for (const Param& p : params_) {
    if (pre.ok() && p.gather_refs > 0) {
      pre = absl::FailedPreconditionError(absl::StrCat(
          "load: param '", p.name, "' is gathered; release every param first"));
    }
  }
  if (pre.ok()) pre = MaterializeOffloaded();
  if (pre.ok()) {
    // Stage 3: prefetched copies would go stale.
    std::vector<int> held;
    for (const auto& [q, l] : live_) held.push_back(q);
    for (int q : held) FreeLive(q);
  }
  bool touched = false;
  absl::Status s = stream_->Wait(stream_->Submit([&]() -> absl::Status {
    RETURN_IF_ERROR(ckpt::Agree(ctrl_, pre));
    ASSIGN_OR_RETURN(ckpt::Manifest m,
                     ckpt::LoadCheckpoint(MakeShardView(), ctrl_, dir, tag,
                                          options, &touched));
    global_step_ = m.global_step;
    skipped_steps_ = m.skipped_steps;
    if (scaler_.dynamic() == m.scaler_dynamic) {
      LossScalerState st = m.scaler;
      if (!scaler_.dynamic()) st.cur_scale = scaler_.scale();  // static: the config's
      scaler_.set_state(st);
    }
    return ckpt::Agree(ctrl_, RebuildWorkingFromMaster());
  }));
  (void)stream_->Drain();
  {
    const absl::Status spill = SpillOffloaded(s.ok());
    if (s.ok() && !spill.ok()) {
      return Fail(absl::Status(spill.code(), absl::StrCat(
          "load: writing the loaded optimizer state to NVMe failed: ", spill.message())));
    }
  }
  if (!s.ok() && (touched || absl::IsDeadlineExceeded(s) || absl::IsAborted(s))) {
    return Fail(absl::Status(s.code(), absl::StrCat(
        s.message(), touched ? " (the engine's state was partly overwritten: "
                               "create a new engine to load again)" : "")));
  }
  return s;
}

}  // namespace zero

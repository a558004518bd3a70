// _zero_c: a thin pybind11 layer over the C ABI (zero_c.h) and nothing else.
//
// Conventions of this module (the Python package `zero` builds on them):
//  1. Handles (Comm, Engine) own one C handle each. close() frees it; any
//     later call raises FAILED_PRECONDITION instead of touching freed memory.
//     An Engine keeps its Comm's C handle alive; Comm.close() while an engine
//     still uses it raises.
//  2. A failed C call raises the exception built by the factory registered
//     with set_error_factory(status, message) (zero.errors does this), or a
//     RuntimeError before one is registered.
//  3. Buffers come back as (address, nbytes) pairs; the Python layer wraps
//     them in numpy arrays. The module knows no dtypes or shapes.
//  4. Every call that may block in a collective releases the GIL, so the
//     thread communicator works from Python threads.
//  5. Status values and the fields of zero_step_info and zero_stats come from
//     abi_tables.h, generated from zero_c.h (bindings/gen_abi_tables.py):
//     nothing here lists them by hand.
//
// This file holds the Engine and the module; the other parts are registered
// from files of their own (module_parts.h), over what they share
// (call_support.h).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "abi_tables.h"
#include "call_support.h"
#include "comm_binding.h"
#include "module_parts.h"
#include "zero_c.h"

namespace py = pybind11;

namespace {

using zero_py::Check;
using zero_py::CheckNoGil;
using zero_py::Closed;
using zero_py::Comm;
using zero_py::CommHandle;
using zero_py::ErrorFactory;
using zero_py::PyProgress;
using zero_py::Raise;

// A zero_param_desc pointing into `name` and `shape` (which must outlive it);
// use_muon: 0 auto, 1 on, 2 off (zero_muon_use, 1.13).
zero_param_desc Desc(const std::string& name, const std::vector<int64_t>& shape, int32_t dtype,
                     bool trainable, int32_t use_muon) {
  zero_param_desc desc = ZERO_PARAM_DESC_INIT;
  desc.name = name.c_str();
  desc.ndim = static_cast<int32_t>(shape.size());
  desc.shape = shape.data();
  desc.dtype = static_cast<zero_dtype>(dtype);
  desc.trainable = trainable ? 1 : 0;
  desc.use_muon = static_cast<zero_muon_use>(use_muon);
  return desc;
}

py::dict EstimateDict(const zero_memory_estimate& e) {
  py::dict d;
#define ZERO_FIELD(f) d[#f] = e.f;
  ZERO_MEMORY_ESTIMATE_FIELDS(ZERO_FIELD)
#undef ZERO_FIELD
  return d;
}

class Engine {
 public:
  Engine(const std::string& json_text, const Comm& comm)
      : comm_(comm.handle()) {
    zero_comm_t* c = comm.get();
    CheckNoGil([&] { return zero_engine_create_json(json_text.c_str(), c, &engine_); });
  }

  ~Engine() { Destroy(); }

  // Without the GIL: the engine first finishes the collectives it has in
  // flight (a stage-3 prefetch), whose peers (thread-communicator ranks)
  // may need the GIL to reach their side of them.
  void Destroy() {
    zero_engine_t* e = std::exchange(engine_, nullptr);
    if (e != nullptr) {
      py::gil_scoped_release nogil;
      zero_engine_destroy(e);
    }
    comm_.reset();
  }

  zero_engine_t* get() const {
    if (!engine_) Closed("Engine");
    return engine_;
  }

  bool closed() const { return engine_ == nullptr; }

  // init: address of numel float32 values, or 0 for zeros.
  int32_t RegisterParam(const std::string& name,
                        const std::vector<int64_t>& shape, int32_t dtype,
                        uintptr_t init, bool trainable, int32_t use_muon) {
    zero_param_desc desc = Desc(name, shape, dtype, trainable, use_muon);
    desc.init = reinterpret_cast<const float*>(init);
    int32_t id = -1;
    Check(zero_engine_register_param(get(), &desc, &id));
    return id;
  }

  // kind..fan_in: a zero_init_spec's fields (1.4).
  int32_t RegisterParamInit(const std::string& name, const std::vector<int64_t>& shape,
                            int32_t dtype, bool trainable, int32_t kind, uint64_t seed,
                            double value, double low, double high, double mean, double std,
                            double a, int64_t fan_in, int32_t use_muon) {
    zero_param_desc desc = Desc(name, shape, dtype, trainable, use_muon);
    zero_init_spec spec = ZERO_INIT_SPEC_INIT;
    spec.kind = static_cast<zero_init_kind>(kind);
    spec.seed = seed;
    spec.value = value;
    spec.low = low;
    spec.high = high;
    spec.mean = mean;
    spec.std = std;
    spec.a = a;
    spec.fan_in = fan_in;
    int32_t id = -1;
    Check(zero_engine_register_param_init(get(), &desc, &spec, &id));
    return id;
  }

  // fill(name, offset, count) returns a buffer of count float32 values; it
  // runs during finalize, with the GIL taken for it.
  int32_t RegisterParamFill(const std::string& name, const std::vector<int64_t>& shape,
                            int32_t dtype, bool trainable, py::object fill,
                            int32_t use_muon) {
    zero_param_desc desc = Desc(name, shape, dtype, trainable, use_muon);
    auto f = std::make_unique<PyFill>();
    f->fn = std::move(fill);
    int32_t id = -1;
    Check(zero_engine_register_param_fill(get(), &desc, &PyFill::Call, f.get(), &id));
    fills_.push_back(std::move(f));
    return id;
  }

  void Finalize() {
    zero_engine_t* e = get();
    zero_status s;
    {
      py::gil_scoped_release nogil;
      s = zero_engine_finalize(e);
    }
    if (s != ZERO_OK) {
      // The Python exception a fill callback raised, after the runtime's text.
      std::string msg = zero_last_error();
      for (const auto& f : fills_) {
        if (!f->error.empty()) {
          msg += " (" + f->error + ")";
          break;
        }
      }
      fills_.clear();
      Raise(s, msg);
    }
    fills_.clear();
  }

  int32_t NumParams() const {
    int32_t n = 0;
    Check(zero_engine_num_params(get(), &n));
    return n;
  }

  int32_t FindParam(const std::string& name) const {
    int32_t id = -1;
    Check(zero_engine_find_param(get(), name.c_str(), &id));
    return id;
  }

  int64_t ParamNumel(int32_t id) const {
    int64_t n = 0;
    Check(zero_engine_param_numel(get(), id, &n));
    return n;
  }

  uintptr_t Gather(int32_t id) {
    zero_engine_t* e = get();
    void* data = nullptr;
    CheckNoGil([&] { return zero_engine_gather(e, id, &data); });
    return reinterpret_cast<uintptr_t>(data);
  }

  // 1.7: a stage-3 gather written into `bytes` at `dst` (caller memory).
  void GatherInto(int32_t id, int32_t dtype, uintptr_t dst, size_t bytes) {
    zero_engine_t* e = get();
    CheckNoGil([&] {
      return zero_engine_gather_into(e, id, static_cast<zero_dtype>(dtype),
                                     reinterpret_cast<void*>(dst), bytes);
    });
  }

  // 1.15: gather_into of `count` params in one call: ids (int32), dsts
  // (addresses) and bytes (size_t) are arrays of `count` at those host
  // addresses, which the caller keeps (zero.torch fills them once per
  // module: no Python object per param or per call).
  void GatherIntoMany(uintptr_t ids, size_t count, int32_t dtype, uintptr_t dsts,
                      uintptr_t bytes) {
    zero_engine_t* e = get();
    CheckNoGil([&] {
      return zero_engine_gather_into_many(e, reinterpret_cast<const int32_t*>(ids), count,
                                          static_cast<zero_dtype>(dtype),
                                          reinterpret_cast<void* const*>(dsts),
                                          reinterpret_cast<const size_t*>(bytes));
    });
  }

  // 1.15: release of `count` params whose int32 ids are at host address `ids`.
  void ReleaseMany(uintptr_t ids, size_t count) {
    zero_engine_t* e = get();
    CheckNoGil([&] {
      return zero_engine_release_many(e, reinterpret_cast<const int32_t*>(ids), count);
    });
  }

  // 1.8: this micro-step's gradient from `bytes` at host `src` of `dtype`
  // (rounded to the param's dtype inside), handed over.
  void SetGrad(int32_t id, int32_t dtype, uintptr_t src, size_t bytes) {
    zero_engine_t* e = get();
    CheckNoGil([&] {
      return zero_engine_set_grad(e, id, static_cast<zero_dtype>(dtype),
                                  reinterpret_cast<const void*>(src), bytes);
    });
  }

  void Release(int32_t id) {
    zero_engine_t* e = get();
    CheckNoGil([&] { return zero_engine_release(e, id); });
  }

  uintptr_t GradBuffer(int32_t id) {
    zero_engine_t* e = get();
    void* data = nullptr;
    CheckNoGil([&] { return zero_engine_grad_buffer(e, id, &data); });
    return reinterpret_cast<uintptr_t>(data);
  }

  void SetDevice(const std::string& kind, int32_t ordinal) {
    zero_engine_t* e = get();
    CheckNoGil([&] { return zero_engine_set_device(e, kind.c_str(), ordinal); });
  }

  py::dict DeviceInfo() const {
    zero_device_info info = ZERO_DEVICE_INFO_INIT;
    Check(zero_engine_device(get(), &info));
    py::dict d;
    d["kind"] = info.kind;
    d["ordinal"] = info.ordinal;
    d["host_accessible"] = info.host_accessible != 0;
    d["dlpack_device_type"] = info.dlpack_device_type;
    d["device_bytes"] = info.device_bytes;
    d["device_peak_bytes"] = info.device_peak_bytes;
    d["device_reserved_bytes"] = info.device_reserved_bytes;
    d["pinned_host_bytes"] = info.pinned_host_bytes;
    return d;
  }

  // bytes from src to dst (host or this engine's device memory), complete on return.
  void Copy(uintptr_t dst, uintptr_t src, size_t bytes) {
    zero_engine_t* e = get();
    CheckNoGil([&] {
      return zero_engine_copy(e, reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src),
                              bytes);
    });
  }

  void GradReady(int32_t id) {
    zero_engine_t* e = get();
    CheckNoGil([&] { return zero_engine_grad_ready(e, id); });
  }

  int32_t DType() const {
    zero_dtype dtype = ZERO_DTYPE_F32;
    Check(zero_engine_dtype(get(), &dtype));
    return static_cast<int32_t>(dtype);
  }

  double LrForStep(int64_t step) const {
    double lr = 0.0;
    Check(zero_engine_lr_for_step(get(), step, &lr));
    return lr;
  }

  double LossScale() const {
    double scale = 0.0;
    Check(zero_engine_loss_scale(get(), &scale));
    return scale;
  }

  py::dict Step() {
    zero_engine_t* e = get();
    zero_step_info info = ZERO_STEP_INFO_INIT;
    CheckNoGil([&] { return zero_engine_step(e, &info); });
    py::dict d;  // zero.StepInfo.from_c makes the flags bools
#define ZERO_FIELD(f) d[#f] = info.f;
    ZERO_STEP_INFO_FIELDS(ZERO_FIELD)
#undef ZERO_FIELD
    return d;
  }

  void ReportSamples(int64_t samples) {
    Check(zero_engine_report_samples(get(), samples));
  }

  // out: address of numel float32 values.
  void ReadMaster(int32_t id, uintptr_t out) {
    zero_engine_t* e = get();
    CheckNoGil([&] { return zero_engine_read_master(e, id, reinterpret_cast<float*>(out)); });
  }

  // values: address of numel float32 values, the same on every rank.
  void WriteMaster(int32_t id, uintptr_t values) {
    zero_engine_t* e = get();
    CheckNoGil([&] { return zero_engine_write_master(e, id, reinterpret_cast<const float*>(values)); });
  }

  // values: address of count float32 values for elements [offset,
  // offset+count) of the param, the same on every rank (1.5).
  void WriteMasterRange(int32_t id, int64_t offset, int64_t count, uintptr_t values) {
    zero_engine_t* e = get();
    CheckNoGil([&] {
      return zero_engine_write_master_range(e, id, offset, count,
                                            reinterpret_cast<const float*>(values));
    });
  }

  // The registered description of a param (zero_param_info).
  py::dict ParamInfo(int32_t id) const {
    zero_param_info info = ZERO_PARAM_INFO_INIT;
    Check(zero_engine_param_info(get(), id, &info));
    py::list shape;
    for (int32_t i = 0; i < info.ndim; ++i) shape.append(info.shape[i]);
    py::dict d;
    d["name"] = std::string(info.name != nullptr ? info.name : "");
    d["shape"] = py::tuple(shape);
    d["dtype"] = static_cast<int32_t>(info.dtype);
    d["trainable"] = info.trainable != 0;
    return d;
  }

  int32_t GradientAccumulationSteps() const {
    int32_t steps = 0;
    Check(zero_engine_gradient_accumulation_steps(get(), &steps));
    return steps;
  }

  // fn(what, done, total) -> bool, or None: progress of save, load and
  // (set before finalize) NVMe preallocation.
  void SetProgress(py::object fn) {
    zero_engine_t* e = get();
    if (fn.is_none()) {
      Check(zero_engine_set_progress(e, nullptr, nullptr));
      progress_ = py::none();
    } else {
      progress_ = std::move(fn);
      Check(zero_engine_set_progress(e, &PyProgress, progress_.ptr()));
    }
  }

  void Save(const std::string& dir, const std::string& tag, bool async, int32_t keep_last,
            bool exclude_frozen) {
    zero_engine_t* e = get();
    zero_save_options options = ZERO_SAVE_OPTIONS_INIT;
    options.asynchronous = async ? 1 : 0;
    options.keep_last = keep_last;
    options.exclude_frozen = exclude_frozen ? 1 : 0;
    CheckNoGil([&] { return zero_engine_save_with(e, dir.c_str(), tag.c_str(), &options); });
  }

  void WaitCheckpoint() {
    zero_engine_t* e = get();
    CheckNoGil([&] { return zero_engine_wait_checkpoint(e); });
  }

  // dir None: off.
  void SetPreemption(const std::optional<std::string>& dir, int32_t signal,
                     const std::optional<std::string>& tag, bool exit, int32_t exit_code) {
    zero_engine_t* e = get();
    if (!dir) {
      Check(zero_engine_set_preemption(e, nullptr));
      return;
    }
    zero_preemption_options options = ZERO_PREEMPTION_OPTIONS_INIT;
    options.signal = signal;
    options.dir = dir->c_str();
    options.tag = tag ? tag->c_str() : nullptr;
    options.exit = exit ? 1 : 0;
    options.exit_code = exit_code;
    Check(zero_engine_set_preemption(e, &options));
  }

  // tag: None loads DIR/latest.
  void Load(const std::string& dir, const std::optional<std::string>& tag,
            bool load_optimizer_states, bool allow_missing) {
    zero_engine_t* e = get();
    zero_load_options options = ZERO_LOAD_OPTIONS_INIT;
    options.load_optimizer_states = load_optimizer_states ? 1 : 0;
    options.allow_missing = allow_missing ? 1 : 0;
    CheckNoGil([&] { return zero_engine_load(e, dir.c_str(), tag ? tag->c_str() : nullptr, &options); });
  }

  // Returns the tensor bytes this rank read.
  int64_t LoadSafetensors(const std::string& path, bool allow_missing,
                          const std::optional<std::string>& prefix_strip,
                          const std::optional<std::string>& prefix_add) {
    zero_engine_t* e = get();
    zero_safetensors_options options = ZERO_SAFETENSORS_OPTIONS_INIT;
    int64_t bytes_read = 0;
    options.allow_missing = allow_missing ? 1 : 0;
    options.prefix_strip = prefix_strip ? prefix_strip->c_str() : nullptr;
    options.prefix_add = prefix_add ? prefix_add->c_str() : nullptr;
    options.bytes_read = &bytes_read;
    CheckNoGil([&] { return zero_engine_load_safetensors(e, path.c_str(), &options); });
    return bytes_read;
  }

  // wall_clock_breakdown: the last optimizer step's phases.
  py::dict StepBreakdown() const {
    zero_step_breakdown b = ZERO_STEP_BREAKDOWN_INIT;
    Check(zero_engine_step_breakdown(get(), &b));
    py::dict d;
#define ZERO_FIELD(f) d[#f] = b.f;
    ZERO_STEP_BREAKDOWN_FIELDS(ZERO_FIELD)
#undef ZERO_FIELD
    return d;
  }

  // comms_logger: one dict per collective and message-size bucket.
  py::list CommLog() const {
    int32_t n = 0;
    Check(zero_engine_comm_log(get(), nullptr, 0, &n));
    std::vector<zero_comm_log_entry> raw(n);
    for (auto& e : raw) e = ZERO_COMM_LOG_ENTRY_INIT;
    Check(zero_engine_comm_log(get(), raw.data(), n, &n));
    py::list out;
    for (int32_t i = 0; i < n && i < static_cast<int32_t>(raw.size()); ++i) {
      py::dict d;
#define ZERO_FIELD(f) d[#f] = raw[i].f;
      ZERO_COMM_LOG_ENTRY_FIELDS(ZERO_FIELD)
#undef ZERO_FIELD
      out.append(d);
    }
    return out;
  }

  std::string CommLogSummary() const {
    size_t length = 0;
    Check(zero_engine_comm_log_summary(get(), nullptr, 0, &length));
    std::string s(length + 1, '\0');
    Check(zero_engine_comm_log_summary(get(), s.data(), s.size(), &length));
    s.resize(length);
    return s;
  }

  // Asked again while it grew between the two calls (a reduction still
  // running on the comm stream adds records).
  std::string FlightRecord() const {
    size_t length = 0;
    Check(zero_engine_flight_record(get(), nullptr, 0, &length));
    std::string s;
    do {
      s.assign(length + 1, '\0');
      Check(zero_engine_flight_record(get(), s.data(), s.size(), &length));
    } while (length >= s.size());
    s.resize(length);
    return s;
  }

  py::dict Stats() const {
    zero_stats st = ZERO_STATS_INIT;
    Check(zero_engine_stats(get(), &st));
    py::dict d;
#define ZERO_FIELD(f) d[#f] = st.f;
    ZERO_STATS_FIELDS(ZERO_FIELD)
#undef ZERO_FIELD
    return d;
  }

 private:
  py::object progress_ = py::none();  // the engine's progress callable
  struct PyFill {
    py::object fn;
    std::string error;
    static int32_t Call(void* user, const char* name, int64_t offset, int64_t count, float* out) {
      auto* f = static_cast<PyFill*>(user);
      py::gil_scoped_acquire gil;
      try {
        py::buffer b = f->fn(name, offset, count);
        py::buffer_info info = b.request();
        if (info.itemsize != 4 || info.size != count) {
          f->error = "fill returned " + std::to_string(info.size) + " items of " +
                     std::to_string(info.itemsize) + " bytes, not " + std::to_string(count) +
                     " float32";
          return 2;
        }
        std::memcpy(out, info.ptr, static_cast<size_t>(count) * sizeof(float));
        return 0;
      } catch (py::error_already_set& e) {
        f->error = e.what();
        return 1;
      } catch (const std::exception& e) {
        f->error = e.what();
        return 1;
      }
    }
  };

  std::vector<std::unique_ptr<PyFill>> fills_;
  zero_engine_t* engine_ = nullptr;
  std::shared_ptr<CommHandle> comm_;  // keeps the C comm alive
};

}  // namespace

PYBIND11_MODULE(_zero_c, m) {
  m.def("estimate_memory",
        [](const std::string& json, const std::vector<int64_t>& numel,
           const std::vector<int32_t>& ndim, int32_t ranks_per_node, int32_t nodes, bool gpu) {
          if (numel.size() != ndim.size()) {
            throw py::value_error("estimate_memory: numel and ndim differ in length");
          }
          zero_memory_estimate e = ZERO_MEMORY_ESTIMATE_INIT;
          Check(zero_estimate_memory(json.c_str(), static_cast<int32_t>(numel.size()),
                                     numel.data(), ndim.data(), ranks_per_node, nodes,
                                     gpu ? 1 : 0, &e));
          return EstimateDict(e);
        });
  // 1.16: params as registration describes them (names, frozen, use_muon).
  m.def("estimate_memory_params",
        [](const std::string& json, const std::vector<std::string>& names,
           const std::vector<std::vector<int64_t>>& shapes, const std::vector<int32_t>& dtypes,
           const std::vector<bool>& trainable, const std::vector<int32_t>& use_muon,
           int32_t ranks_per_node, int32_t nodes, bool gpu) {
          const size_t n = names.size();
          if (shapes.size() != n || dtypes.size() != n || trainable.size() != n ||
              use_muon.size() != n) {
            throw py::value_error(
                "estimate_memory_params: names, shapes, dtypes, trainable and use_muon differ "
                "in length");
          }
          std::vector<zero_param_desc> descs;
          descs.reserve(n);
          for (size_t i = 0; i < n; ++i) {
            descs.push_back(Desc(names[i], shapes[i], dtypes[i], trainable[i], use_muon[i]));
          }
          zero_memory_estimate e = ZERO_MEMORY_ESTIMATE_INIT;
          Check(zero_estimate_memory_params(json.c_str(), static_cast<int32_t>(n),
                                            descs.empty() ? nullptr : descs.data(),
                                            ranks_per_node, nodes, gpu ? 1 : 0, &e));
          return EstimateDict(e);
        });

  m.doc() = "Thin binding of the zero C ABI (zero_c.h); use the `zero` package.";

  m.attr("HEADER_VERSION") = ZERO_VERSION_CODE;
  m.def("version", &zero_version, "The library's version code.");
  m.def(
      "status_string",
      [](int status) {
        return std::string(zero_status_string(static_cast<zero_status>(status)));
      },
      "Static description of a status code.");
  m.def(
      "set_error_factory",
      [](py::object factory) { ErrorFactory() = std::move(factory); },
      "Registers f(status, message) -> exception instance for failed calls.");

  py::enum_<zero_status> status(m, "Status");
#define ZERO_STATUS_VALUE(name) status.value(#name, ZERO_##name);
  ZERO_STATUS_VALUES(ZERO_STATUS_VALUE)
#undef ZERO_STATUS_VALUE
  m.attr("MAX_DIMS") = ZERO_MAX_DIMS;

  m.attr("DTYPE_F32") = static_cast<int>(ZERO_DTYPE_F32);
  m.attr("DTYPE_F16") = static_cast<int>(ZERO_DTYPE_F16);
  m.attr("DTYPE_BF16") = static_cast<int>(ZERO_DTYPE_BF16);

  zero_py::RegisterCheckpointTools(m);
  zero_py::RegisterConversions(m);
  zero_py::RegisterComm(m);

  py::class_<Engine>(m, "Engine")
      .def(py::init<const std::string&, const Comm&>(), py::arg("json_text"),
           py::arg("comm"))
      .def("register_param", &Engine::RegisterParam, py::arg("name"),
           py::arg("shape"), py::arg("dtype"), py::arg("init"),
           py::arg("trainable"), py::arg("use_muon") = 0)
      .def("register_param_init", &Engine::RegisterParamInit, py::arg("name"),
           py::arg("shape"), py::arg("dtype"), py::arg("trainable"), py::arg("kind"),
           py::arg("seed"), py::arg("value"), py::arg("low"), py::arg("high"),
           py::arg("mean"), py::arg("std"), py::arg("a"), py::arg("fan_in"),
           py::arg("use_muon") = 0)
      .def("register_param_fill", &Engine::RegisterParamFill, py::arg("name"),
           py::arg("shape"), py::arg("dtype"), py::arg("trainable"), py::arg("fill"),
           py::arg("use_muon") = 0)
      .def("finalize", &Engine::Finalize)
      .def("num_params", &Engine::NumParams)
      .def("find_param", &Engine::FindParam, py::arg("name"))
      .def("param_numel", &Engine::ParamNumel, py::arg("id"))
      .def("gather", &Engine::Gather, py::arg("id"))
      .def("gather_into", &Engine::GatherInto, py::arg("id"), py::arg("dtype"), py::arg("dst"),
           py::arg("bytes"))
      .def("release", &Engine::Release, py::arg("id"))
      .def("gather_into_many", &Engine::GatherIntoMany, py::arg("ids"), py::arg("count"),
           py::arg("dtype"), py::arg("dsts"), py::arg("bytes"))
      .def("release_many", &Engine::ReleaseMany, py::arg("ids"), py::arg("count"))
      .def("set_grad", &Engine::SetGrad, py::arg("id"), py::arg("dtype"), py::arg("src"),
           py::arg("bytes"))
      .def("grad_buffer", &Engine::GradBuffer, py::arg("id"))
      .def("grad_ready", &Engine::GradReady, py::arg("id"))
      .def("set_device", &Engine::SetDevice, py::arg("kind"), py::arg("ordinal"))
      .def("device_info", &Engine::DeviceInfo)
      .def("copy", &Engine::Copy, py::arg("dst"), py::arg("src"), py::arg("bytes"))
      .def("dtype", &Engine::DType)
      .def("loss_scale", &Engine::LossScale)
      .def("lr_for_step", &Engine::LrForStep, py::arg("step"))
      .def("step", &Engine::Step)
      .def("report_samples", &Engine::ReportSamples, py::arg("samples"))
      .def("read_master", &Engine::ReadMaster, py::arg("id"), py::arg("out"))
      .def("write_master", &Engine::WriteMaster, py::arg("id"), py::arg("values"))
      .def("write_master_range", &Engine::WriteMasterRange, py::arg("id"), py::arg("offset"),
           py::arg("count"), py::arg("values"))
      .def("param_info", &Engine::ParamInfo, py::arg("id"))
      .def("gradient_accumulation_steps", &Engine::GradientAccumulationSteps)
      .def("set_progress", &Engine::SetProgress, py::arg("fn"))
      .def("save", &Engine::Save, py::arg("dir"), py::arg("tag"), py::arg("async_") = false,
           py::arg("keep_last") = 0, py::arg("exclude_frozen") = false)
      .def("wait_checkpoint", &Engine::WaitCheckpoint)
      .def("set_preemption", &Engine::SetPreemption, py::arg("dir"), py::arg("signal"),
           py::arg("tag"), py::arg("exit"), py::arg("exit_code"))
      .def("load", &Engine::Load, py::arg("dir"), py::arg("tag"),
           py::arg("load_optimizer_states"), py::arg("allow_missing"))
      .def("load_safetensors", &Engine::LoadSafetensors, py::arg("path"),
           py::arg("allow_missing"), py::arg("prefix_strip"), py::arg("prefix_add"))
      .def("stats", &Engine::Stats)
      .def("step_breakdown", &Engine::StepBreakdown)
      .def("comm_log", &Engine::CommLog)
      .def("comm_log_summary", &Engine::CommLogSummary)
      .def("flight_record", &Engine::FlightRecord)
      .def("close", &Engine::Destroy)
      .def_property_readonly("closed", &Engine::closed);
}

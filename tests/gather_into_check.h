// zero_engine_gather_into (1.7; every stage since 1.8) against
// zero_engine_gather, through the C ABI only: two engines of one config, model and gradients, trained side by
// side on one rank; engine A hands params out through gather, engine B
// writes them into this test's memory through gather_into, with the same
// calls in the same order (so the same trace and prefetches: B's gathers
// after the first step find prefetched params and copy them). Every
// gathered param must be bit for bit A's, and at the first gather (fp32) the
// registered init values; a nested gather_into into a second buffer too.
// Shared by gather_into_capi_test (thread ranks) and gather_into_mpi_main.
#ifndef ZERO_TESTS_GATHER_INTO_CHECK_H_
#define ZERO_TESTS_GATHER_INTO_CHECK_H_

#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "zero_c.h"

namespace gather_into_check {

struct ParamDef {
  const char* name;
  std::vector<int64_t> shape;
  bool trainable;
};

// Sizes around the persistence threshold (40) and shards that do not
// divide evenly at 2 and 3 ranks; one frozen param.
inline std::vector<ParamDef> Params() {
  return {{"embed", {37, 23}, true},
          {"bias", {30}, true},  // persistent
          {"w1", {23, 41}, true},
          {"frozen", {7, 9}, false},
          {"w2", {41, 17}, true},
          {"w3", {5, 300}, true}};
}

inline int64_t Numel(const ParamDef& p) {
  int64_t n = 1;
  for (int64_t d : p.shape) n *= d;
  return n;
}

inline float InitValue(int id, int64_t i) {
  return static_cast<float>(((id * 7919 + i * 104729) % 2001) - 1000) / 997.0f;
}

inline size_t ElemSize(zero_dtype t) { return t == ZERO_DTYPE_F32 ? 4 : 2; }

// The ds_config of both engines; `offload`: "", "cpu" or "nvme" (then
// `nvme_path`, a folder per engine); ZeRO `stage` 0..3.
inline std::string Config(zero_dtype dtype, const std::string& offload,
                          const std::string& nvme_path, int stage = 3) {
  std::string precision;
  if (dtype == ZERO_DTYPE_F16) precision = R"("fp16": {"enabled": true},)";
  if (dtype == ZERO_DTYPE_BF16) precision = R"("bf16": {"enabled": true},)";
  std::string off;
  if (offload == "cpu") off = R"(, "offload_param": {"device": "cpu"})";
  if (offload == "nvme") {
    off = R"(, "offload_param": {"device": "nvme", "nvme_path": ")" + nvme_path + R"("})";
  }
  return std::string(R"({"steps_per_print": 0, "gradient_accumulation_steps": 1,)") +
         precision +
         R"("optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
            "zero_optimization": {"stage": )" + std::to_string(stage) + R"(, "overlap_comm": true,
              "stage3_param_persistence_threshold": 40,
              "stage3_prefetch_bucket_size": 2000)" +
         off + "}}";
}

// "" or what went wrong (the first failure), with the call and its message.
inline std::string Expect(zero_status s, const char* what) {
  if (s == ZERO_OK) return "";
  return std::string(what) + ": " + zero_status_string(s) + ": " + zero_last_error();
}

#define GIC_TRY(call)                            \
  do {                                           \
    std::string e_ = Expect((call), #call);      \
    if (!e_.empty()) return e_;                  \
  } while (0)

// `standin`: the engine's state on the CPU stand-in for a GPU (device
// "cuda" under ZERO_GPU_STANDIN=1): pointers the host cannot touch, read
// and written through zero_engine_copy.
inline std::string MakeEngine(zero_comm_t* comm, const std::string& json, bool standin,
                              zero_engine_t** out) {
  GIC_TRY(zero_engine_create_json(json.c_str(), comm, out));
  if (standin) GIC_TRY(zero_engine_set_device(*out, "cuda", 0));
  const std::vector<ParamDef> defs = Params();
  zero_dtype dtype = ZERO_DTYPE_F32;
  GIC_TRY(zero_engine_dtype(*out, &dtype));
  for (size_t k = 0; k < defs.size(); ++k) {
    std::vector<float> init(Numel(defs[k]));
    for (int64_t i = 0; i < Numel(defs[k]); ++i) init[i] = InitValue(static_cast<int>(k), i);
    zero_param_desc d = ZERO_PARAM_DESC_INIT;
    d.name = defs[k].name;
    d.ndim = static_cast<int32_t>(defs[k].shape.size());
    d.shape = defs[k].shape.data();
    d.dtype = defs[k].trainable ? dtype : ZERO_DTYPE_F32;
    d.init = init.data();
    d.trainable = defs[k].trainable ? 1 : 0;
    int32_t id = -1;
    GIC_TRY(zero_engine_register_param(*out, &d, &id));
  }
  GIC_TRY(zero_engine_finalize(*out));
  return "";
}

// Trains engines a (gather) and b (gather_into) side by side for `steps`
// steps on this rank; "" when every gathered param matched bit for bit.
// `rank` only varies the gradients.
inline std::string Run(zero_comm_t* comm_a, zero_comm_t* comm_b, zero_dtype dtype,
                       const std::string& offload, const std::string& nvme_root,
                       int rank, int steps, bool standin = false, int stage = 3) {
  zero_engine_t* a = nullptr;
  zero_engine_t* b = nullptr;
  if (offload == "nvme") {  // the ranks share the folders: EEXIST is fine
    for (const std::string& d : {nvme_root, nvme_root + "/a", nvme_root + "/b"}) {
      ::mkdir(d.c_str(), 0755);
    }
  }
  std::string err = MakeEngine(comm_a, Config(dtype, offload, nvme_root + "/a", stage), standin, &a);
  if (err.empty()) {
    err = MakeEngine(comm_b, Config(dtype, offload, nvme_root + "/b", stage), standin, &b);
  }
  const std::vector<ParamDef> defs = Params();
  const int n = static_cast<int>(defs.size());
  auto esize = [&](int id) { return defs[id].trainable ? ElemSize(dtype) : 4; };
  auto pdtype = [&](int id) { return defs[id].trainable ? dtype : ZERO_DTYPE_F32; };
  // B's memory: one buffer per param, and a second for nested gathers.
  std::vector<std::vector<char>> into(n), nested(n);
  for (int id = 0; id < n; ++id) {
    into[id].assign(Numel(defs[id]) * esize(id), 0);
    nested[id].assign(Numel(defs[id]) * esize(id), 0);
  }
  // A's gathered values where the host can read them.
  std::vector<char> host;
  auto readable = [&](const void* pa, size_t bytes) -> const void* {
    if (!standin) return pa;
    host.assign(bytes, 0);
    return zero_engine_copy(a, host.data(), pa, bytes) == ZERO_OK ? host.data() : nullptr;
  };
  auto gather_both = [&](int id, int step, const char* phase) -> std::string {
    void* pa = nullptr;
    GIC_TRY(zero_engine_gather(a, id, &pa));
    GIC_TRY(zero_engine_gather_into(b, id, pdtype(id), into[id].data(), into[id].size()));
    const void* ra = readable(pa, into[id].size());
    if (ra == nullptr) return std::string("zero_engine_copy: ") + zero_last_error();
    if (std::memcmp(ra, into[id].data(), into[id].size()) != 0) {
      return std::string("rank ") + std::to_string(rank) + " step " + std::to_string(step) +
             " " + phase + ": '" + defs[id].name + "' from gather_into differs from gather";
    }
    if (step == 0 && dtype == ZERO_DTYPE_F32) {
      for (int64_t i = 0; i < Numel(defs[id]); ++i) {
        float v;
        std::memcpy(&v, into[id].data() + 4 * i, 4);
        if (v != InitValue(id, i)) {
          return std::string("'") + defs[id].name + "' element " + std::to_string(i) +
                 " is not its init value";
        }
      }
    }
    return "";
  };
  for (int step = 0; err.empty() && step < steps; ++step) {
    // Forward: each param held until the next one is gathered; w2 nested
    // (a second gather_into, into another buffer, while held).
    for (int id = 0; err.empty() && id < n; ++id) {
      err = gather_both(id, step, "forward");
      if (!err.empty()) break;
      if (std::string(defs[id].name) == "w2") {
        void* pa = nullptr;
        err = Expect(zero_engine_gather(a, id, &pa), "nested gather");
        if (err.empty()) {
          err = Expect(zero_engine_gather_into(b, id, pdtype(id), nested[id].data(),
                                               nested[id].size()),
                       "nested gather_into");
        }
        const void* ra = err.empty() ? readable(pa, nested[id].size()) : nullptr;
        if (err.empty() && ra == nullptr) err = std::string("zero_engine_copy: ") + zero_last_error();
        if (err.empty() && std::memcmp(nested[id].data(), ra, nested[id].size()) != 0) {
          err = "nested gather_into of 'w2' differs from gather";
        }
        if (err.empty()) err = Expect(zero_engine_release(a, id), "release a");
        if (err.empty()) err = Expect(zero_engine_release(b, id), "release b");
      }
      if (err.empty() && id > 0) {
        err = Expect(zero_engine_release(a, id - 1), "release a");
        if (err.empty()) err = Expect(zero_engine_release(b, id - 1), "release b");
      }
    }
    zero_stats sa = ZERO_STATS_INIT, sb = ZERO_STATS_INIT;
    if (err.empty() && stage == 3) {
      // Held in B's memory: live on both engines alike, not B's buffers.
      err = Expect(zero_engine_stats(a, &sa), "stats a");
      if (err.empty()) err = Expect(zero_engine_stats(b, &sb), "stats b");
      if (err.empty() && sa.live_gathered_bytes != sb.live_gathered_bytes) {
        err = "live_gathered_bytes differ: " + std::to_string(sa.live_gathered_bytes) +
              " vs " + std::to_string(sb.live_gathered_bytes);
      }
    }
    if (err.empty()) err = Expect(zero_engine_release(a, n - 1), "release a");
    if (err.empty()) err = Expect(zero_engine_release(b, n - 1), "release b");
    if (err.empty() && stage == 3) {
      // Releasing "w3", held in B's memory, frees none of B's buffers (off
      // the host it was gathered into B's buffer and copied: that goes).
      zero_stats after = ZERO_STATS_INIT;
      if (err.empty()) err = Expect(zero_engine_stats(b, &after), "stats b");
      const int64_t w3 = Numel(defs[n - 1]) * static_cast<int64_t>(ElemSize(dtype));
      if (err.empty() && (after.live_gathered_bytes != sb.live_gathered_bytes - w3 ||
                          after.buffer_bytes != sb.buffer_bytes - (standin ? w3 : 0))) {
        err = "releasing a gather_into changed buffer_bytes " + std::to_string(sb.buffer_bytes) +
              " -> " + std::to_string(after.buffer_bytes) + " or live bytes " +
              std::to_string(sb.live_gathered_bytes) + " -> " +
              std::to_string(after.live_gathered_bytes);
      }
    }
    // Backward, in reverse: gathered again, a gradient, released.
    for (int id = n - 1; err.empty() && id >= 0; --id) {
      err = gather_both(id, step, "backward");
      if (!err.empty()) break;
      if (defs[id].trainable) {
        for (zero_engine_t* e : {a, b}) {
          void* gdev = nullptr;
          err = Expect(zero_engine_grad_buffer(e, id, &gdev), "grad_buffer");
          if (!err.empty()) break;
          const size_t gbytes = Numel(defs[id]) * ElemSize(dtype);
          std::vector<char> ghost(gbytes);
          void* g = standin ? static_cast<void*>(ghost.data()) : gdev;
          for (int64_t i = 0; i < Numel(defs[id]); ++i) {
            const float v = static_cast<float>(((i * 31 + id * 17 + rank * 5 + step) % 19) - 9) / 64.0f;
            if (dtype == ZERO_DTYPE_F32) {
              static_cast<float*>(g)[i] = v;
            } else {
              // Small exact values: bf16 is fp32's top half; fp16 of k/64
              // for |k| < 10 as IEEE half (sign, exponent, mantissa).
              uint32_t bits;
              std::memcpy(&bits, &v, 4);
              uint16_t h = static_cast<uint16_t>(bits >> 16);
              if (dtype == ZERO_DTYPE_F16) {
                const uint32_t sign = bits >> 31, exp = (bits >> 23) & 0xff,
                               man = bits & 0x7fffff;
                h = v == 0.0f ? 0
                              : static_cast<uint16_t>((sign << 15) | ((exp - 112) << 10) |
                                                      (man >> 13));
              }
              static_cast<uint16_t*>(g)[i] = h;
            }
          }
          if (standin) err = Expect(zero_engine_copy(e, gdev, ghost.data(), gbytes), "copy grad");
          if (err.empty()) err = Expect(zero_engine_grad_ready(e, id), "grad_ready");
          if (!err.empty()) break;
        }
      }
      if (err.empty()) err = Expect(zero_engine_release(a, id), "release a");
      if (err.empty()) err = Expect(zero_engine_release(b, id), "release b");
    }
    zero_step_info ia = ZERO_STEP_INFO_INIT, ib = ZERO_STEP_INFO_INIT;
    if (err.empty()) err = Expect(zero_engine_step(a, &ia), "step a");
    if (err.empty()) err = Expect(zero_engine_step(b, &ib), "step b");
    if (err.empty() && (ia.grad_norm != ib.grad_norm || ia.skipped != ib.skipped)) {
      err = "the steps differ";
    }
  }
  zero_engine_destroy(a);
  zero_engine_destroy(b);
  return err;
}

#undef GIC_TRY

}  // namespace gather_into_check

#endif  // ZERO_TESTS_GATHER_INTO_CHECK_H_

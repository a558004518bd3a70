// zero_engine_gather_into_many / zero_engine_release_many (1.15) through
// the C ABI, the checks shared by gather_many_capi_test (thread ranks) and
// gather_many_mpi_main (mpirun): two engines of one config and model trained
// side by side, engine A with one gather_into/release per param, engine B
// with one batched call per block and the same params in the same order;
// every gathered param must be A's bit for bit (the registered init values at
// the first fp32 gather) and the masters equal after the steps. And the
// refusals, which every rank makes alike: a bad id, size or NULL dst in the
// middle names the entry and its param and gathers nothing; the live budget
// running out partway releases what the call gathered; a release too many
// releases nothing; count 0.
#ifndef ZERO_TESTS_GATHER_MANY_CHECK_H_
#define ZERO_TESTS_GATHER_MANY_CHECK_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "tests/gather_into_check.h"
#include "zero_c.h"

namespace gather_many_check {

using gather_into_check::Config;
using gather_into_check::ElemSize;
using gather_into_check::Expect;
using gather_into_check::InitValue;
using gather_into_check::MakeEngine;
using gather_into_check::Numel;
using gather_into_check::ParamDef;
using gather_into_check::Params;

// A block's arrays: ids, one buffer per entry, their addresses and sizes.
struct Block {
  std::vector<int32_t> ids;
  std::vector<std::vector<char>> bufs;
  std::vector<void*> dsts;
  std::vector<size_t> bytes;
};

inline Block MakeBlock(const std::vector<int32_t>& ids, const std::vector<ParamDef>& defs,
                       zero_dtype dtype) {
  Block b;
  b.ids = ids;
  for (int32_t id : ids) {
    b.bufs.emplace_back(Numel(defs[id]) * ElemSize(dtype), 0);
    b.bytes.push_back(b.bufs.back().size());
  }
  for (auto& buf : b.bufs) b.dsts.push_back(buf.data());
  return b;
}

// Trains A (single calls) and B (batched) for `steps` steps; "" when every
// gathered param and every master matched bit for bit. `standin`: on the
// CPU stand-in for a GPU (gathered into the engine's buffers and copied).
inline std::string SideBySide(zero_comm_t* ca, zero_comm_t* cb, zero_dtype dtype, int rank,
                              int steps, bool standin = false) {
  zero_engine_t* a = nullptr;
  zero_engine_t* b = nullptr;
  std::string err = MakeEngine(ca, Config(dtype, "", ""), standin, &a);
  if (err.empty()) err = MakeEngine(cb, Config(dtype, "", ""), standin, &b);
  const std::vector<ParamDef> defs = Params();
  // Blocks of the working dtype's params (the frozen one is fp32: in the
  // fp32 model it joins the first block); the persistent "bias" among them.
  std::vector<std::vector<int32_t>> blocks = {{0, 1, 2}, {4, 5}};
  if (dtype == ZERO_DTYPE_F32) blocks[0].push_back(3);
  auto check_block = [&](const std::vector<int32_t>& ids, int step,
                         const char* phase) -> std::string {
    Block ba = MakeBlock(ids, defs, dtype);
    Block bb = MakeBlock(ids, defs, dtype);
    for (size_t k = 0; k < ids.size(); ++k) {
      std::string e = Expect(zero_engine_gather_into(a, ids[k], dtype, ba.dsts[k], ba.bytes[k]),
                             "gather_into a");
      if (!e.empty()) return e;
    }
    std::string e = Expect(zero_engine_gather_into_many(b, bb.ids.data(), ids.size(), dtype,
                                                        bb.dsts.data(), bb.bytes.data()),
                           "gather_into_many b");
    if (!e.empty()) return e;
    for (size_t k = 0; k < ids.size(); ++k) {
      if (ba.bufs[k] != bb.bufs[k]) {
        return "rank " + std::to_string(rank) + " step " + std::to_string(step) + " " + phase +
               ": '" + defs[ids[k]].name + "' from gather_into_many differs from gather_into";
      }
      if (step == 0 && dtype == ZERO_DTYPE_F32) {
        for (int64_t i = 0; i < Numel(defs[ids[k]]); ++i) {
          float v;
          std::memcpy(&v, bb.bufs[k].data() + 4 * i, 4);
          if (v != InitValue(ids[k], i)) {
            return std::string("'") + defs[ids[k]].name + "' element " + std::to_string(i) +
                   " is not its init value";
          }
        }
      }
    }
    for (int32_t id : ids) {
      e = Expect(zero_engine_release(a, id), "release a");
      if (!e.empty()) return e;
    }
    return Expect(zero_engine_release_many(b, bb.ids.data(), ids.size()), "release_many b");
  };
  for (int step = 0; err.empty() && step < steps; ++step) {
    for (size_t j = 0; err.empty() && j < blocks.size(); ++j) {
      err = check_block(blocks[j], step, "forward");
    }
    // Backward: the blocks in reverse, each in reverse order (the order is
    // the caller's), then the gradients.
    for (size_t j = blocks.size(); err.empty() && j-- > 0;) {
      err =
          check_block(std::vector<int32_t>(blocks[j].rbegin(), blocks[j].rend()), step, "backward");
      for (int32_t id : blocks[j]) {
        if (!err.empty() || !defs[id].trainable) continue;
        std::vector<float> g(Numel(defs[id]));
        for (size_t i = 0; i < g.size(); ++i) {
          g[i] = static_cast<float>(((i * 31 + id * 17 + rank * 5 + step) % 19) - 9) / 64.0f;
        }
        for (zero_engine_t* e : {a, b}) {
          if (err.empty()) {
            err = Expect(zero_engine_set_grad(e, id, ZERO_DTYPE_F32, g.data(), g.size() * 4),
                         "set_grad");
          }
        }
      }
    }
    if (err.empty()) err = Expect(zero_engine_step(a, nullptr), "step a");
    if (err.empty()) err = Expect(zero_engine_step(b, nullptr), "step b");
  }
  for (int id = 0; err.empty() && id < static_cast<int>(defs.size()); ++id) {
    std::vector<float> ma(Numel(defs[id])), mb(Numel(defs[id]));
    err = Expect(zero_engine_read_master(a, id, ma.data()), "read_master a");
    if (err.empty()) err = Expect(zero_engine_read_master(b, id, mb.data()), "read_master b");
    if (err.empty() && std::memcmp(ma.data(), mb.data(), ma.size() * 4) != 0) {
      err = std::string("master of '") + defs[id].name + "' differs after the steps";
    }
  }
  zero_engine_destroy(a);
  zero_engine_destroy(b);
  return err;
}

// "" when `s` is `want` and the message holds every needle.
inline std::string Refused(zero_status s, zero_status want,
                           const std::vector<std::string>& needles) {
  if (s != want) {
    return std::string("got ") + zero_status_string(s) + " (" + zero_last_error() + "), want " +
           zero_status_string(want);
  }
  for (const std::string& n : needles) {
    if (std::string(zero_last_error()).find(n) == std::string::npos) {
      return std::string("'") + zero_last_error() + "' lacks '" + n + "'";
    }
  }
  return "";
}

// Live gathered bytes now, or -1.
inline int64_t Live(zero_engine_t* e) {
  zero_stats s = ZERO_STATS_INIT;
  return zero_engine_stats(e, &s) == ZERO_OK ? s.live_gathered_bytes : -1;
}

#define GM_TRY(expr)                           \
  do {                                         \
    std::string e_ = (expr);                   \
    if (!e_.empty()) return e_ + " at " #expr; \
  } while (0)

// Every refusal on one rank of `comm` (all ranks call alike), with a live
// budget (stage3_max_live_parameters) that holds two of the test's block.
inline std::string Refusals(zero_comm_t* comm) {
  const std::string json =
      R"({"steps_per_print": 0, "zero_optimization": {"stage": 3,
      "stage3_param_persistence_threshold": 40, "stage3_prefetch_bucket_size": 0,
      "stage3_max_live_parameters": 2000}})";
  zero_engine_t* e = nullptr;
  GM_TRY(MakeEngine(comm, json, false, &e));
  const std::vector<ParamDef> defs = Params();
  const zero_dtype f32 = ZERO_DTYPE_F32;
  std::string err = [&]() -> std::string {
    // embed (851), w1 (943), w2 (697): the first two fit the budget of 2000.
    Block blk = MakeBlock({0, 2, 4}, defs, f32);
    // An unknown id in the middle: named, nothing gathered.
    std::vector<int32_t> bad_ids = {0, 99, 4};
    GM_TRY(Refused(
        zero_engine_gather_into_many(e, bad_ids.data(), 3, f32, blk.dsts.data(), blk.bytes.data()),
        ZERO_INVALID_ARGUMENT, {"gather_into_many, entry 1", "no param with id 99"}));
    if (Live(e) != 0) return "a refused batch left params gathered";
    // A wrong size in the middle names the param.
    std::vector<size_t> bad_bytes = blk.bytes;
    bad_bytes[1] -= 4;
    GM_TRY(Refused(
        zero_engine_gather_into_many(e, blk.ids.data(), 3, f32, blk.dsts.data(), bad_bytes.data()),
        ZERO_INVALID_ARGUMENT, {"entry 1", "gather_into 'w1'", "take 3772"}));
    std::vector<void*> bad_dsts = blk.dsts;
    bad_dsts[2] = nullptr;
    GM_TRY(Refused(
        zero_engine_gather_into_many(e, blk.ids.data(), 3, f32, bad_dsts.data(), blk.bytes.data()),
        ZERO_INVALID_ARGUMENT, {"entry 2", "'w2': dst is NULL"}));
    GM_TRY(Refused(zero_engine_gather_into_many(e, blk.ids.data(), 3, ZERO_DTYPE_BF16,
                                                blk.dsts.data(), blk.bytes.data()),
                   ZERO_INVALID_ARGUMENT, {"entry 0", "'embed': the param is fp32, not bf16"}));
    GM_TRY(Refused(zero_engine_gather_into_many(e, blk.ids.data(), 3, static_cast<zero_dtype>(9),
                                                blk.dsts.data(), blk.bytes.data()),
                   ZERO_INVALID_ARGUMENT, {"zero_engine_gather_into_many: dtype 9"}));
    GM_TRY(
        Refused(zero_engine_gather_into_many(e, nullptr, 3, f32, blk.dsts.data(), blk.bytes.data()),
                ZERO_INVALID_ARGUMENT, {"zero_engine_gather_into_many: ids is NULL"}));
    // The live budget runs out at the third entry, after two gathers: those
    // are released again, so nothing of the list is held.
    GM_TRY(Refused(
        zero_engine_gather_into_many(e, blk.ids.data(), 3, f32, blk.dsts.data(), blk.bytes.data()),
        ZERO_OUT_OF_MEMORY,
        {"gather_into_many, entry 2", "gather 'w2'", "stage3_max_live_parameters"}));
    if (Live(e) != 0) return "a batch failing partway left params gathered";
    for (int32_t id : blk.ids) {
      GM_TRY(Refused(zero_engine_release(e, id), ZERO_FAILED_PRECONDITION, {"not gathered"}));
    }
    // count 0: nothing, NULL arrays allowed.
    GM_TRY(Expect(zero_engine_gather_into_many(e, nullptr, 0, f32, nullptr, nullptr), "n=0"));
    GM_TRY(Expect(zero_engine_release_many(e, nullptr, 0), "release n=0"));
    // Two fit; order is the caller's: dsts[k] gets ids[k].
    std::vector<int32_t> two = {2, 0};
    Block b2 = MakeBlock(two, defs, f32);
    GM_TRY(
        Expect(zero_engine_gather_into_many(e, two.data(), 2, f32, b2.dsts.data(), b2.bytes.data()),
               "gather two"));
    for (size_t k = 0; k < 2; ++k) {
      float v;
      std::memcpy(&v, b2.bufs[k].data() + 4 * 5, 4);
      if (v != InitValue(two[k], 5)) return "dsts[k] does not hold ids[k]";
    }
    const int64_t live2 = Live(e);
    if (live2 != (851 + 943) * 4) return "live bytes " + std::to_string(live2);
    // A release too many (w1 named twice, gathered once): nothing released.
    std::vector<int32_t> twice = {0, 2, 2};
    GM_TRY(Refused(zero_engine_release_many(e, twice.data(), 3), ZERO_FAILED_PRECONDITION,
                   {"release_many, entry 2", "release 'w1': not gathered"}));
    std::vector<int32_t> bad_rel = {0, -1};
    GM_TRY(Refused(zero_engine_release_many(e, bad_rel.data(), 2), ZERO_INVALID_ARGUMENT,
                   {"release_many, entry 1", "no param with id -1"}));
    GM_TRY(Refused(zero_engine_release_many(e, nullptr, 2), ZERO_INVALID_ARGUMENT,
                   {"zero_engine_release_many: ids is NULL"}));
    if (Live(e) != live2) return "a refused release_many released params";
    GM_TRY(Expect(zero_engine_release_many(e, two.data(), 2), "release two"));
    if (Live(e) != 0) return "release_many left params gathered";
    // Released twice: the second names the first entry's param.
    GM_TRY(Refused(zero_engine_release_many(e, two.data(), 2), ZERO_FAILED_PRECONDITION,
                   {"release_many, entry 0", "release 'w1': not gathered"}));
    // An id twice in one gather: nested gathers, two releases.
    std::vector<int32_t> nested = {1, 1};  // "bias", persistent
    Block bn = MakeBlock(nested, defs, f32);
    GM_TRY(Expect(
        zero_engine_gather_into_many(e, nested.data(), 2, f32, bn.dsts.data(), bn.bytes.data()),
        "nested"));
    GM_TRY(Expect(zero_engine_release_many(e, nested.data(), 2), "release nested"));
    GM_TRY(Refused(zero_engine_release(e, 1), ZERO_FAILED_PRECONDITION, {"'bias': not gathered"}));
    return "";
  }();
  zero_engine_destroy(e);
  return err;
}

}  // namespace gather_many_check

#endif  // ZERO_TESTS_GATHER_MANY_CHECK_H_

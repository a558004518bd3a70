// Stage 3's gather buffers are reused within a micro-step
// (ParamCoordinator::TakeBuffer; docs/ARCHITECTURE.md, "Stage 3"): a model
// of same-sized params gathered in forward and again in backward allocates
// a new buffer only while more are live than ever before, not once per
// gather, never holds more than twice the largest live set, and keeps
// nothing past the step. Counted by a device wrapper over the CPU device.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/engine/engine.h"
#include "tests/testing/forwarding_device.h"
#include "tests/testing/mlp_harness.h"

namespace zero {
namespace testing {
namespace {

constexpr int kWorld = 2, kLayers = 6, kSteps = 3;

// Counts allocations of the gather buffers' sizes.
class AllocCountingDevice : public ForwardingDevice {
 public:
  AllocCountingDevice(std::vector<size_t> bytes, std::atomic<int64_t>* count)
      : ForwardingDevice(MakeCpuDevice()), bytes_(std::move(bytes)), count_(count) {}
  std::string name() const override { return "alloc-counting-cpu"; }
  absl::StatusOr<void*> Allocate(size_t b) override {
    if (std::find(bytes_.begin(), bytes_.end(), b) != bytes_.end()) ++*count_;
    return ForwardingDevice::Allocate(b);
  }

 private:
  std::vector<size_t> bytes_;
  std::atomic<int64_t>* count_;
};

struct Rank {
  std::vector<int64_t> allocs_per_step;  // gather-sized allocations
  int64_t held_over_high_water = 0;  // buffer_bytes past 2 x live high water
  int64_t buffer_after_step = -1;
  int64_t live_high_water = 0;
  std::vector<float> first_gather;  // layer 0 in step 0, as gathered
};

// Layer l's param has sizes[l % sizes.size()] elements.
Rank Run(int rank, Communicator* comm, int64_t prefetch, const std::vector<int64_t>& sizes) {
  Rank out;
  Config c;
  c.stage = 3;
  c.dtype = DType::kF32;
  c.lr = 1e-2;
  c.steps_per_print = 0;
  c.comm_timeout_seconds = 30;
  c.stage3_param_persistence_threshold = 0;
  c.overlap_comm = 1;  // the comm stream, prefetch along the trace
  c.stage3_prefetch_bucket_size = prefetch;
  auto e = Engine::Create(c, comm);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return out;
  Engine& engine = **e;
  std::atomic<int64_t> allocs{0};
  std::vector<size_t> bytes;
  for (int64_t n : sizes) bytes.push_back(n * sizeof(float));
  EXPECT_TRUE(engine.SetDevice(std::make_unique<AllocCountingDevice>(bytes, &allocs)).ok());
  std::vector<std::vector<float>> init(kLayers);
  std::vector<int> ids;
  for (int l = 0; l < kLayers; ++l) {
    const int64_t numel = sizes[l % sizes.size()];
    init[l].resize(numel);
    for (int64_t i = 0; i < numel; ++i) init[l][i] = 0.001f * static_cast<float>(l * 7 + i % 97);
    ParamSpec s;
    s.name = absl::StrCat("layer", l, ".weight");
    s.shape = {numel};
    s.init = init[l].data();
    auto id = engine.RegisterParam(s);
    EXPECT_TRUE(id.ok()) << id.status();
    ids.push_back(*id);
  }
  EXPECT_TRUE(engine.Finalize().ok());
  for (int step = 0; step < kSteps; ++step) {
    const int64_t before = allocs.load();
    auto check_held = [&] {
      const EngineStats s = engine.Stats();
      out.held_over_high_water = std::max(
          out.held_over_high_water, s.buffer_bytes - 2 * s.live_gathered_high_water);
    };
    for (int l = 0; l < kLayers; ++l) {  // forward: gather, use, release
      auto p = engine.Gather(ids[l]);
      EXPECT_TRUE(p.ok()) << p.status();
      if (step == 0 && l == 0) {
        out.first_gather.resize(init[0].size());
        std::memcpy(out.first_gather.data(), *p, init[0].size() * sizeof(float));
      }
      check_held();
      EXPECT_TRUE(engine.Release(ids[l]).ok());
    }
    for (int l = kLayers - 1; l >= 0; --l) {  // backward: gather again
      EXPECT_TRUE(engine.Gather(ids[l]).ok());
      auto g = engine.GradBuffer(ids[l]);
      EXPECT_TRUE(g.ok()) << g.status();
      float* gf = static_cast<float*>(*g);
      for (size_t i = 0; i < init[l].size(); ++i) gf[i] = 0.01f * static_cast<float>(rank + 1);
      check_held();
      EXPECT_TRUE(engine.GradReady(ids[l]).ok());
      EXPECT_TRUE(engine.Release(ids[l]).ok());
    }
    EXPECT_TRUE(engine.Step().ok());
    out.allocs_per_step.push_back(allocs.load() - before);
  }
  out.buffer_after_step = engine.Stats().buffer_bytes;
  out.live_high_water = engine.Stats().live_gathered_high_water;
  // The first gather saw the registered values (a reused buffer is
  // overwritten whole by the all-gather).
  for (size_t i = 0; i < init[0].size(); ++i) {
    if (out.first_gather[i] != init[0][i]) {
      ADD_FAILURE() << "rank " << rank << " element " << i;
      break;
    }
  }
  return out;
}

void Check(int64_t prefetch, const std::vector<int64_t>& sizes) {
  std::vector<Rank> ranks(kWorld);
  std::mutex mu;
  RunThreads(kWorld, [&](int rank, Communicator* comm) {
    Rank r = Run(rank, comm, prefetch, sizes);
    std::lock_guard<std::mutex> l(mu);
    ranks[rank] = std::move(r);
  });
  // With the pool, a step allocates a buffer only when none of its size is
  // free: at most as many per size as were ever live at once (the gathered
  // param and those prefetched ahead of it); without it, one per gather.
  const int64_t smallest = *std::min_element(sizes.begin(), sizes.end());
  for (int r = 0; r < kWorld; ++r) {
    ASSERT_EQ(ranks[r].allocs_per_step.size(), static_cast<size_t>(kSteps)) << "rank " << r;
    const int64_t most_live = static_cast<int64_t>(sizes.size()) *
                              (ranks[r].live_high_water / (smallest * 4));
    EXPECT_GE(ranks[r].live_high_water, (prefetch > 0 ? 2 : 1) * smallest * 4) << "rank " << r;
    const int64_t bound = std::min<int64_t>(most_live, kLayers);  // half the gathers
    for (int s = 0; s < kSteps; ++s) {
      // At least one: nothing is kept past a step.
      EXPECT_GE(ranks[r].allocs_per_step[s], 1) << "rank " << r << " step " << s;
      EXPECT_LE(ranks[r].allocs_per_step[s], bound)
          << "rank " << r << " step " << s << ": gather buffers not reused ("
          << 2 * kLayers << " gathers)";
    }
    // Buckets and staging aside (fixed), the held gather memory (live +
    // pooled) stays within twice the live high water (PoolCap).
    EXPECT_LE(ranks[r].held_over_high_water,
              ranks[r].buffer_after_step) << "rank " << r;
  }
}

TEST(GatherPoolTest, NoPrefetch) { Check(0, {4096}); }
TEST(GatherPoolTest, PrefetchTwoAhead) { Check(2 * 4096, {4096}); }
// Sizes that cycle, as a transformer block's do: one buffer per size kept.
TEST(GatherPoolTest, CyclingSizes) { Check(0, {4096, 1024, 3072}); }
TEST(GatherPoolTest, CyclingSizesPrefetch) { Check(4096, {4096, 1024, 3072}); }

}  // namespace
}  // namespace testing
}  // namespace zero

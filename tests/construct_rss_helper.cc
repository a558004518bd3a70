// Builds a stage-3 bf16 model on N thread ranks in this process and prints
// one JSON line: the peak RSS growth while constructing (register +
// finalize) and what the engines account for (model states + buffers), so
// //tests:construct_rss_test can hold one against the other.
//   construct_rss_helper N spec|values
// "spec": params registered by init spec (no rank materializes a param);
// "values": every rank registers full fp32 values (the old way).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <thread>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/thread_communicator.h"
#include "core/engine/engine.h"

namespace {

int64_t StatusKb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::strlen(key));
  }
  return -1;
}

constexpr int kParams = 8;
constexpr int64_t kRows = 2048, kCols = 1024;  // 2M elements per param, 16M in all

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s N spec|values\n", argv[0]);
    return 2;
  }
  const int world = std::atoi(argv[1]);
  const bool values = std::string(argv[2]) == "values";
  auto comms = zero::MakeThreadCommunicators(world);
  const int64_t base_kb = StatusKb("VmRSS:");
  std::vector<int64_t> accounted(world, 0);
  int64_t largest = 0;
  std::vector<std::thread> threads;
  std::mutex mu;
  bool ok = true;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      zero::Config c;
      c.stage = 3;
      c.dtype = zero::DType::kBF16;
      c.steps_per_print = 0;
      c.reduce_bucket_size = 1 << 20;
      c.stage3_param_persistence_threshold = 0;
      auto e = zero::Engine::Create(c, comms[r].get());
      if (!e.ok()) {
        std::lock_guard<std::mutex> l(mu);
        ok = false;
        return;
      }
      zero::InitSpec spec;
      spec.kind = zero::InitKind::kKaimingUniform;
      spec.seed = 1;
      for (int k = 0; k < kParams; ++k) {
        zero::ParamSpec p;
        p.name = absl::StrCat("layer", k, ".weight");
        p.shape = {kRows, kCols};
        p.dtype = zero::DType::kBF16;
        std::vector<float> full;
        if (values) {
          full.assign(kRows * kCols, 0.01f * static_cast<float>(k + 1));
          p.init = full.data();
        } else {
          p.init_spec = &spec;
        }
        if (!(*e)->RegisterParam(p).ok()) ok = false;
      }
      if (!(*e)->Finalize().ok()) ok = false;
      const zero::EngineStats s = (*e)->Stats();
      {
        std::lock_guard<std::mutex> l(mu);
        accounted[r] = s.master_bytes + s.optimizer_bytes + s.grad_bytes + s.param_bytes +
                       s.buffer_bytes;
      }
      // Every rank finished constructing before any engine goes away.
      (void)comms[r]->Barrier();
    });
  }
  for (auto& t : threads) t.join();
  const int64_t peak_kb = StatusKb("VmHWM:");
  int64_t total = 0;
  for (int64_t a : accounted) total += a;
  largest = kRows * kCols * 4;
  std::printf("{\"world\": %d, \"mode\": \"%s\", \"peak_growth_bytes\": %lld, "
              "\"accounted_bytes\": %lld, \"largest_param_fp32_bytes\": %lld, \"ok\": %d}\n",
              world, values ? "values" : "spec",
              static_cast<long long>((peak_kb - base_kb) * 1024),
              static_cast<long long>(total), static_cast<long long>(largest), ok ? 1 : 0);
  return ok ? 0 : 1;
}

// How large a model trains here with offload_optimizer.device = "nvme": the
// engine (stage 2, bf16 working copy, one rank) over `params` elements in
// 20M-element params with synthetic gradients; reports finalize time (the
// initial state written to NVMe), step times, peak RSS and where the bytes
// live. JSON lines on stdout. Not a test.
//
// Usage: nvme_scale_bench DIR [params=1e9] [steps=3] [sub_group=2e7]
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_clock.h"
#include "core/comm/thread_communicator.h"
#include "core/config/config.h"
#include "core/engine/engine.h"
#include "kernels/cast_math.h"

namespace {

using zero::bench::WallSeconds;

double PeakRssGiB() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / (1024.0 * 1024.0);
}

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "nvme_scale_bench: %s: %s\n", what, std::string(s.message()).c_str());
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: nvme_scale_bench DIR [params] [steps] [sub_group]\n");
    return 1;
  }
  const int64_t total = argc > 2 ? static_cast<int64_t>(std::atof(argv[2])) : 1000000000;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 3;
  const int64_t sub = argc > 4 ? static_cast<int64_t>(std::atof(argv[4])) : 20000000;
  const int64_t per = std::min<int64_t>(sub, total);

  zero::Config c;
  c.stage = 2;
  c.dtype = zero::DType::kBF16;
  c.steps_per_print = 0;
  c.sub_group_size = sub;
  c.reduce_bucket_size = per;
  c.offload_optimizer.device = zero::OffloadDevice::kNvme;
  c.offload_optimizer.nvme_path = argv[1];
  c.offload_optimizer.buffer_count = 4;
  auto comms = zero::MakeThreadCommunicators(1);
  auto e = zero::Engine::Create(c, comms[0].get());
  Check(e.status(), "create");
  zero::Engine& engine = **e;
  std::vector<int> ids;
  for (int64_t a = 0; a < total; a += per) {
    zero::ParamSpec p;
    p.name = "layer" + std::to_string(ids.size());
    p.shape = {std::min(per, total - a)};
    p.dtype = zero::DType::kBF16;
    auto id = engine.RegisterParam(p);
    Check(id.status(), "register");
    ids.push_back(*id);
  }
  double t0 = WallSeconds();
  Check(engine.Finalize(), "finalize");
  const double fin = WallSeconds() - t0;
  std::printf("{\"bench\":\"nvme_scale\",\"phase\":\"finalize\",\"params\":%lld,\"seconds\":%.2f,"
              "\"peak_rss_gib\":%.2f}\n", static_cast<long long>(total), fin, PeakRssGiB());
  std::fflush(stdout);
  const uint16_t g = zero::math::FloatToBf16(1e-3f);
  double sum = 0;
  for (int k = 0; k < steps; ++k) {
    t0 = WallSeconds();
    for (int id : ids) {
      auto buf = engine.GradBuffer(id);
      Check(buf.status(), "grad_buffer");
      auto n = engine.ParamNumel(id);
      uint16_t* d = static_cast<uint16_t*>(*buf);
      for (int64_t i = 0; i < *n; ++i) d[i] = g;
      Check(engine.GradReady(id), "grad_ready");
    }
    const double t1 = WallSeconds();
    auto info = engine.Step();
    Check(info.status(), "step");
    const double t2 = WallSeconds();
    sum += t2 - t0;
    std::printf("{\"bench\":\"nvme_scale\",\"phase\":\"step\",\"step\":%d,\"seconds\":%.2f,"
                "\"grads_s\":%.2f,\"optimizer_step_s\":%.2f,\"peak_rss_gib\":%.2f}\n",
                k + 1, t2 - t0, t1 - t0, t2 - t1, PeakRssGiB());
    std::fflush(stdout);
  }
  const zero::EngineStats s = engine.Stats();
  std::printf("{\"bench\":\"nvme_scale\",\"summary\":true,\"params\":%lld,\"mean_step_s\":%.2f,"
              "\"finalize_s\":%.2f,\"peak_rss_gib\":%.2f,\"host_optimizer_bytes\":%lld,"
              "\"host_param_bytes\":%lld,\"host_grad_bytes\":%lld,\"nvme_file_bytes\":%lld,"
              "\"nvme_read_bytes\":%lld,\"nvme_write_bytes\":%lld,\"direct_io\":%d,\"uring\":%d}\n",
              static_cast<long long>(total), sum / steps, fin, PeakRssGiB(),
              static_cast<long long>(s.optimizer_bytes), static_cast<long long>(s.param_bytes),
              static_cast<long long>(s.grad_bytes), static_cast<long long>(s.nvme_bytes),
              static_cast<long long>(s.nvme_read_bytes), static_cast<long long>(s.nvme_write_bytes),
              s.nvme_direct_io, s.nvme_uring);
  return 0;
}

// The engine's step on a device (step times per stage, and the
// offload pipelines against host<->device copy bandwidth). One rank; for
// stage 0-3 x offload none / offload_optimizer cpu (ZeRO-Offload) /
// offload_param cpu (stage 3): the fastest of `steps` training steps (gather
// + release per param at stage 3, zero gradients handed in, Engine::Step),
// and the device's own Copy bandwidth host->device and device->host over
// page-locked host memory of the same size. ZeRO-Offload moves the
// gradients down and the working copy up each step (2 x params x element
// size): `copy_floor_ms` is that volume at the measured bandwidths, and
// `vs_copy` the step time over it (1.0: the pipeline runs at the link's
// speed). offload_param cpu uploads every owned slice for the gathers and
// the updated shard down: the same volume.
//
// Devices: "cuda" (a --config=cuda build on a GPU; tools/device_check.sh
// runs it there), "standin" (the CPU stand-in: only shows the bench runs;
// its "copies" are memmoves on a worker thread), "cpu".
// JSON lines; compare ratios within one run.
//
// Usage: device_step_bench [device=cuda] [params=16e6] [steps=5] [dtype=bf16]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "bench/bench_clock.h"
#include "bench/four_param_engine.h"
#include "core/backend/device_factory.h"
#include "core/config/config.h"

namespace {

using zero::bench::WallSeconds;

void Check(const absl::Status& s, const char* what) {
  zero::bench::CheckOk(s, "device_step_bench", what);
}

// GB/s (1e9 bytes) of the device's Copy between pinned host and device
// memory, the best of 5.
void CopyBandwidth(const std::string& kind, size_t bytes, double* h2d, double* d2h) {
  auto d = zero::MakeDevice(kind, 0);
  Check(d.status(), "device");
  auto dev = (*d)->Allocate(bytes);
  Check(dev.status(), "allocate");
  auto host = (*d)->AllocateHost(bytes, /*pinned=*/true);
  Check(host.status(), "allocate host");
  double best_up = 1e30, best_down = 1e30;
  for (int i = 0; i < 5; ++i) {
    double t0 = WallSeconds();
    (*d)->Copy(*dev, *host, bytes);
    double t1 = WallSeconds();
    (*d)->Copy(*host, *dev, bytes);
    double t2 = WallSeconds();
    best_up = std::min(best_up, t1 - t0);
    best_down = std::min(best_down, t2 - t1);
  }
  Check((*d)->status(), "copies");
  *h2d = bytes / best_up / 1e9;
  *d2h = bytes / best_down / 1e9;
  (*d)->FreeHost(*host, true);
  (*d)->Free(*dev, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string kind = argc > 1 ? argv[1] : "cuda";
  const int64_t params = argc > 2 ? static_cast<int64_t>(std::atof(argv[2])) : 16000000;
  const int steps = argc > 3 ? std::atoi(argv[3]) : 5;
  const std::string dtype = argc > 4 ? argv[4] : "bf16";
  const zero::DType t = dtype == "fp32"   ? zero::DType::kF32
                        : dtype == "fp16" ? zero::DType::kF16
                                          : zero::DType::kBF16;
  const int64_t es = zero::DTypeSize(t);
  {
    auto probe = zero::MakeDevice(kind, 0);
    if (!probe.ok()) {
      std::printf("{\"bench\":\"device_step\",\"device\":\"%s\",\"skip\":\"%s\"}\n", kind.c_str(),
                  std::string(probe.status().message()).c_str());
      return 2;
    }
  }
  double h2d = 0, d2h = 0;
  CopyBandwidth(kind, static_cast<size_t>(params * es), &h2d, &d2h);
  std::printf("{\"bench\":\"device_copy\",\"device\":\"%s\",\"bytes\":%lld,\"h2d_gbs\":%.3f,"
              "\"d2h_gbs\":%.3f}\n",
              kind.c_str(), static_cast<long long>(params * es), h2d, d2h);
  const int64_t per = params / 4;  // each of the four params
  struct Mode { int stage; const char* offload; };
  const Mode modes[] = {{0, "none"}, {1, "none"}, {2, "none"}, {3, "none"},
                        {1, "optimizer_cpu"}, {2, "optimizer_cpu"}, {3, "optimizer_cpu"},
                        {3, "param_cpu"}};
  for (const Mode& m : modes) {
    zero::Config c = zero::bench::FourParamConfig(m.stage, t);
    c.loss_scale = t == zero::DType::kF16 ? 1024.0 : 0.0;
    const std::string off = m.offload;
    if (off == "optimizer_cpu") {
      c.offload_optimizer.device = zero::OffloadDevice::kCpu;
      c.offload_optimizer.pin_memory = true;
    }
    if (off == "param_cpu") {
      c.offload_param.device = zero::OffloadDevice::kCpu;
      c.offload_param.pin_memory = true;
    }
    auto d = zero::MakeDevice(kind, 0);
    Check(d.status(), "device");
    zero::bench::FourParamEngine e(c, std::move(*d), params, "device_step_bench");
    double best = 1e30;
    for (int s = 0; s < steps; ++s) {
      const double t0 = WallSeconds();
      e.Forward();
      e.Backward();
      e.Step();
      best = std::min(best, WallSeconds() - t0);
    }
    const double moved = off == "none" ? 0.0 : 2.0 * per * 4 * es;
    const double floor_s = off == "none" ? 0.0 : (per * 4 * es) / (h2d * 1e9) +
                                                      (per * 4 * es) / (d2h * 1e9);
    std::printf("{\"bench\":\"device_step\",\"device\":\"%s\",\"dtype\":\"%s\",\"stage\":%d,"
                "\"offload\":\"%s\",\"params\":%lld,\"step_ms\":%.3f,\"offload_bytes\":%.0f,"
                "\"copy_floor_ms\":%.3f,\"vs_copy\":%.3f}\n",
                kind.c_str(), dtype.c_str(), m.stage, m.offload,
                static_cast<long long>(per * 4), best * 1e3, moved, floor_s * 1e3,
                floor_s > 0 ? best / floor_s : 0.0);
    std::fflush(stdout);
  }
  return 0;
}

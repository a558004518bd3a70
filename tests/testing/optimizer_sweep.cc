#include "tests/testing/optimizer_sweep.h"

#include <gtest/gtest.h>

#include <memory>

#include "tests/testing/fresh_dir.h"
#include "tests/testing/off_host_device.h"
#include "tests/testing/train_on_threads.h"

namespace zero {
namespace testing {

std::vector<SweepCase> StagesWorldsDtypes() {
  std::vector<SweepCase> cases;
  for (int stage : {0, 1, 2, 3}) {
    for (int world : {1, 3}) {
      for (DType t : {DType::kF32, DType::kBF16}) cases.push_back({stage, world, t});
    }
  }
  return cases;
}

std::string SweepCaseName(const SweepCase& s) {
  return "stage" + std::to_string(s.stage) + "_world" + std::to_string(s.world) + "_" +
         DTypeName(s.dtype);
}

void PrintTo(const SweepCase& s, std::ostream* os) {
  *os << "stage " << s.stage << ", world " << s.world << ", " << DTypeName(s.dtype);
}

double SweepTolerance(DType t) { return t == DType::kF32 ? 1e-5 : 4e-2; }

void ExpectMatchesReferenceStepByStep(const Config& c, int world, double tol,
                                      const std::string& what) {
  const std::string lead = what.empty() ? "" : what + " ";
  for (int steps : {1, 3, 10}) {
    MlpSpec spec;
    spec.steps = steps;
    const MlpResult got = TrainAt(c, world, spec);
    const MlpResult ref = TrainMlpReference(c, spec);
    EXPECT_LE(MaxRelDiff(got, ref), tol) << lead << "after " << steps << " steps";
    // It moved: the initial params are more than the tolerance away.
    MlpSpec none = spec;
    none.steps = 0;
    EXPECT_GT(MaxRelDiff(TrainMlpReference(c, none), ref), 10 * SweepTolerance(DType::kF32));
  }
}

void ExpectNvmeOffloadGivesTheBits(const Config& c, const MlpResult& memory,
                                   const std::string& dir) {
  Config nvme = c;
  nvme.offload_optimizer.device = OffloadDevice::kNvme;
  nvme.offload_optimizer.nvme_path = FreshDir(dir);
  EXPECT_EQ(MaxRelDiff(TrainAt(nvme, 3, MlpSpec()), memory), 0.0) << "nvme";
}

void ExpectCpuOffloadGivesTheOnDeviceBits(const Config& c, const MlpResult& memory, double tol) {
  MlpSpec off_host;
  off_host.make_device = [] { return std::make_unique<OffHostDevice>(); };
  const MlpResult on_device = TrainAt(c, 3, off_host);
  Config cpu = c;
  cpu.offload_optimizer.device = OffloadDevice::kCpu;
  EXPECT_EQ(MaxRelDiff(TrainAt(cpu, 3, off_host), on_device), 0.0) << "cpu offload";
  EXPECT_LE(MaxRelDiff(on_device, memory), tol) << "off-host device";
}

}  // namespace testing
}  // namespace zero

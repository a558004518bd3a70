// ckpt_export_helper OUT_DIR: trains the test MLP on 3 thread ranks (stage
// 2), saves OUT_DIR/ckpt/t, and writes the gathered fp32 master params to
// OUT_DIR/expected.json ({"names", "shapes", "params"}) for
// ckpt_export_test.py to compare an export against.
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "tests/testing/mlp_harness.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: ckpt_export_helper OUT_DIR\n");
    return 2;
  }
  const std::string out = argv[1];
  zero::Config c;
  c.stage = 2;
  c.lr = 1e-2;
  c.steps_per_print = 0;
  zero::testing::MlpSpec spec;
  spec.steps = 3;
  spec.frozen_embedding = true;
  spec.ckpt_dir = out + "/ckpt";
  spec.final_tag = "t";
  zero::testing::MlpResult res;
  std::mutex mu;
  bool ok = true;
  zero::testing::RunThreads(3, [&](int rank, zero::Communicator* comm) {
    auto r = zero::testing::TrainMlp(c, comm, spec);
    std::lock_guard<std::mutex> l(mu);
    if (!r.ok()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, r.status().ToString().c_str());
      ok = false;
    } else if (rank == 0) {
      res = std::move(*r);
    }
  });
  if (!ok) return 1;
  nlohmann::ordered_json j;
  j["names"] = res.names;
  for (size_t i = 0; i < res.names.size(); ++i) j["params"][res.names[i]] = res.params[i];
  std::ofstream(out + "/expected.json") << j.dump();
  return 0;
}

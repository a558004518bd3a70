// Building a GPT-shaped model at stage 3, bf16, under mpirun: per rank, the
// peak RSS growth and time of construction (register + finalize), against
// the ZeRO formula 16Psi/W plus the engine's own buffers. Modes, side by side
// when run one after the other in the same job script (bench/README.md):
//   spec       params described by init specs (no rank materializes one)
//   values     every rank registers full fp32 values (the old way)
//   mpirun -np 4 bazel-bin/bench/construct_bench --hidden 2048 --layers 8 --mode spec
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/comm/mpi_communicator.h"
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

}  // namespace

int main(int argc, char** argv) {
  int64_t hidden = 1024, layers = 4, vocab = 32000;
  std::string mode = "spec";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--hidden")) hidden = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--layers")) layers = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--vocab")) vocab = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--mode")) mode = argv[i + 1];
  }
  auto comm = zero::MakeMpiCommunicator(nullptr);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  const int rank = (*comm)->rank(), world = (*comm)->world_size();
  // A GPT block: qkv [3h, h], proj [h, h], fc [4h, h], fc2 [h, 4h], two
  // LayerNorms; plus the embedding [vocab, h].
  struct P { std::string name; int64_t rows, cols; zero::InitKind kind; };
  std::vector<P> ps = {{"wte.weight", vocab, hidden, zero::InitKind::kNormal}};
  for (int64_t l = 0; l < layers; ++l) {
    const std::string b = absl::StrCat("h.", l, ".");
    ps.push_back({b + "qkv.weight", 3 * hidden, hidden, zero::InitKind::kKaimingUniform});
    ps.push_back({b + "proj.weight", hidden, hidden, zero::InitKind::kKaimingUniform});
    ps.push_back({b + "fc.weight", 4 * hidden, hidden, zero::InitKind::kKaimingUniform});
    ps.push_back({b + "fc2.weight", hidden, 4 * hidden, zero::InitKind::kKaimingUniform});
    ps.push_back({b + "ln1.weight", 1, hidden, zero::InitKind::kOnes});
    ps.push_back({b + "ln2.weight", 1, hidden, zero::InitKind::kOnes});
  }
  int64_t psi = 0, largest = 0;
  for (const P& p : ps) {
    psi += p.rows * p.cols;
    largest = std::max(largest, p.rows * p.cols);
  }
  zero::Config c;
  c.stage = 3;
  c.dtype = zero::DType::kBF16;
  c.steps_per_print = 0;
  c.reduce_bucket_size_auto = true;  // defaults: sized from the model
  c.stage3_prefetch_bucket_size_auto = true;
  c.stage3_param_persistence_threshold_auto = true;
  MPI_Barrier(MPI_COMM_WORLD);
  const int64_t base_kb = StatusKb("VmRSS:");
  const auto t0 = std::chrono::steady_clock::now();
  auto e = zero::Engine::Create(c, comm->get());
  if (!e.ok()) return 1;
  std::vector<float> full;
  for (const P& p : ps) {
    zero::ParamSpec s;
    s.name = p.name;
    s.shape = p.rows == 1 ? std::vector<int64_t>{p.cols} : std::vector<int64_t>{p.rows, p.cols};
    s.dtype = zero::DType::kBF16;
    zero::InitSpec spec;
    spec.kind = p.kind;
    spec.std = 0.02;
    if (mode == "values") {
      full.assign(p.rows * p.cols, 0.01f);
      s.init = full.data();
    } else {
      s.init_spec = &spec;
    }
    auto id = (*e)->RegisterParam(s);
    if (!id.ok()) {
      std::fprintf(stderr, "%s\n", id.status().ToString().c_str());
      return 1;
    }
  }
  std::vector<float>().swap(full);
  absl::Status f = (*e)->Finalize();
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.ToString().c_str());
    return 1;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t peak = (StatusKb("VmHWM:") - base_kb) * 1024;
  const zero::EngineStats s = (*e)->Stats();
  const int64_t states = s.master_bytes + s.optimizer_bytes + s.grad_bytes + s.param_bytes;
  const double formula = 16.0 * static_cast<double>(psi) / world;
  std::printf("{\"bench\": \"construct\", \"mode\": \"%s\", \"rank\": %d, \"world\": %d, "
              "\"params\": %lld, \"seconds\": %.2f, \"peak_rss_growth_bytes\": %lld, "
              "\"model_states_bytes\": %lld, \"formula_16psi_over_w\": %.0f, "
              "\"buffer_bytes\": %lld, \"peak_over_formula_plus_buffers\": %.3f}\n",
              mode.c_str(), rank, world, static_cast<long long>(psi), secs,
              static_cast<long long>(peak), static_cast<long long>(states), formula,
              static_cast<long long>(s.buffer_bytes),
              peak / (formula + static_cast<double>(s.buffer_bytes)));
  std::fflush(stdout);
  return 0;
}

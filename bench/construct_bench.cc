// Building a GPT-shaped model at stage 3, bf16, under mpirun: per rank, the
// peak RSS growth and time of construction, against the ZeRO formula 16Psi/W
// plus the engine's own buffers (default, model-sized bucket sizes). Modes,
// side by side when run one after the other (bench/construct_bench.sh):
//   spec         params described by init specs (no rank materializes one)
//   safetensors  params registered as zeros, then zero_engine_load_safetensors
//                of --file (each rank reads only what it holds)
//   values       every rank registers full fp32 values (the old way)
//   write        (one process) writes the model as a BF16 safetensors --file,
//                a tensor at a time, for the safetensors mode
// Each rank prints a JSON line; rank 0 then prints a summary of the largest
// per-rank figures.
//   mpirun -np 4 bazel-bin/bench/construct_bench --hidden 2048 --layers 8 --mode spec
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/bench_clock.h"
#include "core/comm/mpi_communicator.h"
#include "core/engine/engine.h"
#include "core/engine/pretrained_loader.h"

namespace {

int64_t StatusKb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(key, 0) == 0) return std::atoll(line.c_str() + std::strlen(key));
  }
  return -1;
}

// For the out-of-memory line (a new handler takes no arguments).
const char* g_mode = "";
int g_rank = -1;

struct P {
  std::string name;
  int64_t rows, cols;
  zero::InitKind kind;
};

// A GPT block: qkv [3h, h], proj [h, h], fc [4h, h], fc2 [h, 4h], two
// LayerNorms; plus the embedding [vocab, h].
std::vector<P> GptParams(int64_t hidden, int64_t layers, int64_t vocab) {
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
  return ps;
}

std::vector<int64_t> Shape(const P& p) {
  return p.rows == 1 ? std::vector<int64_t>{p.cols} : std::vector<int64_t>{p.rows, p.cols};
}

// BF16 safetensors of the model, streamed in 1M-element pieces.
int WriteSafetensors(const std::vector<P>& ps, const std::string& path) {
  std::string header = "{";
  int64_t off = 0;
  for (size_t k = 0; k < ps.size(); ++k) {
    const int64_t bytes = ps[k].rows * ps[k].cols * 2;
    std::string shape;
    for (int64_t d : Shape(ps[k])) absl::StrAppend(&shape, shape.empty() ? "" : ",", d);
    absl::StrAppend(&header, k ? "," : "", "\"", ps[k].name, "\":{\"dtype\":\"BF16\",\"shape\":[",
                    shape, "],\"data_offsets\":[", off, ",", off + bytes, "]}");
    off += bytes;
  }
  header += "}";
  while (header.size() % 8) header += ' ';
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) {
    std::perror(path.c_str());
    return 1;
  }
  const uint64_t n = header.size();
  std::fwrite(&n, 8, 1, f);
  std::fwrite(header.data(), 1, header.size(), f);
  std::vector<uint16_t> buf(1 << 20);
  for (size_t k = 0; k < ps.size(); ++k) {
    const int64_t numel = ps[k].rows * ps[k].cols;
    for (int64_t a = 0; a < numel; a += static_cast<int64_t>(buf.size())) {
      const int64_t m = std::min<int64_t>(static_cast<int64_t>(buf.size()), numel - a);
      for (int64_t i = 0; i < m; ++i) {
        const float v = 0.02f * static_cast<float>(((a + i) * 7 + static_cast<int64_t>(k)) % 201 - 100) / 100.0f;
        uint32_t u;
        std::memcpy(&u, &v, 4);
        buf[i] = static_cast<uint16_t>(u >> 16);
      }
      if (std::fwrite(buf.data(), 2, m, f) != static_cast<size_t>(m)) {
        std::perror(path.c_str());
        return 1;
      }
    }
  }
  return std::fclose(f) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t hidden = 1024, layers = 4, vocab = 32000;
  std::string mode = "spec", file;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--hidden")) hidden = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--layers")) layers = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--vocab")) vocab = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--mode")) mode = argv[i + 1];
    else if (!std::strcmp(argv[i], "--file")) file = argv[i + 1];
  }
  const std::vector<P> ps = GptParams(hidden, layers, vocab);
  if (mode == "write") return WriteSafetensors(ps, file);
  if (mode != "spec" && mode != "values" && mode != "safetensors") {
    std::fprintf(stderr, "--mode spec|values|safetensors|write\n");
    return 2;
  }
  auto comm = zero::MakeMpiCommunicator(nullptr);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  const int rank = (*comm)->rank(), world = (*comm)->world_size();
  g_mode = mode.c_str();
  g_rank = rank;
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
  const double t0 = zero::bench::WallSeconds();
  auto e = zero::Engine::Create(c, comm->get());
  if (!e.ok()) return 1;
  // Under an address-space limit (construct_bench.sh's RANK_AS_LIMIT) a mode
  // that does not fit fails here with a line saying so, and MPI_Abort ends
  // the other ranks, instead of the kernel's OOM killer picking a process.
  std::set_new_handler([] {
    std::printf("{\"bench\": \"construct_failed\", \"mode\": \"%s\", \"rank\": %d, "
                "\"error\": \"out of memory (allocation refused)\", "
                "\"rss_at_failure_bytes\": %lld, \"vm_at_failure_bytes\": %lld}\n",
                g_mode, g_rank, static_cast<long long>(StatusKb("VmRSS:")) * 1024,
                static_cast<long long>(StatusKb("VmSize:")) * 1024);
    std::fflush(stdout);
    MPI_Abort(MPI_COMM_WORLD, 3);
  });
  std::vector<float> full;
  for (const P& p : ps) {
    zero::ParamSpec s;
    s.name = p.name;
    s.shape = Shape(p);
    s.dtype = zero::DType::kBF16;
    zero::InitSpec spec;
    spec.kind = mode == "safetensors" ? zero::InitKind::kZeros : p.kind;
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
  zero::PretrainedStats loaded;
  if (f.ok() && mode == "safetensors") {
    f = (*e)->LoadSafetensors(file, zero::PretrainedOptions(), &loaded);
  }
  if (!f.ok()) {
    std::fprintf(stderr, "%s\n", f.ToString().c_str());
    return 1;
  }
  const double secs = zero::bench::WallSeconds() - t0;
  const int64_t peak = (StatusKb("VmHWM:") - base_kb) * 1024;
  const int64_t vm_peak = StatusKb("VmPeak:") * 1024;  // for sizing RANK_AS_LIMIT
  const zero::EngineStats s = (*e)->Stats();
  const zero::Config& rc = (*e)->config();
  const int64_t states = s.master_bytes + s.optimizer_bytes + s.grad_bytes + s.param_bytes;
  const double formula = 16.0 * static_cast<double>(psi) / world;
  const double ratio = peak / (formula + static_cast<double>(s.buffer_bytes));
  std::printf("{\"bench\": \"construct\", \"mode\": \"%s\", \"rank\": %d, \"world\": %d, "
              "\"params\": %lld, \"seconds\": %.2f, \"peak_rss_growth_bytes\": %lld, "
              "\"model_states_bytes\": %lld, \"formula_16psi_over_w\": %.0f, "
              "\"buffer_bytes\": %lld, \"reduce_bucket_size\": %lld, "
              "\"largest_param\": %lld, \"bytes_read\": %lld, \"vm_peak_bytes\": %lld, "
              "\"peak_over_formula_plus_buffers\": %.3f}\n",
              mode.c_str(), rank, world, static_cast<long long>(psi), secs,
              static_cast<long long>(peak), static_cast<long long>(states), formula,
              static_cast<long long>(s.buffer_bytes),
              static_cast<long long>(rc.reduce_bucket_size), static_cast<long long>(largest),
              static_cast<long long>(loaded.bytes_read), static_cast<long long>(vm_peak), ratio);
  std::fflush(stdout);
  double mine[3] = {static_cast<double>(peak), secs, ratio}, most[3];
  MPI_Reduce(mine, most, 3, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    std::printf("{\"bench\": \"construct_summary\", \"mode\": \"%s\", \"world\": %d, "
                "\"params\": %lld, \"max_seconds\": %.2f, \"max_peak_rss_growth_bytes\": %.0f, "
                "\"formula_16psi_over_w\": %.0f, \"buffer_bytes\": %lld, "
                "\"max_peak_over_formula_plus_buffers\": %.3f}\n",
                mode.c_str(), world, static_cast<long long>(psi), most[1], most[0], formula,
                static_cast<long long>(s.buffer_bytes), most[2]);
    std::fflush(stdout);
  }
  return 0;
}

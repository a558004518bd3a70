// Multi-process checks under mpirun (run by //tests:mpi_engine_np{2,3,4}):
//   (default)    every stage x dtype, plus frozen / accumulation / clipping /
//                fp16-overflow configs, equal to single-rank stage 0 trained
//                in the same process; memory and traffic formulas; the
//                reduction keys (reduce_scatter, allgather_bucket_size,
//                prescale_gradients, gradient_predivide_factor).
//   --dead-peer  rank 1 stops taking part; every other rank must report a
//                timeout within comm_timeout_seconds (then the job aborts).
//   --stuck-after-arrival
//                rank 1 arrives at a collective (a barrier, which passes the
//                arrival gate of mpi_arrival_gate.h with the others' all-gather)
//                and then stops; every other rank is left inside the
//                all-gather and must still report a timeout (default mode:
//                the worker thread's deadline; direct mode: the watchdog).
//   --stuck-medium
//                as --stuck-after-arrival, with a medium all-gather (256K
//                elements) and then, on a second communicator, a medium
//                broadcast (64K floats) rooted at the stuck rank: the sizes
//                default mode runs on the calling thread as a polled
//                non-blocking call (docs/ARCHITECTURE.md "Failures"); every
//                other rank must report a timeout for each.
//   --mismatch   rank 1 registers a different shape; every rank must fail
//                at finalize naming the param.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <string>
#include <thread>

#include <malloc.h>
#include <mpi.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cstdlib>
#include <vector>

#include "core/comm/mpi_communicator.h"
#include "core/comm/thread_communicator.h"
#include "core/backend/device_factory.h"
#include "tests/testing/mlp_harness.h"
#include "tests/testing/muon_matrices.h"
#include "tests/testing/rank_expect.h"

namespace zero {
namespace testing {
namespace {

bool g_exit_early = false;
std::string g_device = "cpu";  // --device cuda: state on the GPU

Config Cfg(int stage, DType t) {
  Config c = SmallMlpConfig(stage, t);
  c.comm_timeout_seconds = 60;
  return c;
}

// The single-rank stage-0 reference; a failed run is a failed check (its
// empty result also compares as infinitely far from any run).
MlpResult Single(Config c, const MlpSpec& spec, int rank) {
  c.stage = 0;
  auto comm = std::move(MakeThreadCommunicators(1)[0]);
  auto r = TrainMlp(c, comm.get(), spec);
  Expect(r.ok(), rank, "single-rank reference: " + std::string(r.status().message()));
  return r.ok() ? *r : MlpResult{};
}

double Tol(DType t) { return t == DType::kF32 ? 1e-6 : t == DType::kF16 ? 2e-3 : 4e-2; }

// Muon over MPI (docs/ARCHITECTURE.md, "Muon"): the owner-rank exchange
// through the MPI communicator's all-to-all, against the double reference,
// stages 0-3, fp32 and bf16, and with NVMe optimizer offload at stage 3.
void MuonOverMpi(Communicator* comm) {
  const int rank = comm->rank(), W = comm->world_size();
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string nvme = std::string(tmp ? tmp : "/tmp") + "/muon_mpi_nvme";
  ::mkdir(nvme.c_str(), 0700);
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kBF16}) {
      for (bool offload : {false, true}) {
        if (offload && (stage != 3 || t != DType::kF32)) continue;
        Config c = Cfg(stage, t);
        ApplyStepMode("muon", &c);
        if (offload) {
          c.offload_optimizer.device = OffloadDevice::kNvme;
          c.offload_optimizer.nvme_path = nvme;
        }
        MlpSpec spec;
        auto got = TrainMlp(c, comm, spec);
        std::string name = "muon stage " + std::to_string(stage) + " " + DTypeName(t) +
                           (offload ? " nvme" : "");
        Expect(got.ok(), rank, name + ": " + std::string(got.status().message()));
        if (!got.ok()) continue;
        const double d = MaxRelDiff(*got, TrainMlpReference(c, spec));
        Expect(d <= (t == DType::kF32 ? 1e-5 : 4e-2), rank,
               name + ": max rel diff " + std::to_string(d));
        if (rank == 0) {
          std::printf("%s world %d: max rel diff vs double reference %.3g\n", name.c_str(), W, d);
        }
      }
    }
  }
  // Six matrices: owners of several, slices across shards and groups,
  // against one rank's local orthogonalisation (tests/testing/muon_matrices.h).
  Config local = Cfg(0, DType::kF32);
  ApplyStepMode("muon", &local);
  local.sub_group_size = 150;
  auto self = std::move(MakeThreadCommunicators(1)[0]);
  auto ref = TrainMatrices(local, self.get());
  for (int stage = 1; stage <= 3; ++stage) {
    Config c = local;
    c.stage = stage;
    auto got = TrainMatrices(c, comm);
    const std::string name = "muon six matrices stage " + std::to_string(stage);
    Expect(got.ok() && ref.ok(), rank,
           name + ": " + std::string((got.ok() ? ref.status() : got.status()).message()));
    if (!got.ok() || !ref.ok()) continue;
    const double d = MatricesRelDiff(*got, *ref);
    // Exact where averaging W equal gradients is (W = 2, 4).
    Expect(d <= ((W & (W - 1)) == 0 ? 0.0 : 1e-4), rank, name + ": max rel diff " + std::to_string(d));
    if (rank == 0) std::printf("%s world %d: max rel diff vs one rank %.3g\n", name.c_str(), W, d);
  }
}

void Equivalence(Communicator* comm) {
  const int rank = comm->rank(), W = comm->world_size();
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
      struct Variant {
        const char* name;
        int gas;
        double clip;
        int inf_step;
      };
      for (Variant v : {Variant{"plain", 1, 0.0, -1}, Variant{"gas2", 2, 0.0, -1},
                        Variant{"clip", 1, 0.05, -1}, Variant{"overflow", 1, 0.0, 3}}) {
        if (t != DType::kF16 && v.inf_step >= 0) continue;
        if (t != DType::kF32 && (v.gas > 1 || v.clip > 0)) continue;
        Config c = Cfg(stage, t);
        c.gradient_accumulation_steps = v.gas;
        c.gradient_clipping = v.clip;
        MlpSpec spec;  // includes a frozen param
        if (g_device != "cpu") {
          spec.make_device = [] {
            auto d = MakeDevice(g_device, 0);
            return d.ok() ? std::move(*d) : nullptr;
          };
        }
        spec.inf_step = v.inf_step;
        spec.inf_rank = W - 1;
        auto got = TrainMlp(c, comm, spec);
        std::string name = "stage " + std::to_string(stage) + " " + DTypeName(t) + " " + v.name;
        Expect(got.ok(), rank, name + ": " + std::string(got.status().message()));
        if (!got.ok()) continue;
        MlpSpec sspec = spec;
        sspec.inf_rank = 0;
        MlpResult ref = Single(c, sspec, rank);
        double d = MaxRelDiff(*got, ref);
        Expect(d <= Tol(t), rank, name + ": max rel diff " + std::to_string(d));
        if (v.inf_step >= 0) {
          Expect(got->steps[3].skipped && got->steps.back().skipped_steps == 1, rank,
                 name + ": overflow on the last rank skipped on every rank");
        }
        if (rank == 0 && t == DType::kF32) {
          std::printf("stage %d %s %-8s world %d: max rel diff vs single rank %.3g\n",
                      stage, DTypeName(t), v.name, W, d);
        }
      }
    }
  }
  // Formulas, fp16 (2 + 2 + 12 bytes per element).
  for (int stage = 0; stage <= 3; ++stage) {
    Config c = Cfg(stage, DType::kF16);
    c.stage3_param_persistence_threshold = 0;
    c.reduce_bucket_size = 2000;
    MlpSpec spec;
    spec.hidden = 500;
    spec.steps = 1;
    auto got = TrainMlp(c, comm, spec);
    if (!got.ok()) {
      Expect(false, rank, "formula run: " + std::string(got.status().message()));
      continue;
    }
    const EngineStats& s = got->stats;
    const int64_t P = s.padded_numel;
    int64_t params = 2 * P, grads = 2 * P, optim = 12 * P;
    if (stage >= 1) optim /= W;
    if (stage >= 2) grads /= W;
    if (stage >= 3) params /= W;
    Expect(s.param_bytes == params && s.grad_bytes == grads &&
               s.master_bytes + s.optimizer_bytes == optim,
           rank, "memory formula, stage " + std::to_string(stage));
    const double psi = static_cast<double>(s.trainable_numel);
    const double expected = (stage == 3 ? 3.0 : 2.0) * psi * (W - 1) / W;
    const double sent = static_cast<double>(s.sent[0] + s.sent[1] + s.sent[2]);
    Expect(std::abs(sent - expected) <= 3.0 * (P - s.trainable_numel) + 3 * W, rank,
           "traffic formula, stage " + std::to_string(stage) + ": sent " +
               std::to_string(sent) + " expected " + std::to_string(expected));
    if (rank == 0) {
      std::printf("stage %d world %d: model states %lld B/rank (Psi %lld), sent %.0f elems/step (formula %.0f)\n",
                  stage, W, static_cast<long long>(s.param_bytes + s.grad_bytes + s.master_bytes + s.optimizer_bytes),
                  static_cast<long long>(s.trainable_numel), sent, expected);
    }
  }
}

// The reduction keys under MPI's own collectives (tests/reduction_keys_test
// covers them over threads): reduce_scatter false, a small
// allgather_bucket_size, prescale_gradients, gradient_predivide_factor.
// communication_data_type fp16/bf16 over MPI (a user reduction op on the
// 16-bit values): the same elements at half the bytes, within the format's
// rounding of the fp32-reduced run.
void CommDataType(Communicator* comm) {
  const int rank = comm->rank();
  constexpr int kRs = static_cast<int>(CollectiveKind::kReduceScatter);
  constexpr int kAr = static_cast<int>(CollectiveKind::kAllReduce);
  for (int stage = 0; stage <= 3; ++stage) {
    const Config base = Cfg(stage, DType::kF32);
    auto ref = TrainMlp(base, comm, MlpSpec{});
    Expect(ref.ok(), rank, "fp32-reduced baseline, stage " + std::to_string(stage) + ": " +
                               std::string(ref.status().message()));
    for (DType ct : {DType::kF16, DType::kBF16}) {
      Config c = base;
      c.communication_data_type = ct;
      const std::string name = "communication_data_type " + std::string(DTypeName(ct)) +
                               " stage " + std::to_string(stage);
      auto got = TrainMlp(c, comm, MlpSpec{});
      Expect(got.ok(), rank, name + ": " + std::string(got.status().message()));
      if (!ref.ok() || !got.ok()) continue;
      const double d = MaxRelDiff(*got, *ref);
      Expect(d > 0.0 && d <= (ct == DType::kBF16 ? 2e-2 : 4e-3), rank,
             name + ": max rel diff " + std::to_string(d));
      for (int k : {kRs, kAr}) {
        Expect(got->stats.sent[k] == ref->stats.sent[k] &&
                   2 * got->stats.sent_bytes[k] == ref->stats.sent_bytes[k],
               rank, name + ": half the bytes");
      }
    }
    // DeepSpeed's default with the key unset: an fp16/bf16 model reduces in
    // its own format, at half the bytes of an explicit "fp32", within the
    // format's rounding of it (equal bits are possible at np 4: 1/4 scales
    // exactly).
    for (DType t : {DType::kF16, DType::kBF16}) {
      const Config def = Cfg(stage, t);
      Config fp32 = def;
      fp32.communication_data_type = DType::kF32;
      const std::string name = "default communication_data_type, " + std::string(DTypeName(t)) +
                               " model, stage " + std::to_string(stage);
      auto got = TrainMlp(def, comm, MlpSpec{});
      auto want = TrainMlp(fp32, comm, MlpSpec{});
      Expect(got.ok() && want.ok(), rank, name + ": run failed");
      if (!got.ok() || !want.ok()) continue;
      Expect(got->stats.comm_dtype == t && want->stats.comm_dtype == DType::kF32, rank,
             name + ": comm_dtype in stats");
      const double d = MaxRelDiff(*got, *want);
      Expect(d <= (t == DType::kBF16 ? 2e-2 : 4e-3), rank,
             name + ": max rel diff " + std::to_string(d));
      for (int k : {kRs, kAr}) {
        Expect(got->stats.sent[k] == want->stats.sent[k] &&
                   2 * got->stats.sent_bytes[k] == want->stats.sent_bytes[k],
               rank, name + ": half the bytes");
      }
    }
  }
}

void ReductionKeys(Communicator* comm) {
  const int rank = comm->rank();
  MlpSpec spec;
  if (g_device != "cpu") {
    spec.make_device = [] {
      auto d = MakeDevice(g_device, 0);
      return d.ok() ? std::move(*d) : nullptr;
    };
  }
  for (int stage = 0; stage <= 3; ++stage) {
    for (DType t : {DType::kF32, DType::kF16}) {
      const Config base = Cfg(stage, t);
      const MlpResult ref = Single(base, spec, rank);
      auto plain = TrainMlp(base, comm, spec);
      Expect(plain.ok(), rank,
             "stage " + std::to_string(stage) + " " + DTypeName(t) +
                 " baseline (no reduction key): " + std::string(plain.status().message()));
      for (int v = 0; v < 4; ++v) {
        Config c = base;
        std::string name;
        if (v == 0) { c.reduce_scatter = false; name = "reduce_scatter false"; }
        if (v == 1) { c.allgather_bucket_size = 50; name = "allgather_bucket_size 50"; }
        if (v == 2) { c.prescale_gradients = true; name = "prescale_gradients"; }
        if (v == 3) { c.gradient_predivide_factor = 3; name = "gradient_predivide_factor 3"; }
        name = "stage " + std::to_string(stage) + " " + DTypeName(t) + " " + name;
        auto got = TrainMlp(c, comm, spec);
        Expect(got.ok(), rank, name + ": " + std::string(got.status().message()));
        if (!got.ok()) continue;
        const double d = MaxRelDiff(*got, ref);
        Expect(d <= Tol(t), rank, name + ": max rel diff " + std::to_string(d));
        if (v == 0 && stage >= 1) {
          Expect(got->stats.sent[static_cast<int>(CollectiveKind::kReduceScatter)] == 0, rank,
                 name + ": no reduce-scatter");
        }
        if (v == 1) {  // gathers are copies: the same bits
          Expect(plain.ok(), rank, name + ": no baseline to compare the bits with");
          if (!plain.ok()) continue;
          Expect(MaxRelDiff(*got, *plain) == 0.0, rank, name + ": bitwise as one all-gather");
          if (stage == 1 || stage == 2) {
            Expect(got->stats.collective_calls > plain->stats.collective_calls, rank,
                   name + ": more all-gather calls");
          }
        }
      }
    }
  }
}

// A caller's own communicator through zero_comm_create_mpi's argument: the
// world split in two halves, each training on its own.
void SplitCommunicator(int world_rank, int world) {
  if (world < 2) return;
  MPI_Comm half;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_rank, &half);
  auto comm = MakeMpiCommunicator(&half);
  Expect(comm.ok(), world_rank, "communicator from a split MPI_Comm");
  if (comm.ok()) {
    const int expected = world / 2 + (world % 2 && world_rank % 2 == 0 ? 1 : 0);
    Expect((*comm)->world_size() == expected, world_rank, "split size");
    Config c = Cfg(2, DType::kF32);
    MlpSpec spec;
    spec.global_batch = 12;
    auto got = TrainMlp(c, comm->get(), spec);
    Expect(got.ok() && MaxRelDiff(*got, Single(c, spec, world_rank)) <= 1e-6, world_rank,
           "stage 2 on a split communicator equals one rank");
  }
  MPI_Comm_free(&half);
}

int DeadPeer(Communicator* comm) {
  Config c = Cfg(2, DType::kF32);
  c.comm_timeout_seconds = 2.0;
  auto e = Engine::Create(c, comm);
  if (!e.ok()) return 1;
  ParamSpec p;
  p.name = "w";
  p.shape = {1000};
  if (!(*e)->RegisterParam(p).ok() || !(*e)->Finalize().ok()) return 1;
  if (comm->rank() == 1) {
    if (g_exit_early) std::_Exit(0);  // dies without a word to anyone
    // Stuck peer: never reaches the next collective.
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto g = (*e)->GradBuffer(0);
  absl::Status s = g.status();
  if (s.ok()) s = (*e)->GradReady(0);
  if (s.ok()) s = (*e)->Step().status();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[rank %d] step after peer death: %s (after %.1f s)\n", comm->rank(),
              s.ToString().c_str(), secs);
  std::fflush(stdout);
  return s.code() == absl::StatusCode::kDeadlineExceeded && secs < 20 ? 0 : 1;
}

int StuckAfterArrival(Communicator* comm) {
  comm->set_timeout_seconds(2.0);
  if (comm->rank() == 1) {
    (void)comm->Barrier();
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  const int world = comm->world_size();
  std::vector<float> send(1000, 1.0f), recv(1000 * world);
  const auto t0 = std::chrono::steady_clock::now();
  absl::Status s = comm->AllGatherV(send.data(), recv.data(),
                                    std::vector<int64_t>(world, 1000), DType::kF32);
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[rank %d] all-gather after the peer stopped: %s (after %.1f s)\n", comm->rank(),
              s.ToString().c_str(), secs);
  std::fflush(stdout);
  return s.code() == absl::StatusCode::kDeadlineExceeded && secs < 20 ? 0 : 1;
}

// Returns 0 when `s` is the timeout within the 2 s deadline's margin.
int ReportTimeout(int rank, const char* what, const absl::Status& s, double secs) {
  std::printf("[rank %d] %s after the peer stopped: %s (after %.1f s)\n", rank, what,
              s.ToString().c_str(), secs);
  std::fflush(stdout);
  return s.code() == absl::StatusCode::kDeadlineExceeded && secs < 20 ? 0 : 1;
}

int StuckMedium(Communicator* comm) {
  auto second = comm->Duplicate();
  if (!second.ok()) return 1;
  Communicator* b = second->get();
  comm->set_timeout_seconds(2.0);
  b->set_timeout_seconds(2.0);
  const int world = comm->world_size();
  if (comm->rank() == 1) {
    // Arrives at both collectives (with the gate on, a barrier is the gate
    // alone, which the others' gate meets) and then stops. The others reach
    // the second only after the first timed out: wait for them longer.
    (void)comm->Barrier();
    b->set_timeout_seconds(30.0);
    (void)b->Barrier();
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  const int64_t per_rank = (int64_t{1} << 18) / world;
  std::vector<float> send(per_rank, 1.0f), recv(per_rank * world);
  auto t0 = std::chrono::steady_clock::now();
  absl::Status s = comm->AllGatherV(send.data(), recv.data(),
                                    std::vector<int64_t>(world, per_rank), DType::kF32);
  auto secs = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  int rc = ReportTimeout(comm->rank(), "medium all-gather", s, secs());
  std::vector<float> data(int64_t{1} << 16, 2.0f);
  t0 = std::chrono::steady_clock::now();
  s = b->Broadcast(data.data(), static_cast<int64_t>(data.size() * sizeof(float)), /*root=*/1);
  return ReportTimeout(comm->rank(), "medium broadcast", s, secs()) | rc;
}

int Mismatch(Communicator* comm) {
  Config c = Cfg(1, DType::kF32);
  auto e = Engine::Create(c, comm);
  if (!e.ok()) return 1;
  ParamSpec a;
  a.name = "layer.weight";
  a.shape = {8, comm->rank() == 1 ? 9 : 8};
  if (!(*e)->RegisterParam(a).ok()) return 1;
  absl::Status s = (*e)->Finalize();
  std::printf("[rank %d] finalize: %s\n", comm->rank(), s.ToString().c_str());
  std::fflush(stdout);
  return !s.ok() && s.message().find("layer.weight") != std::string::npos ? 0 : 1;
}


// The fp32 reduce-scatter against an independent reference: pieces of
// unequal and equal sizes, values that round when summed. The result is
// bit for bit the fp32 sum grouped as libnbc's binomial reduce to rank 0
// groups it (TreeSum below: at 2 ranks a + b, at 3 (a + b) + c, at 4
// (a + b) + (c + d)), the order every fp32 result recorded so far was made
// in; default mode exchanges the pieces itself
// (MpiCommunicator::ExchangeReduceScatter). It is also within fp32 rounding
// of the float64 sum. In default mode repeated calls take no page faults
// for what they receive: with glibc's mmap threshold fixed (as
// torch_gpt_bench fixes it) libnbc's per-call temporary was fresh pages
// each time (bench/README.md, "Stage 3's runtime threads" and "The
// reduce-scatter at 3+ ranks").
float PieceValue(int rank, int64_t i) {
  const uint32_t h = static_cast<uint32_t>(i) * 2654435761u + static_cast<uint32_t>(rank) * 40503u;
  return (static_cast<float>(h % 100003) - 50000.0f) * (rank % 2 ? 1.1e-3f : 0.7f);
}

// Element i of the ranks' pieces summed in fp32 as a binomial reduce to
// rank 0 groups it: ranks [lo, lo + 2^k) are the sum of [lo, lo + 2^(k-1))
// and [lo + 2^(k-1), lo + 2^k), ranks past the world left out.
float TreeSum(int lo, int span, int world, int64_t i) {
  if (span == 1) return PieceValue(lo, i);
  const int half = span / 2;
  const float left = TreeSum(lo, half, world, i);
  return lo + half < world ? left + TreeSum(lo + half, half, world, i) : left;
}

void ReduceScatterPieces(Communicator* comm) {
  const int rank = comm->rank(), W = comm->world_size();
  for (int64_t base : {int64_t{1000}, int64_t{1} << 18}) {
    for (bool equal : {false, true}) {
      std::vector<int64_t> counts(W);
      for (int r = 0; r < W; ++r) counts[r] = base + (equal ? 0 : 37 * r + (r % 2));
      int64_t total = 0, at = 0;
      for (int r = 0; r < W; ++r) {
        if (r < rank) at += counts[r];
        total += counts[r];
      }
      std::vector<float> send(total), recv(counts[rank], -1.0f);
      for (int64_t i = 0; i < total; ++i) send[i] = PieceValue(rank, i);
      absl::Status st = comm->ReduceScatterV(send.data(), recv.data(), counts);
      Expect(st.ok(), rank, "reduce-scatter pieces: " + st.ToString());
      int64_t bad = -1;
      for (int64_t i = 0; i < counts[rank] && bad < 0; ++i) {
        double sum = 0, mag = 0;
        for (int r = 0; r < W; ++r) {
          sum += PieceValue(r, at + i);
          mag += std::fabs(PieceValue(r, at + i));
        }
        int span = 1;
        while (span < W) span *= 2;
        const float exact = TreeSum(0, span, W, at + i);
        if (std::memcmp(&exact, &recv[i], sizeof(float)) != 0) bad = i;
        if (std::fabs(recv[i] - sum) > 1.2e-7 * mag * W) bad = i;  // fp32 rounding per add
      }
      Expect(bad < 0, rank, "reduce-scatter pieces (base " + std::to_string(base) +
                                (equal ? ", equal" : ", unequal") + "): element " +
                                std::to_string(bad) + " differs from the reference");
    }
  }
  const char* direct = std::getenv("ZERO_MPI_WATCHDOG");
  if (direct != nullptr && std::strcmp(direct, "1") == 0) return;
  mallopt(M_MMAP_THRESHOLD, 131072);
  const int64_t n = int64_t{1} << 20;  // 4 MiB received per call from each peer
  std::vector<int64_t> counts(W, n);
  std::vector<float> send(W * n, 1.0f), recv(n, 0.0f);
  Expect(comm->ReduceScatterV(send.data(), recv.data(), counts).ok(), rank, "warm-up");
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  constexpr int kCalls = 8;
  for (int k = 0; k < kCalls; ++k) {
    Expect(comm->ReduceScatterV(send.data(), recv.data(), counts).ok(), rank, "reduce-scatter");
  }
  getrusage(RUSAGE_SELF, &after);
  const long faults = after.ru_minflt - before.ru_minflt;
  const long pages = kCalls * n * 4 / 4096;  // what a fresh receive buffer (one piece) would fault
  Expect(faults < pages / 8, rank, "reduce-scatter took " + std::to_string(faults) +
                                       " page faults over " + std::to_string(kCalls) +
                                       " calls (" + std::to_string(pages) +
                                       " pages received): a fresh buffer per call");
}

// The sum all-reduce against an independent reference, float and double,
// odd and even counts (1 element up to 256K + 3): at 2 ranks each element
// is exactly a + b, the bits of any 2-rank sum (default mode computes it
// itself: MpiCommunicator::PairAllReduce); at 3+ ranks within fp rounding
// of the float64 sum. The max all-reduce is exact at every world size.
template <typename T>
void AllReduceOne(Communicator* comm, int64_t n) {
  const int rank = comm->rank(), W = comm->world_size();
  std::vector<T> data(n);
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<T>(PieceValue(rank, i));
  absl::Status st = comm->AllReduce(data.data(), n, ReduceOp::kSum);
  Expect(st.ok(), rank, "all-reduce: " + st.ToString());
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; ++i) {
    if (W == 2) {
      const T exact = static_cast<T>(PieceValue(0, i)) + static_cast<T>(PieceValue(1, i));
      if (std::memcmp(&exact, &data[i], sizeof(T)) != 0) bad = i;
    } else {
      double sum = 0, mag = 0;
      for (int r = 0; r < W; ++r) {
        sum += PieceValue(r, i);
        mag += std::fabs(PieceValue(r, i));
      }
      if (std::fabs(data[i] - sum) > 1.2e-7 * mag * W) bad = i;
    }
  }
  Expect(bad < 0, rank, "all-reduce sum of " + std::to_string(n) + (sizeof(T) == 4 ? " floats" : " doubles") +
                            ": element " + std::to_string(bad) + " differs from the reference");
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<T>(PieceValue(rank, i));
  st = comm->AllReduce(data.data(), n, ReduceOp::kMax);
  bad = -1;
  for (int64_t i = 0; i < n && bad < 0; ++i) {
    T want = static_cast<T>(PieceValue(0, i));
    for (int r = 1; r < W; ++r) want = std::max(want, static_cast<T>(PieceValue(r, i)));
    if (data[i] != want) bad = i;
  }
  Expect(st.ok() && bad < 0, rank, "all-reduce max of " + std::to_string(n) + ": element " +
                                       std::to_string(bad) + " differs");
}

void AllReducePieces(Communicator* comm) {
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{7}, int64_t{1000}, (int64_t{1} << 18) + 3}) {
    AllReduceOne<float>(comm, n);
    AllReduceOne<double>(comm, n);
  }
}

// A rank that waits for a late peer does not burn its core: the last rank
// reaches an all-gather, a broadcast and a reduce-scatter 300 ms after the
// others, whose calling thread must use well under a quarter of that wait
// in CPU time. With a core per rank the arrival gate sleeps through it;
// with more ranks than cores (np 3 and 4 on 2 cores) there is no gate and
// the polls sleep between tests (ArrivalGateOptions::transfer_max_sleep,
// MpiCommunicator::Wait): back-to-back tests spun at 100 % of a core for
// the whole wait (bench/README.md, "Waiting at 4 ranks on 2 cores").
// Direct mode waits in MPI's blocking calls, which spin: not checked.
double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

void LatePeerWaitSleeps(Communicator* comm) {
  const char* direct = std::getenv("ZERO_MPI_WATCHDOG");
  if (direct != nullptr && std::strcmp(direct, "1") == 0) return;
  const int rank = comm->rank(), W = comm->world_size();
  const int64_t n = 4096;
  std::vector<float> piece(n, static_cast<float>(rank)), all(n * W), send(n * W, 1.0f), out(n);
  const std::vector<int64_t> counts(W, n);
  const char* names[] = {"all-gather", "broadcast", "reduce-scatter"};
  for (int op = 0; op < 3; ++op) {
    Expect(comm->Barrier().ok(), rank, "barrier");
    if (rank == W - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    const double c0 = ThreadCpuSeconds();
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status st = op == 0   ? comm->AllGatherV(piece.data(), all.data(), counts, DType::kF32)
                      : op == 1 ? comm->Broadcast(all.data(), n * sizeof(float), W - 1)
                                : comm->ReduceScatterV(send.data(), out.data(), counts);
    const double cpu = ThreadCpuSeconds() - c0;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    Expect(st.ok(), rank, std::string(names[op]) + " after a late peer: " + st.ToString());
    if (rank == W - 1 || wall < 0.2) continue;  // the late one; or no wait to speak of
    Expect(cpu < 0.25 * wall, rank,
           std::string(names[op]) + " waiting " + std::to_string(wall * 1e3) + " ms for a late " +
               "peer took " + std::to_string(cpu * 1e3) + " ms of CPU: it spun");
  }
}
}  // namespace
}  // namespace testing
}  // namespace zero

int main(int argc, char** argv) {
  using namespace zero;
  auto comm = MakeMpiCommunicator(nullptr);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 1;
  }
  (*comm)->set_timeout_seconds(120);
  if (argc > 1 && (std::strcmp(argv[1], "--dead-peer") == 0 ||
                   std::strcmp(argv[1], "--exit-early") == 0)) {
    testing::g_exit_early = std::strcmp(argv[1], "--exit-early") == 0;
    int rc = testing::DeadPeer(comm->get());
    // The communicator is broken: leave without MPI_Finalize (mpirun then
    // ends the stuck rank) instead of waiting on it.
    std::fflush(stdout);
    std::_Exit(rc);
  }
  if (argc > 1 && std::strcmp(argv[1], "--stuck-after-arrival") == 0) {
    int rc = testing::StuckAfterArrival(comm->get());
    std::fflush(stdout);
    std::_Exit(rc);  // as --dead-peer: the communicator is broken
  }
  if (argc > 1 && std::strcmp(argv[1], "--stuck-medium") == 0) {
    int rc = testing::StuckMedium(comm->get());
    std::fflush(stdout);
    std::_Exit(rc);  // as --dead-peer: the communicators are broken
  }
  if (argc > 1 && std::strcmp(argv[1], "--mismatch") == 0) {
    int rc = testing::Mismatch(comm->get());
    double bad = rc;
    (void)(*comm)->AllReduce(&bad, 1, ReduceOp::kMax);
    return bad > 0 ? 1 : 0;
  }
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0) testing::g_device = argv[i + 1];
  }
  testing::Equivalence(comm->get());
  testing::MuonOverMpi(comm->get());
  testing::ReductionKeys(comm->get());
  testing::CommDataType(comm->get());
  testing::SplitCommunicator((*comm)->rank(), (*comm)->world_size());
  testing::ReduceScatterPieces(comm->get());
  testing::LatePeerWaitSleeps(comm->get());
  testing::AllReducePieces(comm->get());
  return testing::SumChecksOverRanks(comm->get(), "mpi_engine");
}

// CPU optimizer throughput against the machine's memory bandwidth: the SIMD
// + OpenMP Adam kernel (kernels/cpu) on N fp32 params, Lion and Adagrad
// through the same OptimizerStep, a STREAM-style triad over the
// same arrays in the same process, and the scalar per-element loop the
// kernel replaced. JSON lines on stdout. Not a test.
//
// Bytes counted per element: Adam reads g, p, m, v and writes p, m, v
// (7 x 4 bytes); with a working copy it also writes 2 or 4 bytes. Lion and
// Adagrad read g, p and one moment and write p and the moment (5 x 4); Adam
// over bf16 moments 5 x 4, over 8-bit moments 4 x 4 + 2 x 2.125. Triad
// a = b + s * c counts 3 x 4 bytes, as STREAM does.
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_clock.h"
#include "kernels/adam_math.h"
#include "kernels/moments_format_math.h"
#include "kernels/optim_math.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/moments_format_step.h"
#include "kernels/cpu/optim_simd.h"
#include "kernels/cpu/q8_codec_simd.h"

namespace {

float* Alloc(int64_t n) {
  float* p = static_cast<float*>(std::aligned_alloc(64, ((n * 4 + 63) / 64) * 64));
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = 0.001f * static_cast<float>(i % 1000) - 0.5f;
  return p;
}

// STREAM triad, vectorized by the compiler (restrict, OpenMP simd).
void Triad(float* __restrict a, const float* __restrict b, const float* __restrict c,
           float k, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + k * c[i];
}

// In-place triad a = a + k * b: same 12 counted bytes, but no
// write-allocate traffic (like Adam, which writes only what it read).
void TriadInPlace(float* __restrict a, const float* __restrict b, float k, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) a[i] = a[i] + k * b[i];
}

// The last Best's fastest process CPU seconds (all threads): on a loaded
// machine it leaves out the time other processes held the cores, which
// penalises a longer kernel more than a short one in wall time.
double g_best_cpu = 0.0;

template <typename Fn>
double Best(int reps, Fn fn) {
  double best = 1e30;
  g_best_cpu = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = zero::bench::WallSeconds(), c0 = zero::bench::ProcessCpuSeconds();
    fn();
    best = std::min(best, zero::bench::WallSeconds() - t0);
    g_best_cpu = std::min(g_best_cpu, zero::bench::ProcessCpuSeconds() - c0);
  }
  return best;
}

void Report(const char* what, int64_t n, double secs, double bytes_per_elem, int threads) {
  std::printf("{\"bench\":\"cpu_adam\",\"kernel\":\"%s\",\"params\":%lld,\"threads\":%d,"
              "\"seconds\":%.5f,\"params_per_s\":%.4g,\"gb_per_s\":%.3f}\n",
              what, static_cast<long long>(n), threads, secs, n / secs,
              n * bytes_per_elem / secs / 1e9);
  std::fflush(stdout);
}

// One thread's CPU ns per element of the 8-bit step's parts (fastest of 200
// repetitions).
struct Q8Phases {
  double decode, encode, adam_fp32_tile, adam_8bit_step, adam_fp32_l1;
};

// Where the 8-bit step's time goes: one thread's CPU ns per element over an
// L1/L2-resident tile of 4096 elements: the codec's decode and encode, the
// fp32 Adam tile, and the whole 8-bit step (cpu::AdamPackedStep, one
// thread) over the same tile; and the fp32 Adam arithmetic alone over 512
// elements (8 KiB of g, p, m, v: L1), what the 8-bit step would cost if
// decoding and encoding were free.
Q8Phases ReportQ8Phases(const zero::math::AdamScalars& s) {
  constexpr int64_t kTile = 4096;
  std::vector<float> g(kTile), p(kTile), m(kTile), v(kTile);
  for (int64_t i = 0; i < kTile; ++i) {
    g[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
    p[i] = 0.5f - 0.001f * static_cast<float>(i % 1000);
    m[i] = 1e-3f * g[i];
    v[i] = 1e-4f * g[i] * g[i];
  }
  std::vector<zero::math::Q8Block> q(kTile / zero::math::kQ8Block);
  zero::cpu::PackMoments(zero::math::kMomentsQ8, m.data(), v.data(), q.data(), kTile);
  auto ns = [&](int64_t elems, auto fn) {
    double best = 1e30;
    for (int r = 0; r < 200; ++r) {
      const double t0 = zero::bench::ThreadCpuSeconds();
      fn();
      best = std::min(best, zero::bench::ThreadCpuSeconds() - t0);
    }
    return best * 1e9 / elems;
  };
  const double decode =
      ns(kTile, [&] { zero::cpu::Q8DecodeTile(q.data(), kTile, m.data(), v.data()); });
  const double encode =
      ns(kTile, [&] { zero::cpu::Q8EncodeTile(m.data(), v.data(), kTile, q.data()); });
  const double adam = ns(kTile, [&] {
    zero::cpu::AdamTile(s, g.data(), p.data(), m.data(), v.data(), kTile, nullptr);
  });
  const double step = ns(kTile, [&] {
    zero::cpu::AdamPackedStep(s, zero::math::kMomentsQ8, g.data(), zero::DType::kF32, p.data(),
                              q.data(), kTile, nullptr, zero::DType::kF32, false, 1);
  });
  // 512 elements 16 times per timing: one pass is too short for the clock.
  constexpr int64_t kL1 = 512, kL1Passes = 16;
  const double adam_l1 = ns(kL1 * kL1Passes, [&] {
    for (int r = 0; r < kL1Passes; ++r) {
      zero::cpu::AdamTile(s, g.data(), p.data(), m.data(), v.data(), kL1, nullptr);
    }
  });
  std::printf("{\"bench\":\"cpu_adam\",\"q8_tile_thread_cpu_ns_per_elem\":{\"decode\":%.3f,"
              "\"encode\":%.3f,\"adam_fp32_tile\":%.3f,\"adam_8bit_step\":%.3f,"
              "\"adam_fp32_l1_512\":%.3f}}\n",
              decode, encode, adam, step, adam_l1);
  std::fflush(stdout);
  return {decode, encode, adam, step, adam_l1};
}

}  // namespace

int main(int argc, char** argv) {
  // atof: "2e7" means 20M (atoll would read 2).
  const int64_t n = argc > 1 ? static_cast<int64_t>(std::atof(argv[1])) : 50000000;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  const int threads = omp_get_max_threads();
  float* g = Alloc(n);
  float* p = Alloc(n);
  float* m = Alloc(n);
  float* v = Alloc(n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) v[i] = v[i] * v[i];
  uint16_t* w16 = static_cast<uint16_t*>(std::aligned_alloc(64, ((n * 2 + 63) / 64) * 64));
  std::memset(w16, 0, n * 2);
  std::fprintf(stderr, "cpu_adam_bench: %lld params, %d threads, SIMD target %s\n",
               static_cast<long long>(n), threads, zero::cpu::SimdTargetName());
  const auto s = zero::math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, 10, 1.0f);

  const float k = 0.5f;
  // The triad writes p from g and m; p is refreshed from m afterwards.
  const double triad = Best(reps, [&] { Triad(p, g, m, k, n); });
  Report("stream_triad", n, triad, 12, threads);
  const double triad_rmw = Best(reps, [&] { TriadInPlace(p, m, 1e-9f, n); });
  const double triad_rmw_cpu = g_best_cpu;
  Report("triad_in_place", n, triad_rmw, 12, threads);
  const double adam = Best(reps, [&] {
    zero::cpu::AdamStep(s, g, p, m, v, n, nullptr, zero::DType::kF32);
  });
  const double adam_cpu = g_best_cpu;
  Report("adam_simd", n, adam, 28, threads);
  const double adam_bf16 = Best(reps, [&] {
    zero::cpu::AdamStep(s, g, p, m, v, n, w16, zero::DType::kBF16);
  });
  Report("adam_simd_bf16_copy", n, adam_bf16, 30, threads);
  const double adam_f16 = Best(reps, [&] {
    zero::cpu::AdamStep(s, g, p, m, v, n, w16, zero::DType::kF16);
  });
  Report("adam_simd_fp16_copy", n, adam_f16, 30, threads);
  zero::math::OptimScalars lion{};
  lion.kind = zero::math::kOptimLion;
  lion.lion = zero::math::MakeLionScalars(1e-4f, 0.9f, 0.99f, 0.01f, 1.0f);
  const double lion_t = Best(reps, [&] {
    zero::cpu::OptimizerStep(lion, g, zero::DType::kF32, p, m, nullptr, n, nullptr,
                             zero::DType::kF32, false);
  });
  Report("lion_simd", n, lion_t, 20, threads);
  zero::math::OptimScalars adagrad{};
  adagrad.kind = zero::math::kOptimAdagrad;
  adagrad.adagrad = zero::math::MakeAdagradScalars(1e-4f, 1e-10f, 0.01f, 1.0f);
  const double adagrad_t = Best(reps, [&] {
    zero::cpu::OptimizerStep(adagrad, g, zero::DType::kF32, p, v, nullptr, n, nullptr,
                             zero::DType::kF32, false);
  });
  Report("adagrad_simd", n, adagrad_t, 20, threads);
  // Adam over packed moments (kernels/moments_format_math.h): bf16 reads
  // g, p and one 4-byte word of moments and writes p and the word (20
  // bytes); 8-bit moves 2 + 8/64 bytes of moments each way (16.25).
  std::vector<double> packed_t, packed_cpu;
  for (int format : {zero::math::kMomentsBf16, zero::math::kMomentsQ8}) {
    std::vector<char> mv(zero::math::PackedMomentsBytes(format, n));
    zero::cpu::PackMoments(format, m, v, mv.data(), n);
    zero::math::OptimScalars packed{};
    packed.kind = zero::math::kOptimAdam;
    packed.moments_format = format;
    packed.adam = s;
    packed_t.push_back(Best(reps, [&] {
      zero::cpu::OptimizerStep(packed, g, zero::DType::kF32, p,
                               reinterpret_cast<float*>(mv.data()), nullptr, n, nullptr,
                               zero::DType::kF32, false);
    }));
    packed_cpu.push_back(g_best_cpu);
  }
  Report("adam_bf16_moments", n, packed_t[0], 20, threads);
  Report("adam_8bit_moments", n, packed_t[1], 16.25, threads);
  const Q8Phases q8 = ReportQ8Phases(s);
  const double scalar = Best(reps, [&] {
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) zero::math::AdamUpdate(s, g[i], &p[i], &m[i], &v[i]);
  });
  Report("adam_scalar_omp", n, scalar, 28, threads);
  // What bounds the 8-bit step: its 16.25 bytes per element at the fp32
  // Adam arithmetic's own L1 time on every thread (decode and encode free)
  // over the in-place triad, by wall time and by CPU time; the codec's
  // share of the fused step's time on the 4096-element tile; and the
  // per-thread CPU ns per element that 0.9 x the in-place triad (by CPU
  // time) leaves the whole step.
  const double triad_cpu_ns_per_elem = triad_rmw_cpu * 1e9 / n;
  const double ceiling_wall = (16.25 * threads / q8.adam_fp32_l1) / (12.0 * n / triad_rmw / 1e9);
  const double ceiling_cpu = (16.25 / q8.adam_fp32_l1) / (12.0 / triad_cpu_ns_per_elem);
  const double codec_share = (q8.adam_8bit_step - q8.adam_fp32_tile) / q8.adam_8bit_step;
  const double ns_for_0_9 = 16.25 * triad_cpu_ns_per_elem / (0.9 * 12.0);
  std::printf("{\"bench\":\"cpu_adam\",\"summary\":true,\"params\":%lld,"
              "\"adam_gbps_over_triad_gbps\":%.3f,"
              "\"adam_gbps_over_in_place_triad_gbps\":%.3f,"
              "\"lion_gbps_over_in_place_triad_gbps\":%.3f,"
              "\"adagrad_gbps_over_in_place_triad_gbps\":%.3f,"
              "\"adam_bf16_moments_gbps_over_in_place_triad_gbps\":%.3f,"
              "\"adam_8bit_moments_gbps_over_in_place_triad_gbps\":%.3f,"
              "\"adam_bf16_moments_time_over_adam\":%.3f,"
              "\"adam_8bit_moments_time_over_adam\":%.3f,\"scalar_over_simd_time\":%.3f,"
              "\"adam_8bit_codec_free_ceiling_over_in_place_triad\":%.3f,"
              "\"adam_8bit_step_codec_share\":%.3f,"
              "\"adam_8bit_thread_cpu_ns_per_elem_for_0_9_of_in_place_triad\":%.3f,"
              "\"cpu_time\":{\"adam_gbps_over_in_place_triad_gbps\":%.3f,"
              "\"adam_bf16_moments_gbps_over_in_place_triad_gbps\":%.3f,"
              "\"adam_8bit_moments_gbps_over_in_place_triad_gbps\":%.3f,"
              "\"adam_8bit_codec_free_ceiling_over_in_place_triad\":%.3f}}\n",
              static_cast<long long>(n), (28.0 / adam) / (12.0 / triad),
              (28.0 / adam) / (12.0 / triad_rmw), (20.0 / lion_t) / (12.0 / triad_rmw),
              (20.0 / adagrad_t) / (12.0 / triad_rmw), (20.0 / packed_t[0]) / (12.0 / triad_rmw),
              (16.25 / packed_t[1]) / (12.0 / triad_rmw), packed_t[0] / adam, packed_t[1] / adam,
              scalar / adam, ceiling_wall, codec_share, ns_for_0_9,
              (28.0 / adam_cpu) / (12.0 / triad_rmw_cpu),
              (20.0 / packed_cpu[0]) / (12.0 / triad_rmw_cpu),
              (16.25 / packed_cpu[1]) / (12.0 / triad_rmw_cpu), ceiling_cpu);
  return 0;
}

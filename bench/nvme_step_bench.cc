// NVMe optimizer step throughput: an Adam step streamed through the NVMe
// tier (read sub-group k+1, update k, write k-1) against raw sequential
// O_DIRECT writes and reads of the same volume, in the same run and the
// same directory. JSON lines on stdout. Not a test.
//
// Usage: nvme_step_bench DIR [params=25e6] [sub_group=4e6] [steps=3]
//                          [buffer_count=4] [uring=1]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_clock.h"
#include "core/offload/aio.h"
#include "core/offload/nvme_tier.h"
#include "kernels/adam_math.h"
#include "kernels/cpu/cpu_kernels.h"

namespace {

using zero::bench::WallSeconds;

void Die(const std::string& what) {
  std::fprintf(stderr, "nvme_step_bench: %s\n", what.c_str());
  std::exit(1);
}

// Sequential O_DIRECT write then read of `bytes` through the same Aio
// settings the tier uses, in 64 MiB requests, all submitted at once.
void RawIo(const std::string& dir, int64_t bytes, const zero::offload::AioOptions& ao,
           double* write_s, double* read_s) {
  const std::string path = dir + "/raw_io_bench.swp";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_DIRECT, 0600);
  if (fd < 0) Die("open " + path + ": " + std::strerror(errno));
  if (::posix_fallocate(fd, 0, bytes) != 0) Die("fallocate raw file");
  const int64_t piece = 64 << 20;
  char* buf = static_cast<char*>(std::aligned_alloc(4096, piece));
  std::memset(buf, 1, piece);
  auto aio = zero::offload::Aio::Create(ao);
  std::vector<zero::offload::Aio::Ticket> t;
  double t0 = WallSeconds();
  for (int64_t off = 0; off < bytes; off += piece) {
    t.push_back(aio->Write(fd, buf, std::min(piece, bytes - off), off, path));
  }
  for (auto x : t) if (!aio->Wait(x).ok()) Die("raw write failed");
  ::fdatasync(fd);
  *write_s = WallSeconds() - t0;
  t.clear();
  t0 = WallSeconds();
  for (int64_t off = 0; off < bytes; off += piece) {
    t.push_back(aio->Read(fd, buf, std::min(piece, bytes - off), off, path));
  }
  for (auto x : t) if (!aio->Wait(x).ok()) Die("raw read failed");
  *read_s = WallSeconds() - t0;
  aio.reset();
  ::close(fd);
  ::unlink(path.c_str());
  std::free(buf);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) Die("usage: nvme_step_bench DIR [params] [sub_group] [steps] [buffers] [uring]");
  const std::string dir = argv[1];
  const int64_t n = argc > 2 ? static_cast<int64_t>(std::atof(argv[2])) : 25000000;
  const int64_t sub = argc > 3 ? static_cast<int64_t>(std::atof(argv[3])) : 4000000;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 3;
  const int buffers = argc > 5 ? std::atoi(argv[5]) : 4;
  const bool uring = argc > 6 ? std::atoi(argv[6]) != 0 : true;

  zero::offload::NvmeTierOptions o;
  o.dir = dir;
  o.tag = "bench";
  o.num_arrays = 3;
  o.buffer_count = buffers;
  o.chunk_elems = sub;
  o.aio.use_uring = uring;
  auto tier = zero::offload::NvmeTier::Create(o, {n});
  if (!tier.ok()) Die(std::string(tier.status().message()));
  std::vector<float> grad(n);
  for (int64_t i = 0; i < n; ++i) grad[i] = 1e-3f * static_cast<float>(i % 1000 - 500);
  std::vector<uint16_t> work(n);
  absl::Status s = (*tier)->Initialize([](const zero::offload::NvmeTier::Chunk& c, float* const* a) {
    for (int64_t i = 0; i < c.len; ++i) a[0][i] = 0.01f * static_cast<float>((c.begin + i) % 100);
    return absl::OkStatus();
  });
  if (!s.ok()) Die(std::string(s.message()));
  const auto st0 = (*tier)->stats();
  double best = 1e30, total = 0, compute = 0;
  int64_t moved = 0;
  for (int k = 1; k <= steps; ++k) {
    const auto sc = zero::math::MakeAdamScalars(1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1, k, 1.0f);
    const auto before = (*tier)->stats();
    const double t0 = WallSeconds();
    s = (*tier)->Update(
        [&](const zero::offload::NvmeTier::Chunk& c, float* const* a) {
          const double c0 = WallSeconds();
          zero::cpu::AdamStep(sc, grad.data() + c.begin, a[0], a[1], a[2], c.len,
                              work.data() + c.begin, zero::DType::kBF16);
          compute += WallSeconds() - c0;
          return absl::OkStatus();
        },
        [](bool ok) -> absl::StatusOr<bool> { return ok; });
    const double dt = WallSeconds() - t0;
    if (!s.ok()) Die(std::string(s.message()));
    const auto after = (*tier)->stats();
    moved = after.bytes_read - before.bytes_read + after.bytes_written - before.bytes_written;
    best = std::min(best, dt);
    total += dt;
    std::printf("{\"bench\":\"nvme_step\",\"step\":%d,\"seconds\":%.4f,\"bytes_moved\":%lld,"
                "\"gb_per_s\":%.3f}\n", k, dt, static_cast<long long>(moved), moved / dt / 1e9);
    std::fflush(stdout);
  }
  double ws = 0, rs = 0;
  const int64_t half = moved / 2;  // the step reads and writes the same volume
  RawIo(dir, half, o.aio, &ws, &rs);
  const double raw = 2.0 * half / (ws + rs);
  const double step_rate = moved / best;
  std::printf("{\"bench\":\"nvme_step\",\"summary\":true,\"params\":%lld,\"sub_group\":%lld,"
              "\"buffer_count\":%d,\"direct_io\":%d,\"uring\":%d,\"host_buffer_bytes\":%lld,"
              "\"file_bytes\":%lld,\"best_step_s\":%.4f,\"mean_step_s\":%.4f,"
              "\"adam_compute_s_per_step\":%.4f,\"step_gb_per_s\":%.3f,"
              "\"raw_write_gb_per_s\":%.3f,\"raw_read_gb_per_s\":%.3f,\"raw_gb_per_s\":%.3f,"
              "\"step_over_raw\":%.3f}\n",
              static_cast<long long>(n), static_cast<long long>(sub), buffers, st0.direct_io,
              st0.uring, static_cast<long long>(st0.host_bytes),
              static_cast<long long>(st0.file_bytes), best, total / steps, compute / steps,
              step_rate / 1e9, half / ws / 1e9, half / rs / 1e9, raw / 1e9, step_rate / raw);
  return 0;
}

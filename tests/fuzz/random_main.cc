// Runs a libFuzzer target on random inputs for a time, without libFuzzer:
// for a target too heavy for tools/fuzz.sh's clang build outside Bazel (the
// divergence target needs the whole CPU engine), built by Bazel (under
// --config=asan in tools/fuzz.sh). Each input is written to OUT/current
// before it runs, so a crash or an abort leaves the input that caused it
// (copy it into tests/fuzz/regressions/TARGET/ to replay it in every test
// run).
//
//   random_main SECONDS OUT [SEED] [MAX_LEN=64]
//
// Prints one JSON line: {"execs", "seconds", "seed"}.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SECONDS OUT [SEED] [MAX_LEN]\n", argv[0]);
    return 2;
  }
  const double seconds = std::atof(argv[1]);
  const std::string current = std::string(argv[2]) + "/current";
  const uint64_t seed = argc > 3 ? std::strtoull(argv[3], nullptr, 10)
                                 : static_cast<uint64_t>(std::random_device{}());
  const size_t max_len = argc > 4 ? std::strtoul(argv[4], nullptr, 10) : 64;
  std::mt19937_64 rng(seed);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  long execs = 0;
  do {
    std::vector<uint8_t> input(1 + rng() % max_len);
    for (uint8_t& b : input) b = static_cast<uint8_t>(rng());
    {
      std::ofstream out(current, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(input.data()), input.size());
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
    ++execs;
  } while (elapsed() < seconds);
  std::remove(current.c_str());
  std::printf("{\"execs\": %ld, \"seconds\": %.1f, \"seed\": %llu}\n", execs, elapsed(),
              static_cast<unsigned long long>(seed));
  return 0;
}

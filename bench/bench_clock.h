// Clocks the benches read: wall time, and CPU time of the process or the
// calling thread (on a loaded machine the wall clock mostly measures waiting
// for a core, the CPU time the work).
#ifndef ZERO_BENCH_BENCH_CLOCK_H_
#define ZERO_BENCH_BENCH_CLOCK_H_

#include <time.h>

#include <chrono>

namespace zero {
namespace bench {

inline double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double CpuSeconds(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}
inline double ProcessCpuSeconds() { return CpuSeconds(CLOCK_PROCESS_CPUTIME_ID); }
inline double ThreadCpuSeconds() { return CpuSeconds(CLOCK_THREAD_CPUTIME_ID); }

}  // namespace bench
}  // namespace zero

#endif  // ZERO_BENCH_BENCH_CLOCK_H_

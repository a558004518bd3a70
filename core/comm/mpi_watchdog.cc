#include "core/comm/mpi_watchdog.h"

#include <mpi.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/comm/mpi_init_policy.h"

namespace zero {

Watchdog& Watchdog::Get() {
  static Watchdog* w = new Watchdog();  // never destroyed: it may be firing
  return *w;
}

void Watchdog::Add(const std::shared_ptr<WatchSlot>& slot) {
  std::lock_guard<std::mutex> l(mu_);
  slots_.push_back(slot);
  if (!started_) {
    started_ = true;
    std::thread([this] { Loop(); }).detach();
  }
}

void Watchdog::Loop() {
  pthread_setname_np(pthread_self(), "zero-watchdog");
  for (;;) {
    // Ten checks a second at most, and at least four per shortest timeout.
    double period = 0.1;
    std::shared_ptr<WatchSlot> late;
    {
      std::lock_guard<std::mutex> l(mu_);
      const int64_t now = NowNs();
      for (auto it = slots_.begin(); it != slots_.end();) {
        auto s = it->lock();
        if (!s) {
          it = slots_.erase(it);
          continue;
        }
        period = std::min(period, std::max(0.001, s->timeout_s.load() / 4));
        const int64_t d = s->deadline_ns.load(std::memory_order_acquire);
        if (d != 0 && now > d && !late) late = s;
        ++it;
      }
    }
    if (late) Fire(*late);
    std::this_thread::sleep_for(std::chrono::duration<double>(period));
  }
}

void Watchdog::Fire(const WatchSlot& s) {
  MarkMpiBroken();
  std::fprintf(stderr,
               "[zero] DEADLINE_EXCEEDED: mpi communicator: %s timed out after %g s on rank "
               "%d of %d: a peer is dead or stuck (comm_timeout_seconds); the call blocks in "
               "MPI (ZERO_MPI_WATCHDOG=1), so the job is ended\n",
               s.what.load(), s.timeout_s.load(), s.rank, s.world);
  std::fflush(stdout);
  std::fflush(stderr);
  // The peers that waited on the same collective time out within the
  // same moment: let them say so before the abort ends every rank.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  if (!MpiSerialized()) MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // mpirun ends the job when a rank exits without finalizing
}

int64_t Watchdog::NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace zero

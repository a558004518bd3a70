#include "core/comm/mpi_short_sleep.h"

#include <sys/prctl.h>

#include <thread>

namespace zero {

void MpiShortSleep(std::chrono::microseconds d) {
  thread_local bool slack_set = false;
  if (!slack_set) {
    slack_set = true;
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // nanoseconds
  }
  std::this_thread::sleep_for(d);
}

}  // namespace zero

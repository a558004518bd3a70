#include "core/comm/mpi_short_sleep.h"

#include <sys/prctl.h>

#include <thread>

namespace zero {
namespace {

void ShortTimerSlack() {
  thread_local bool slack_set = false;
  if (!slack_set) {
    slack_set = true;
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);  // nanoseconds
  }
}

}  // namespace

void MpiShortSleep(std::chrono::microseconds d) {
  ShortTimerSlack();
  std::this_thread::sleep_for(d);
}

bool MpiShortSleepOrRing(LocalDoorbell* bell, uint32_t seen, std::chrono::microseconds d) {
  if (bell == nullptr) {
    MpiShortSleep(d);
    return false;
  }
  ShortTimerSlack();  // the futex wait's timeout is a timer too
  return bell->Wait(seen, d);
}

}  // namespace zero

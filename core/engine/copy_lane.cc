#include "core/engine/copy_lane.h"

#include <utility>

namespace zero {

CopyLane::CopyLane() : thread_([this] { Run(); }) {}

CopyLane::~CopyLane() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

int64_t CopyLane::Submit(std::function<void()> copy) {
  int64_t ticket;
  {
    std::lock_guard<std::mutex> l(mu_);
    q_.push_back(std::move(copy));
    ticket = ++submitted_;
  }
  work_cv_.notify_one();
  return ticket;
}

void CopyLane::Wait(int64_t ticket) {
  std::unique_lock<std::mutex> l(mu_);
  done_cv_.wait(l, [&] { return done_ >= ticket; });
}

void CopyLane::Drain() {
  int64_t last;
  {
    std::lock_guard<std::mutex> l(mu_);
    last = submitted_;
  }
  Wait(last);
}

// Everything submitted runs, even after stop_: a copy queued is a copy the
// caller waits for.
void CopyLane::Run() {
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    work_cv_.wait(l, [&] { return stop_ || !q_.empty(); });
    if (q_.empty()) return;
    std::function<void()> copy = std::move(q_.front());
    q_.pop_front();
    l.unlock();
    copy();
    l.lock();
    ++done_;
    done_cv_.notify_all();
  }
}

}  // namespace zero

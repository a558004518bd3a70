#include "core/comm/comm_stream.h"

#include <pthread.h>

#include "core/comm/call_site.h"

namespace zero {

CommStream::CommStream(bool asynchronous) : asynchronous_(asynchronous) {
  if (asynchronous_) thread_ = std::thread([this] { Loop(); });
}

CommStream::~CommStream() {
  if (asynchronous_) {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
}

CommStream::Handle CommStream::Submit(std::function<absl::Status()> task) {
  auto h = std::make_shared<Work>();
  if (!asynchronous_) {
    h->status = task();
    h->done = true;
    std::lock_guard<std::mutex> l(mu_);
    pending_.push_back(h);
    return h;
  }
  // The task's collectives are filed under the call that submitted it
  // (core/comm/call_site.h), not what the caller does when it runs.
  auto filed = [site = CurrentCallSite(), inner = std::move(task)] {
    ScopedCallSiteRestore restore(site);
    return inner();
  };
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.emplace_back(h, std::move(filed));
    pending_.push_back(h);
  }
  cv_.notify_all();
  return h;
}

absl::Status CommStream::Wait(const Handle& h) {
  std::unique_lock<std::mutex> l(mu_);
  cv_.wait(l, [&] { return h->done; });
  return h->status;
}

absl::Status CommStream::Drain() {
  std::unique_lock<std::mutex> l(mu_);
  absl::Status first;
  while (!pending_.empty()) {
    Handle h = pending_.front();
    pending_.pop_front();
    cv_.wait(l, [&] { return h->done; });
    if (first.ok() && !h->status.ok()) first = h->status;
  }
  return first;
}

void CommStream::Loop() {
  // Named so per-thread CPU time (/proc/self/task/*/comm) can be told apart.
  pthread_setname_np(pthread_self(), "zero-stream");
  for (;;) {
    std::pair<Handle, std::function<absl::Status()>> item;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    absl::Status s = item.second();
    {
      std::lock_guard<std::mutex> l(mu_);
      item.first->status = std::move(s);
      item.first->done = true;
    }
    cv_.notify_all();
  }
}

}  // namespace zero

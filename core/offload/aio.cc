#include "core/offload/aio.h"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/common/errno_status.h"
#include "core/common/io_fault.h"

namespace zero {
namespace offload {

struct Aio::Ring {
  io_uring ring;
  ~Ring() { io_uring_queue_exit(&ring); }
};

std::unique_ptr<Aio> Aio::Create(const AioOptions& options, std::string* note) {
  std::unique_ptr<Aio> aio(new Aio(options));
  if (options.use_uring) {
    auto r = std::make_unique<Ring>();
    const int rc = io_uring_queue_init(static_cast<unsigned>(options.queue_depth), &r->ring, 0);
    if (rc == 0) {
      aio->ring_ = std::move(r);
    } else if (note) {
      *note = absl::StrCat("io_uring refused (", ErrnoText(-rc),
                           "): blocking pread/pwrite on an IO thread");
    }
  } else if (note) {
    *note = "io_uring off: blocking pread/pwrite on an IO thread";
  }
  aio->thread_ = std::thread([a = aio.get()] { a->Loop(); });
  return aio;
}

Aio::Aio(const AioOptions& options) : options_(options) {
  if (options_.queue_depth < 1) options_.queue_depth = 1;
  if (options_.block_size < 4096) options_.block_size = 4096;
  options_.block_size -= options_.block_size % 4096;  // keeps O_DIRECT pieces aligned
}

Aio::~Aio() {
  {
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return pending_.empty() && inflight_ == 0; });
    stop_ = true;
  }
  work_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Aio::Ticket Aio::Read(int fd, void* buf, size_t len, int64_t offset,
                      const std::string& what) {
  return Submit(fd, static_cast<char*>(buf), len, offset, false, what);
}

Aio::Ticket Aio::Write(int fd, const void* buf, size_t len, int64_t offset,
                       const std::string& what) {
  return Submit(fd, const_cast<char*>(static_cast<const char*>(buf)), len,
                offset, true, what);
}

Aio::Ticket Aio::Submit(int fd, char* buf, size_t len, int64_t offset,
                        bool write, const std::string& what) {
  std::lock_guard<std::mutex> l(mu_);
  const Ticket t = next_++;
  Op& op = ops_[t];
  op.what = what;
  op.write = write;
  const size_t bs = static_cast<size_t>(options_.block_size);
  for (size_t a = 0; a < len; a += bs) {
    pending_.push_back({t, fd, buf + a, std::min(bs, len - a),
                        offset + static_cast<int64_t>(a), write});
    ++op.pieces_left;
    Started(write);
  }
  work_cv_.notify_one();
  return t;
}

absl::Status Aio::Wait(Ticket t) {
  std::unique_lock<std::mutex> l(mu_);
  if (ops_.find(t) == ops_.end()) return absl::InternalError("aio: unknown ticket");
  // Looked up again after every wake-up: a Submit() on another thread may
  // rehash ops_ while this one sleeps, which invalidates iterators.
  auto left = [&] { return ops_.find(t)->second.pieces_left; };
  if (left() != 0) {
    const Recorder::Clock::time_point t0 = Recorder::Clock::now();
    done_cv_.wait(l, [&] { return left() == 0; });
    // Up to the completion, not this thread's wake-up (scheduling latency
    // is not IO time): the exposed span lies inside the busy ones.
    if (options_.recorder) {
      options_.recorder->Add(Phase::kNvmeExposed, t0,
                             std::max(t0, ops_.find(t)->second.done_at), "nvme wait");
    }
  }
  auto it = ops_.find(t);
  absl::Status s = std::move(it->second.status);
  ops_.erase(it);
  return s;
}

void Aio::Started(bool write) {
  if (options_.recorder == nullptr) return;
  const Recorder::Clock::time_point now = Recorder::Clock::now();
  if (inflight_dir_[0] + inflight_dir_[1] == 0) any_since_ = now;
  if (inflight_dir_[write]++ == 0) busy_since_[write] = now;
}

void Aio::Finished(bool write, Recorder::Clock::time_point now) {
  if (options_.recorder == nullptr) return;
  if (--inflight_dir_[write] == 0) {
    options_.recorder->Add(write ? Phase::kNvmeWrite : Phase::kNvmeRead, busy_since_[write], now,
                           write ? "nvme write" : "nvme read");
  }
  if (inflight_dir_[0] + inflight_dir_[1] == 0) {
    options_.recorder->Add(Phase::kNvmeBusy, any_since_, now);
  }
}

void Aio::Complete(const Piece& p, int64_t res) {
  Op& op = ops_[p.ticket];
  if (res < 0) {
    if (op.status.ok()) {
      const int err = static_cast<int>(-res);
      op.status = ErrnoToStatus(
          err, absl::StrCat(p.write ? "write to " : "read from ", op.what, " at offset ",
                            p.offset, " (", p.len, " bytes) failed"));
    }
  } else if (res == 0) {
    if (op.status.ok()) {
      op.status = p.write
          ? absl::ResourceExhaustedError(absl::StrCat(
                "write to ", op.what, " at offset ", p.offset, " made no progress (no space?)"))
          : absl::DataLossError(absl::StrCat(
                "read from ", op.what, " at offset ", p.offset, ": unexpected end of file ",
                "(the file was truncated or replaced outside the engine)"));
    }
  } else if (static_cast<size_t>(res) < p.len && op.status.ok()) {
    Piece rest = p;
    rest.buf += res;
    rest.len -= static_cast<size_t>(res);
    rest.offset += res;
    pending_.push_front(rest);
    return;  // the op keeps this piece
  }
  const Recorder::Clock::time_point now =
      options_.recorder ? Recorder::Clock::now() : Recorder::Clock::time_point();
  Finished(p.write, now);
  if (--op.pieces_left == 0) {
    op.done_at = now;
    done_cv_.notify_all();
  }
}

void Aio::Loop() {
  if (options_.recorder) options_.recorder->NameThisThread("nvme io");
  std::unique_lock<std::mutex> l(mu_);
  while (true) {
    work_cv_.wait(l, [&] { return stop_ || !pending_.empty() || inflight_ > 0; });
    if (stop_ && pending_.empty() && inflight_ == 0) return;
    if (!ring_) {
      // Blocking backend: one piece at a time, lock released meanwhile.
      if (pending_.empty()) continue;
      Piece p = pending_.front();
      pending_.pop_front();
      ++inflight_;
      const std::string what = ops_[p.ticket].what;
      l.unlock();
      ssize_t res;
      do {
        res = p.write ? io::Pwrite(p.fd, p.buf, p.len, p.offset, what)
                      : io::Pread(p.fd, p.buf, p.len, p.offset, what);
      } while (res < 0 && errno == EINTR);
      const int64_t r = res < 0 ? -static_cast<int64_t>(errno) : res;
      l.lock();
      --inflight_;
      Complete(p, r);
      if (pending_.empty() && inflight_ == 0) done_cv_.notify_all();
      continue;
    }
    // io_uring: top the queue up, then wait for at least one completion.
    io_uring* ring = &ring_->ring;
    while (inflight_ < options_.queue_depth && !pending_.empty()) {
      io_uring_sqe* sqe = io_uring_get_sqe(ring);
      if (sqe == nullptr) break;
      Piece* p = new Piece(pending_.front());
      pending_.pop_front();
      // Injected faults (core/common/io_fault.h): an error completes the
      // piece at once; a short transfer sends part and Complete() requeues
      // the rest.
      const io::Decision d = io::Decide(p->write, p->fd, p->len, ops_[p->ticket].what);
      if (d.err != 0) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data(sqe, nullptr);
        Complete(*p, -d.err);
        delete p;
        continue;
      }
      const unsigned n = static_cast<unsigned>(d.n_out);
      if (p->write) {
        io_uring_prep_write(sqe, p->fd, p->buf, n, p->offset);
      } else {
        io_uring_prep_read(sqe, p->fd, p->buf, n, p->offset);
      }
      io_uring_sqe_set_data(sqe, p);
      ++inflight_;
    }
    l.unlock();
    int rc;
    do {
      rc = io_uring_submit_and_wait(ring, 1);
    } while (rc == -EINTR);
    std::vector<std::pair<Piece*, int64_t>> done;
    io_uring_cqe* cqe;
    while (io_uring_peek_cqe(ring, &cqe) == 0) {
      Piece* p = static_cast<Piece*>(io_uring_cqe_get_data(cqe));
      if (p != nullptr) done.emplace_back(p, cqe->res);  // null: a faulted piece's nop
      io_uring_cqe_seen(ring, cqe);
    }
    l.lock();
    for (auto& [p, res] : done) {
      --inflight_;
      Complete(*p, res);
      delete p;
    }
    if (rc < 0 && done.empty()) {
      // The ring itself failed: fail everything queued, stop using it.
      for (const Piece& p : pending_) Complete(p, rc);
      pending_.clear();
    }
    if (pending_.empty() && inflight_ == 0) done_cv_.notify_all();
  }
}

}  // namespace offload
}  // namespace zero

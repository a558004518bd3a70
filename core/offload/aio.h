// Asynchronous file reads and writes for the NVMe tier (docs/ARCHITECTURE.md, "Offload").
// One IO thread per Aio keeps up to `queue_depth` pieces of `block_size`
// bytes in flight through io_uring; where io_uring is refused (seccomp, old
// kernel) the same thread runs blocking pread/pwrite instead. Callers submit,
// go on computing, and Wait() for a ticket; buffers must stay alive until
// their ticket is waited for.
#ifndef ZERO_CORE_OFFLOAD_AIO_H_
#define ZERO_CORE_OFFLOAD_AIO_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "absl/status/status.h"
#include "core/profile/recorder.h"

namespace zero {
namespace offload {

struct AioOptions {
  int queue_depth = 8;
  int64_t block_size = 1 << 20;
  bool use_uring = true;  // false: blocking pread/pwrite on the IO thread
  // Where NVMe time goes (wall_clock_breakdown, zero_trace): the spans in
  // which reads, writes, either are outstanding (submitted, not complete),
  // and Wait()s that blocked.
  Recorder* recorder = nullptr;
};

class Aio {
 public:
  using Ticket = int64_t;

  // Never fails: io_uring refused means the blocking backend, and `note`
  // (if not null) says why.
  static std::unique_ptr<Aio> Create(const AioOptions& options,
                                     std::string* note = nullptr);
  ~Aio();  // waits for everything in flight
  Aio(const Aio&) = delete;
  Aio& operator=(const Aio&) = delete;

  // `what` names the file in error messages.
  Ticket Read(int fd, void* buf, size_t len, int64_t offset, const std::string& what);
  Ticket Write(int fd, const void* buf, size_t len, int64_t offset,
               const std::string& what);
  // The first error of the ticket's pieces; a read past the end of the file
  // is DataLoss (truncated), a write that makes no progress ResourceExhausted.
  absl::Status Wait(Ticket t);

  bool uring() const { return ring_ != nullptr; }

 private:
  struct Piece {
    Ticket ticket;
    int fd;
    char* buf;
    size_t len;
    int64_t offset;
    bool write;
  };
  struct Op {
    int64_t pieces_left = 0;
    absl::Status status;
    std::string what;
    bool write = false;
    Recorder::Clock::time_point done_at;  // when the last piece completed (recorder only)
  };
  struct Ring;

  explicit Aio(const AioOptions& options);
  Ticket Submit(int fd, char* buf, size_t len, int64_t offset, bool write,
                const std::string& what);
  void Loop();
  // Records the result (bytes or -errno) of one piece; requeues the rest of a
  // short transfer. Called with mu_ held.
  void Complete(const Piece& p, int64_t res);
  // A piece was submitted (completed): the spans with IO outstanding, per
  // direction and either, reported to the recorder when they close (a
  // caller's Wait lies inside them). Under mu_.
  void Started(bool write);
  void Finished(bool write, Recorder::Clock::time_point now);

  AioOptions options_;
  std::unique_ptr<Ring> ring_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Piece> pending_;
  std::unordered_map<Ticket, Op> ops_;
  int inflight_ = 0;
  int inflight_dir_[2] = {0, 0};  // [write]
  Recorder::Clock::time_point busy_since_[2], any_since_;
  Ticket next_ = 1;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace offload
}  // namespace zero

#endif  // ZERO_CORE_OFFLOAD_AIO_H_

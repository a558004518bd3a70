// Asynchronous checkpoints (docs/ARCHITECTURE.md, "Asynchronous
// checkpoints"): the training thread takes a snapshot (core/ckpt/snapshot.h)
// and hands it here; a background thread writes the rank files, fsyncs and
// publishes `latest` exactly as a synchronous save does (SaveCheckpoint),
// over a communicator of its own so its collectives never mix with
// training's. One save at a time: the next save, load or destroy waits for
// the previous one, and its failure (the same on every rank, SaveCheckpoint
// agrees) is returned by that next call.
#ifndef ZERO_CORE_CKPT_ASYNC_SAVER_H_
#define ZERO_CORE_CKPT_ASYNC_SAVER_H_

#include <atomic>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "core/ckpt/shard_view.h"
#include "core/ckpt/snapshot.h"
#include "core/comm/communicator.h"

namespace zero {
namespace ckpt {

// How a save went, for benchmarks: seconds the caller was held (snapshot
// included), seconds the snapshot copy took (async only), and seconds the
// background write took (known once waited for).
struct SaveTiming {
  double blocking_seconds = 0, snapshot_seconds = 0, write_seconds = 0;
};

class AsyncSaver {
 public:
  AsyncSaver() = default;
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;
  // Waits for a save in flight; a failure is written to stderr (nobody is
  // left to return it to).
  ~AsyncSaver();

  // Where the next snapshot goes (reused from save to save); not to be
  // touched while pending().
  SnapshotBuffer* buffer() { return &buffer_; }
  bool pending() const { return thread_.joinable(); }
  // Whether the save in flight has finished (publish included); a poll.
  bool finished() const { return finished_.load(); }

  // Writes `snapshot` (a view into buffer()) as DIR/TAG in the background
  // over `comm` (collective on it: every rank starts the same saves in the
  // same order). `what` names the save in a later failure. Requires
  // !pending().
  void Start(ShardView snapshot, Communicator* comm, std::string dir, std::string tag,
             SaveOptions options, std::string what);
  // Waits for the save in flight, if any; returns its status once, with the
  // save named ("background save of 'dir/tag' (global step N): ..."); OK
  // when none is pending or it is already reported.
  absl::Status Wait();
  // Seconds the last background save took (write, fsync, publish).
  double last_write_seconds() const { return write_seconds_; }

 private:
  std::thread thread_;
  std::atomic<bool> finished_{false};
  absl::Status result_;
  std::string what_;
  double write_seconds_ = 0.0;
  SnapshotBuffer buffer_;
};

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_ASYNC_SAVER_H_

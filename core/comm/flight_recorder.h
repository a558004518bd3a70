// The last N collectives of an engine's communicators, each with its
// signature (kind, size, params or bucket, engine call, step, micro-step)
// and how it ended (docs/ARCHITECTURE.md, "Flight recorder"). Printed on
// every rank when a collective times out or the ranks diverge; readable
// afterwards as JSON lines (zero_engine_flight_record).
#ifndef ZERO_CORE_COMM_FLIGHT_RECORDER_H_
#define ZERO_CORE_COMM_FLIGHT_RECORDER_H_

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>

#include "core/comm/collective_signature.h"

namespace zero {

// kDeferred: a gradient reduction the ranks differed on and put off to the
// end of the micro-step (BucketDivergence).
enum class CollectiveOutcome { kPending, kDone, kFailed, kDiverged, kTimedOut, kDeferred };

class FlightRecorder {
 public:
  // Keeps the last `capacity` collectives (0: none).
  FlightRecorder(int rank, int capacity) : rank_(rank), capacity_(capacity) {}

  // Files `s` (pending); returns its index for Finish.
  int64_t Start(const CollectiveSignature& s);
  void Finish(int64_t index, CollectiveOutcome outcome);

  // One JSON object per line, oldest first.
  std::string JsonLines(const ParamNamer& name) const;
  // The last `max_lines` as text lines for a log, with a header.
  std::string Text(const ParamNamer& name, int max_lines) const;
  int capacity() const { return capacity_; }

 private:
  struct Entry {
    CollectiveSignature sig;
    CollectiveOutcome outcome = CollectiveOutcome::kPending;
  };
  const int rank_;
  const int capacity_;
  mutable std::mutex mu_;
  std::deque<Entry> entries_;
  int64_t first_index_ = 0;  // index of entries_.front()
};

const char* CollectiveOutcomeName(CollectiveOutcome o);

}  // namespace zero

#endif  // ZERO_CORE_COMM_FLIGHT_RECORDER_H_

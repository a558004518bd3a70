// The collective log (comms_logger): per collective and message-size bucket
// (powers of two), the count, the bytes, the total and mean time, and the
// algorithmic and bus bandwidth as nccl-tests defines them: algbw = S / t
// with S the collective's size (all-gather: the gathered bytes;
// reduce-scatter: the bytes reduced; all-reduce: the buffer; broadcast: the
// bytes), busbw = algbw x (W-1)/W for all-gather and reduce-scatter,
// 2(W-1)/W for all-reduce, 1 for broadcast. `sent_bytes` is the same
// traffic the counters of zero_stats count, so the log's totals equal them.
#ifndef ZERO_CORE_PROFILE_COMM_LOG_H_
#define ZERO_CORE_PROFILE_COMM_LOG_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/comm/communicator.h"

namespace zero {

enum class CollectiveOp { kAllGather = 0, kReduceScatter, kAllReduce, kBroadcast, kCount };

const char* CollectiveOpName(CollectiveOp op);  // DeepSpeed's: all_gather, ...

struct CommLogEntry {
  CollectiveOp op = CollectiveOp::kAllReduce;
  CollectiveKind kind = CollectiveKind::kAllReduce;  // as counted (kControl: bookkeeping)
  int64_t bucket_bytes = 0;  // message sizes in (bucket/2, bucket]
  int64_t count = 0;
  int64_t bytes = 0;         // sum of message sizes S
  int64_t sent_bytes = 0;    // as zero_stats counts them
  double total_ms = 0;
  double mean_ms() const { return count ? total_ms / count : 0; }
  double algbw_gbs() const;                 // GB/s (1e9 bytes), over total_ms
  double busbw_gbs(int world) const;
};

struct CommLogOptions {
  bool verbose = false;             // print each collective on rank 0
  bool prof_all = true;             // false: only the ops in prof_ops
  std::vector<std::string> prof_ops;  // DeepSpeed's names: "all_reduce", ...
};

class CommLog {
 public:
  CommLog(int rank, int world, CommLogOptions options);
  bool Wanted(CollectiveOp op) const;
  void Record(CollectiveOp op, CollectiveKind kind, int64_t msg_bytes, int64_t sent_bytes,
              double seconds);
  std::vector<CommLogEntry> Entries() const;
  // DeepSpeed's log_summary table (sizes, counts, latencies) with nccl-tests'
  // bandwidths in GB/s, one block per collective.
  std::string Summary() const;
  int world() const { return world_; }

 private:
  const int rank_, world_;
  const CommLogOptions options_;
  mutable std::mutex mu_;
  std::map<std::tuple<int, int, int64_t>, CommLogEntry> entries_;
};

}  // namespace zero

#endif  // ZERO_CORE_PROFILE_COMM_LOG_H_

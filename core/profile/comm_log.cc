#include "core/profile/comm_log.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace zero {
namespace {

constexpr const char* kOpNames[] = {"all_gather", "reduce_scatter", "all_reduce", "broadcast"};

int64_t Bucket(int64_t bytes) {
  int64_t b = 1;
  while (b < bytes) b <<= 1;
  return b;
}

std::string Size(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.1f GiB", b / double(1 << 30));
  if (b >= (1 << 20)) return absl::StrFormat("%.1f MiB", b / double(1 << 20));
  if (b >= (1 << 10)) return absl::StrFormat("%.1f KiB", b / 1024.0);
  return absl::StrFormat("%d B", b);
}

}  // namespace

const char* CollectiveOpName(CollectiveOp op) { return kOpNames[static_cast<int>(op)]; }

double CommLogEntry::algbw_gbs() const {
  return total_ms > 0 ? static_cast<double>(bytes) / (total_ms * 1e-3) / 1e9 : 0;
}

double CommLogEntry::busbw_gbs(int world) const {
  const double w = world;
  double f = 1.0;
  if (op == CollectiveOp::kAllGather || op == CollectiveOp::kReduceScatter) f = (w - 1) / w;
  if (op == CollectiveOp::kAllReduce) f = 2 * (w - 1) / w;
  return algbw_gbs() * f;
}

CommLog::CommLog(int rank, int world, CommLogOptions options)
    : rank_(rank), world_(world), options_(std::move(options)) {}

bool CommLog::Wanted(CollectiveOp op) const {
  if (options_.prof_all) return true;
  return std::find(options_.prof_ops.begin(), options_.prof_ops.end(), CollectiveOpName(op)) !=
         options_.prof_ops.end();
}

void CommLog::Record(CollectiveOp op, CollectiveKind kind, int64_t msg_bytes, int64_t sent_bytes,
                     double seconds) {
  const int64_t bucket = Bucket(msg_bytes);
  {
    std::lock_guard<std::mutex> l(mu_);
    CommLogEntry& e =
        entries_[std::make_tuple(static_cast<int>(op), static_cast<int>(kind), bucket)];
    e.op = op;
    e.kind = kind;
    e.bucket_bytes = bucket;
    e.count += 1;
    e.bytes += msg_bytes;
    e.sent_bytes += sent_bytes;
    e.total_ms += seconds * 1e3;
  }
  if (options_.verbose && rank_ == 0) {
    const double gbs = seconds > 0 ? msg_bytes / seconds / 1e9 : 0;
    std::fprintf(stderr,
                 "[zero] comm op: %s%s | time (ms): %.3f | msg size: %s | algbw (GB/s): %.3f\n",
                 CollectiveOpName(op), kind == CollectiveKind::kControl ? " (control)" : "",
                 seconds * 1e3, Size(msg_bytes).c_str(), gbs);
  }
}

std::vector<CommLogEntry> CommLog::Entries() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<CommLogEntry> out;
  for (const auto& [k, e] : entries_) out.push_back(e);
  return out;
}

std::string CommLog::Summary() const {
  std::string s = absl::StrFormat(
      "[zero] rank %d comms log (%d ranks; bandwidths as nccl-tests: algbw = size/time, "
      "busbw = algbw x (W-1)/W, 2(W-1)/W for all_reduce)\n"
      "%-26s%-14s%-10s%-20s%-18s%-16s%-16s\n",
      rank_, world_, "Comm. Op", "Message Size", "Count", "Total Latency(ms)",
      "Avg Latency(ms)", "algbw (GB/s)", "busbw (GB/s)");
  int last_op = -1, last_kind = -1;
  for (const CommLogEntry& e : Entries()) {
    if (static_cast<int>(e.op) != last_op || static_cast<int>(e.kind) != last_kind) {
      absl::StrAppend(&s, CollectiveOpName(e.op),
                      e.kind == CollectiveKind::kControl ? " (control)" : "", "\n");
      last_op = static_cast<int>(e.op);
      last_kind = static_cast<int>(e.kind);
    }
    absl::StrAppendFormat(&s, "%-26s%-14s%-10d%-20.3f%-18.4f%-16.3f%-16.3f\n", "",
                          absl::StrCat("<= ", Size(e.bucket_bytes)), e.count, e.total_ms,
                          e.mean_ms(), e.algbw_gbs(), e.busbw_gbs(world_));
  }
  return s;
}

}  // namespace zero

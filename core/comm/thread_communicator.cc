#include "core/comm/thread_communicator.h"

#include <chrono>
#include <condition_variable>
#include <algorithm>
#include <cstring>
#include <string>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cast_math.h"

namespace zero {
namespace {

using Clock = std::chrono::steady_clock;

// A rank's abort, seen by its group and every duplicate of it.
struct AbortNotice {
  std::mutex mu;
  bool set = false;
  std::string message;
};

// State shared by the ranks of one group.
struct Group {
  Group(int w, std::shared_ptr<AbortNotice> a)
      : world(w), abort(std::move(a)), send(w), recv(w), extra(w) {}
  const int world;
  std::shared_ptr<AbortNotice> abort;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  int64_t generation = 0;
  bool broken = false;
  std::vector<const void*> send;
  std::vector<void*> recv;
  std::vector<std::shared_ptr<Group>> extra;  // for Duplicate
};

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(std::shared_ptr<Group> g, int rank)
      : g_(std::move(g)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return g_->world; }
  std::string backend_name() const override { return "thread"; }

  absl::Status AllGatherV(const void* send, void* recv,
                          const std::vector<int64_t>& counts,
                          DType dtype) override {
    if (static_cast<int>(counts.size()) != g_->world) {
      return absl::InvalidArgumentError("AllGatherV: counts size != world");
    }
    const size_t es = DTypeSize(dtype);
    std::vector<int64_t> offsets(g_->world + 1, 0);
    for (int r = 0; r < g_->world; ++r) offsets[r + 1] = offsets[r] + counts[r];
    g_->send[rank_] = send;
    if (auto s = Meet("all-gather"); !s.ok()) return s;
    char* out = static_cast<char*>(recv);
    for (int r = 0; r < g_->world; ++r) {
      char* dst = out + offsets[r] * es;
      const void* src = g_->send[r];
      if (counts[r] > 0 && dst != src) std::memcpy(dst, src, counts[r] * es);
    }
    if (auto s = Meet("all-gather"); !s.ok()) return s;
    Count(CollectiveKind::kAllGather, AllGatherSent(counts, rank_), DTypeSize(dtype));
    return absl::OkStatus();
  }

  absl::Status ReduceScatterV(const float* send, float* recv,
                              const std::vector<int64_t>& counts) override {
    if (static_cast<int>(counts.size()) != g_->world) {
      return absl::InvalidArgumentError("ReduceScatterV: counts size != world");
    }
    int64_t offset = 0;
    for (int r = 0; r < rank_; ++r) offset += counts[r];
    g_->send[rank_] = send;
    if (auto s = Meet("reduce-scatter"); !s.ok()) return s;
    const int64_t n = counts[rank_];
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    // Sum in rank order so every run gives the same bits (0 + x first, as
    // into a zeroed accumulator: -0 becomes +0 alike). Straight into recv
    // unless recv lies in some rank's send buffer, which a peer may still
    // be reading: then through a scratch copy, written after the second
    // meeting.
    bool overlaps = false;
    for (int r = 0; r < g_->world; ++r) {
      const float* b = static_cast<const float*>(g_->send[r]);
      overlaps |= n > 0 && recv < b + total && b < recv + n;
    }
    std::vector<float> scratch(overlaps ? n : 0);
    float* acc = overlaps ? scratch.data() : recv;
    for (int r = 0; r < g_->world; ++r) {
      const float* src = static_cast<const float*>(g_->send[r]) + offset;
      if (r == 0) {
        for (int64_t i = 0; i < n; ++i) acc[i] = 0.0f + src[i];
      } else {
        for (int64_t i = 0; i < n; ++i) acc[i] += src[i];
      }
    }
    if (auto s = Meet("reduce-scatter"); !s.ok()) return s;
    if (overlaps && n > 0) std::memcpy(recv, acc, n * sizeof(float));
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank_), sizeof(float));
    return absl::OkStatus();
  }

  absl::Status ReduceScatterVHalf(const void* send, void* recv,
                                  const std::vector<int64_t>& counts, DType dtype) override {
    if (static_cast<int>(counts.size()) != g_->world) {
      return absl::InvalidArgumentError("ReduceScatterV: counts size != world");
    }
    int64_t offset = 0;
    for (int r = 0; r < rank_; ++r) offset += counts[r];
    g_->send[rank_] = send;
    if (auto s = Meet("reduce-scatter"); !s.ok()) return s;
    const int64_t n = counts[rank_];
    std::vector<uint16_t> out(n);
    SumHalf(offset, n, dtype, out.data());
    if (auto s = Meet("reduce-scatter"); !s.ok()) return s;
    if (n > 0) std::memcpy(recv, out.data(), n * 2);
    Count(CollectiveKind::kReduceScatter, AllGatherSent(counts, rank_), 2);
    return absl::OkStatus();
  }

  absl::Status AllReduceHalf(void* data, int64_t count, DType dtype) override {
    g_->send[rank_] = data;
    if (auto s = Meet("all-reduce"); !s.ok()) return s;
    std::vector<uint16_t> out(count);
    SumHalf(0, count, dtype, out.data());
    if (auto s = Meet("all-reduce"); !s.ok()) return s;
    if (count > 0) std::memcpy(data, out.data(), count * 2);
    Count(CollectiveKind::kAllReduce, AllReduceSent(count, g_->world), 2);
    return absl::OkStatus();
  }

  // out[i] = round(sum over ranks, in rank order, in fp32, of send[r][offset + i]).
  void SumHalf(int64_t offset, int64_t n, DType dtype, uint16_t* out) {
    const bool f16 = dtype == DType::kF16;
    for (int64_t i = 0; i < n; ++i) {
      float acc = 0.0f;
      for (int r = 0; r < g_->world; ++r) {
        const uint16_t x = static_cast<const uint16_t*>(g_->send[r])[offset + i];
        acc += f16 ? math::HalfToFloat(x) : math::Bf16ToFloat(x);
      }
      out[i] = f16 ? math::FloatToHalf(acc) : math::FloatToBf16(acc);
    }
  }

  template <typename T>
  absl::Status AllReduceT(T* data, int64_t count, ReduceOp op) {
    g_->send[rank_] = data;
    if (auto s = Meet("all-reduce"); !s.ok()) return s;
    std::vector<T> acc(static_cast<const T*>(g_->send[0]),
                       static_cast<const T*>(g_->send[0]) + count);
    for (int r = 1; r < g_->world; ++r) {
      const T* src = static_cast<const T*>(g_->send[r]);
      for (int64_t i = 0; i < count; ++i) {
        acc[i] = op == ReduceOp::kSum ? acc[i] + src[i]
                                      : (src[i] > acc[i] || src[i] != src[i] ? src[i] : acc[i]);
      }
    }
    if (auto s = Meet("all-reduce"); !s.ok()) return s;
    if (count > 0) std::memcpy(data, acc.data(), count * sizeof(T));
    Count(CollectiveKind::kAllReduce, AllReduceSent(count, g_->world), sizeof(T));
    return absl::OkStatus();
  }

  absl::Status AllReduce(float* data, int64_t count, ReduceOp op) override {
    return AllReduceT(data, count, op);
  }
  absl::Status AllReduce(double* data, int64_t count, ReduceOp op) override {
    return AllReduceT(data, count, op);
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    g_->send[rank_] = data;
    if (auto s = Meet("broadcast"); !s.ok()) return s;
    if (rank_ != root && bytes > 0) std::memcpy(data, g_->send[root], bytes);
    if (auto s = Meet("broadcast"); !s.ok()) return s;
    Count(CollectiveKind::kBroadcast, rank_ == root ? bytes : 0, 1);
    return absl::OkStatus();
  }

  absl::Status Barrier() override { return Meet("barrier"); }

  void Abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> l(g_->abort->mu);
      if (!g_->abort->set) {
        g_->abort->set = true;
        g_->abort->message = absl::StrCat("rank ", rank_, " failed: ", reason);
      }
    }
    std::lock_guard<std::mutex> l(g_->mu);
    g_->cv.notify_all();
  }

  // Every rank posts (color, key); the lowest rank of each color makes the
  // new group, the others pick it up; ranks ordered by (key, rank).
  absl::StatusOr<std::unique_ptr<Communicator>> Split(int color, int key) override {
    const int mine[2] = {color, key};
    g_->send[rank_] = mine;
    if (auto s = Meet("split"); !s.ok()) return s;
    std::vector<std::pair<int, int>> members;  // (key, rank) of my color
    for (int r = 0; r < g_->world; ++r) {
      const int* p = static_cast<const int*>(g_->send[r]);
      if (p[0] == color) members.emplace_back(p[1], r);
    }
    std::sort(members.begin(), members.end());
    int leader = g_->world, new_rank = 0;
    for (size_t i = 0; i < members.size(); ++i) {
      leader = std::min(leader, members[i].second);
      if (members[i].second == rank_) new_rank = static_cast<int>(i);
    }
    if (leader == rank_) {
      g_->extra[rank_] = std::make_shared<Group>(static_cast<int>(members.size()), g_->abort);
    }
    if (auto s = Meet("split"); !s.ok()) return s;
    std::shared_ptr<Group> ng = g_->extra[leader];
    if (auto s = Meet("split"); !s.ok()) return s;
    auto c = std::make_unique<ThreadCommunicator>(std::move(ng), new_rank);
    c->set_timeout_seconds(timeout_seconds_);
    return std::unique_ptr<Communicator>(std::move(c));
  }

  absl::Status AllToAllV(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                         const std::vector<int64_t>& recv_counts, DType dtype) override {
    if (static_cast<int>(send_counts.size()) != g_->world ||
        static_cast<int>(recv_counts.size()) != g_->world) {
      return absl::InvalidArgumentError("AllToAllV: counts size != world");
    }
    const size_t es = DTypeSize(dtype);
    const std::pair<const void*, const std::vector<int64_t>*> mine{send, &send_counts};
    g_->send[rank_] = &mine;
    if (auto s = Meet("all-to-all"); !s.ok()) return s;
    char* out = static_cast<char*>(recv);
    for (int r = 0; r < g_->world; ++r) {
      const auto* peer =
          static_cast<const std::pair<const void*, const std::vector<int64_t>*>*>(g_->send[r]);
      const std::vector<int64_t>& pc = *peer->second;
      int64_t off = 0;
      for (int q = 0; q < rank_; ++q) off += pc[q];
      if (pc[rank_] != recv_counts[r]) {
        g_->broken = true;
        return absl::InvalidArgumentError(absl::StrCat(
            "AllToAllV: rank ", r, " sends ", pc[rank_], " elements to rank ", rank_,
            ", which expects ", recv_counts[r]));
      }
      if (pc[rank_] > 0) {
        std::memcpy(out, static_cast<const char*>(peer->first) + off * es, pc[rank_] * es);
      }
      out += pc[rank_] * es;
    }
    if (auto s = Meet("all-to-all"); !s.ok()) return s;
    int64_t sent = 0;
    for (int r = 0; r < g_->world; ++r) sent += r == rank_ ? 0 : send_counts[r];
    Count(CollectiveKind::kReduceScatter, sent, es);
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override {
    if (rank_ == 0) g_->extra[0] = std::make_shared<Group>(g_->world, g_->abort);
    if (auto s = Meet("duplicate"); !s.ok()) return s;
    std::shared_ptr<Group> ng = g_->extra[0];
    if (auto s = Meet("duplicate"); !s.ok()) return s;
    auto c = std::make_unique<ThreadCommunicator>(std::move(ng), rank_);
    c->set_timeout_seconds(timeout_seconds_);
    return std::unique_ptr<Communicator>(std::move(c));
  }

 private:
  // The group barrier, bounded by the timeout. A rank that times out breaks
  // the group so that every other rank fails too instead of waiting.
  // A peer's abort, if any.
  absl::Status Aborted(const char* what) const {
    std::lock_guard<std::mutex> l(g_->abort->mu);
    if (!g_->abort->set) return absl::OkStatus();
    return absl::AbortedError(absl::StrCat("thread communicator: ", what, " on rank ",
                                           rank_, ": ", g_->abort->message));
  }

  absl::Status Meet(const char* what) {
    if (auto s = Aborted(what); !s.ok()) return s;
    std::unique_lock<std::mutex> l(g_->mu);
    if (g_->broken) {
      return absl::AbortedError(absl::StrCat(
          "thread communicator: ", what, " on rank ", rank_,
          ": the group broke earlier (a peer timed out)"));
    }
    const int64_t gen = g_->generation;
    if (++g_->arrived == g_->world) {
      g_->arrived = 0;
      ++g_->generation;
      g_->cv.notify_all();
      return absl::OkStatus();
    }
    auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(timeout_seconds_));
    while (g_->generation == gen) {
      if (g_->broken) {
        return absl::AbortedError(absl::StrCat(
            "thread communicator: ", what, " on rank ", rank_,
            ": a peer timed out and broke the group"));
      }
      // Wake now and then to see an abort posted through a duplicate.
      const auto wake = std::min(deadline, Clock::now() + std::chrono::milliseconds(20));
      g_->cv.wait_until(l, wake);
      if (g_->generation != gen) break;
      if (auto s = Aborted(what); !s.ok()) {
        g_->broken = true;
        g_->cv.notify_all();
        return s;
      }
      if (Clock::now() >= deadline) {
        g_->broken = true;
        g_->cv.notify_all();
        return absl::DeadlineExceededError(absl::StrCat(
            "thread communicator: ", what, " timed out after ",
            timeout_seconds_, " s on rank ", rank_, ": ",
            g_->world - g_->arrived, " of ", g_->world,
            " ranks never arrived (dead or stuck peer)"));
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<Group> g_;
  const int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Communicator>> MakeThreadCommunicators(
    int world_size) {
  auto g = std::make_shared<Group>(world_size, std::make_shared<AbortNotice>());
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < world_size; ++r) {
    out.push_back(std::make_unique<ThreadCommunicator>(g, r));
  }
  return out;
}

}  // namespace zero

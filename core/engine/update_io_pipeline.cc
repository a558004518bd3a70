#include "core/engine/update_io_pipeline.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"

namespace zero {

namespace {
// The status of `h` (none: OK), which is then cleared.
absl::Status WaitFor(CommStream& lane, CommStream::Handle& h) {
  if (h == nullptr) return absl::OkStatus();
  absl::Status s = lane.Wait(h);
  h.reset();
  return s;
}
}  // namespace

UpdateIoPipeline::UpdateIoPipeline(ShardedState* sharded, Device* device, size_t es, int depth,
                                   int64_t piece)
    : sharded_(sharded),
      device_(device),
      es_(es),
      depth_(std::max(2, depth)),
      piece_(std::max<int64_t>(1, piece)),
      read_ticket_(depth_),
      write_ticket_(depth_) {}

absl::Status UpdateIoPipeline::Begin(std::vector<UpdatePiece> order, bool write_params) {
  RETURN_IF_ERROR(Finish());  // nothing of a previous step in flight
  const size_t bytes = static_cast<size_t>(piece_) * es_;
  while (static_cast<int>(grad_bufs_.size()) < depth_) {
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Make(device_, bytes));
    grad_bufs_.push_back(std::move(b));
  }
  while (write_params && static_cast<int>(work_bufs_.size()) < depth_) {
    ASSIGN_OR_RETURN(DeviceBuffer b, DeviceBuffer::Make(device_, bytes));
    work_bufs_.push_back(std::move(b));
  }
  for (const UpdatePiece& p : order) {
    if (p.len > piece_) {
      return absl::InternalError(absl::StrCat("update pipeline: a piece of ", p.len,
                                              " elements over its buffers' ", piece_));
    }
  }
  order_ = std::move(order);
  next_ = issued_ = 0;
  writes_ = 0;
  in_order_ = true;
  first_ = absl::OkStatus();
  // Read ahead D-1 pieces; Grads(k) tops it up to k+D-1, whose buffer
  // held piece k-1 (updated by then).
  for (; issued_ < order_.size() && issued_ + 1 < static_cast<size_t>(depth_); ++issued_) {
    const UpdatePiece p = order_[issued_];
    char* buf = grad_bufs_[issued_ % depth_].data<char>();
    read_ticket_[issued_ % depth_] = reader_.Submit(
        [this, p, buf] { return sharded_->ReadGradsRaw(p.group, p.begin, p.len, buf); });
  }
  return absl::OkStatus();
}

absl::StatusOr<char*> UpdateIoPipeline::Grads(int g, int64_t begin, int64_t len) {
  if (len > piece_) {
    return absl::InternalError(absl::StrCat("update pipeline: a piece of ", len,
                                            " elements over its buffers' ", piece_));
  }
  const bool expected = in_order_ && next_ < order_.size() && order_[next_].group == g &&
                        order_[next_].begin == begin && order_[next_].len == len;
  if (!expected) {
    // Not the order announced: no more reading ahead this step (correct,
    // only slower); the reads in flight are of pieces not asked for yet.
    in_order_ = false;
    for (CommStream::Handle& t : read_ticket_) (void)WaitFor(reader_, t);
    char* buf = grad_bufs_[0].data<char>();
    absl::Status s = sharded_->ReadGradsRaw(g, begin, len, buf);
    first_.Update(s);
    if (!s.ok()) return s;
    return buf;
  }
  const size_t k = next_++;
  for (; issued_ < order_.size() && issued_ < k + depth_; ++issued_) {
    const UpdatePiece p = order_[issued_];
    char* buf = grad_bufs_[issued_ % depth_].data<char>();
    read_ticket_[issued_ % depth_] = reader_.Submit(
        [this, p, buf] { return sharded_->ReadGradsRaw(p.group, p.begin, p.len, buf); });
  }
  const size_t b = k % depth_;
  absl::Status s = WaitFor(reader_, read_ticket_[b]);
  first_.Update(s);
  if (!s.ok()) return s;
  return grad_bufs_[b].data<char>();
}

absl::StatusOr<char*> UpdateIoPipeline::WorkBuffer() {
  if (work_bufs_.empty()) return absl::InternalError("update pipeline: no working-copy buffers");
  const size_t b = writes_ % depth_;
  absl::Status s = WaitFor(writer_, write_ticket_[b]);  // the write of piece writes_-D
  first_.Update(s);
  if (!s.ok()) return s;
  return work_bufs_[b].data<char>();
}

void UpdateIoPipeline::Land(int g, int64_t begin, int64_t len) {
  const size_t b = writes_++ % depth_;
  const char* buf = work_bufs_[b].data<char>();
  offload::ParamFile* f = sharded_->param_file(g);
  const int64_t es = static_cast<int64_t>(es_);
  write_ticket_[b] = writer_.Submit([f, buf, begin, len, es] {
    return f->Write(begin * es, len * es, buf);
  });
}

absl::Status UpdateIoPipeline::Finish() {
  for (CommStream::Handle& t : read_ticket_) first_.Update(WaitFor(reader_, t));
  for (CommStream::Handle& t : write_ticket_) first_.Update(WaitFor(writer_, t));
  // Every job has run; Drain forgets them. Its status is not the step's:
  // a read ahead of a piece never asked for (out of order) does not count.
  (void)reader_.Drain();
  (void)writer_.Drain();
  return first_;
}

int64_t UpdateIoPipeline::buffer_bytes() const {
  int64_t n = 0;
  for (const DeviceBuffer& b : grad_bufs_) n += b.bytes();
  for (const DeviceBuffer& b : work_bufs_) n += b.bytes();
  return n;
}

}  // namespace zero

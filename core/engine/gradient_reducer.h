// The gradient path (docs/ARCHITECTURE.md, "One training step"): grad
// buffers handed out from two buckets (grad_bucket.h); a full bucket is
// reduced on the comm stream while the caller fills the other. Per stage:
//   0: buckets add into the full local gradient; the boundary micro-step
//      all-reduces what it touches, the boundary the rest (leftovers);
//   1: buckets add into the full local gradient; the boundary
//      reduce-scatters it once (ReduceScatterFlat);
//   2-3: each bucket is reduce-scattered, each rank keeping its shard.
// With reduce_scatter false, stages 1-3 all-reduce instead and each rank
// keeps its shard of the result. Every reduction is in the communication
// dtype, scaled before and after as DeepSpeed averages (prescale_gradients,
// gradient_predivide_factor); gradients that reduce as stored (pre-scale 1,
// communication dtype = working dtype) go to the collective without the fp32
// pack (docs/ARCHITECTURE.md, "Reduced as stored").
#ifndef ZERO_CORE_ENGINE_GRADIENT_REDUCER_H_
#define ZERO_CORE_ENGINE_GRADIENT_REDUCER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/device/device.h"
#include "core/engine/deferred_gradients.h"
#include "core/engine/engine_context.h"
#include "core/engine/grad_bucket.h"
#include "core/engine/param_registry.h"
#include "core/engine/quantized_reduce.h"
#include "core/engine/sharded_state.h"

namespace zero {

// DeepSpeed's averaging over `dp_world` ranks (Config::prescale_gradients,
// gradient_predivide_factor): gradients times `pre` before the sum, the sum
// times `post`.
struct AveragingScales {
  float pre = 1.0f, post = 1.0f;
};
AveragingScales AveragingScalesFor(const Config& c, int dp_world);

// Whether stage 1's flat reduce-scatter leaves every element as it is: one
// data-parallel rank, both averaging scales 1, a communication dtype that
// holds the working dtype's values exactly. The boundary then reads the
// gradients in place, as at stages 2-3, and skips it (no fp32 scratch).
bool Stage1ReduceIsIdentity(const Config& c, int dp_world);

// Elements of the reducer's fp32 pack: a bucket (reduce_bucket_size, never
// more than the model's `total_padded` elements), at least one per rank.
int64_t ReducerPackCap(const Config& c, int64_t total_padded, int world);

// Stage 1: whether the flat reduce-scatter of a group whose shard is `shard`
// elements reads the local gradient itself instead of an fp32 pack (fp32
// gradients, pre-scale 1, an fp32 reduce-scatter, the shard within one
// chunk of the `pack_cap`-element pack). Its fp32 target must then lie
// apart from the gradient (the boundary's scratch); otherwise an fp32
// model's target is the group's own owned range of the gradient, which
// holds nothing still needed once that range is packed (no owned-size
// scratch; docs/ARCHITECTURE.md, "One training step").
bool Stage1ScatterReadsGrads(const Config& c, int dp_world, int world, int64_t pack_cap,
                             int64_t shard);

class GradientReducer {
 public:
  GradientReducer(EngineContext* ctx, const ParamRegistry* params, ShardedState* sharded)
      : ctx_(ctx), params_(params), sharded_(sharded) {}

  // Buckets of reduce_bucket_size elements, but never more than the model;
  // fp32 pack/receive staging of the same size. A param larger than a
  // bucket gets a gradient buffer of its own (one, sized to the largest such
  // param, as DeepSpeed reduces such a param from its own .grad), reduced
  // through the staging in pieces: buffers stay bounded by the bucket size
  // plus the largest param once, not four times it.
  absl::Status Allocate();

  // `boundary`: this micro-step ends an accumulation.
  absl::StatusOr<void*> GradBuffer(int id, bool boundary);
  absl::Status GradReady(int id, bool boundary);
  // The end of a micro-step: the last bucket reduced, every reduction done.
  absl::Status FinishMicroStep(bool boundary);
  // Stage 1 with ignore_unused_parameters false: the params some rank did
  // not hand in this micro-step, named with the ranks, on every rank (stage
  // 1 reduces one flat gradient at the boundary, so no bucket's signature
  // shows it; docs/ARCHITECTURE.md, "When ranks disagree").
  absl::Status CheckAllHandedIn();
  // No gradient of the next micro-step handed in yet.
  bool idle();

  // On the comm stream, at the boundary. Stage 0: params whose gradient
  // was not handed in on the boundary micro-step all-reduced now.
  absl::Status ReduceLeftoversStage0();
  // Stage 1: the full local gradients reduce-scattered (reduce_scatter
  // false: all-reduced) into `g32` (fp32, this rank's shard of each group),
  // averaged. `zero_grads`: the full local gradients are zeroed as they are
  // packed, or after the reduce-scatter when fp32 needs no pack (the
  // boundary's fused update then has nothing else to zero).
  // `deferred_scale` (may be null): with a reduce-scatter, the averaging
  // scale is left to the caller (set here; 1 when nothing is left), who
  // applies it in its pass over the shard (the boundary's sum of squares).
  // g32[g] may be this rank's owned range of group g's own fp32 gradient
  // unless Stage1ReadsGrads(g): each chunk of that range is packed before
  // its reduced values land there, and it is not zeroed here (the caller
  // zeroes it after reading it).
  absl::Status ReduceScatterFlatStage1(const std::vector<float*>& g32, bool zero_grads,
                                       float* deferred_scale = nullptr);
  // Stage1ReduceIsIdentity for this engine.
  bool Stage1IsIdentity() const;
  // Stage1ScatterReadsGrads for group g of this engine.
  bool Stage1ReadsGrads(int g) const;

  int64_t buffer_bytes() const {
    return buckets_.bytes() + pack_.bytes() + recv_.bytes() + half_.bytes() +
           static_cast<int64_t>(big_.data.bytes()) + (qgz_ ? qgz_->buffer_bytes() : 0);
  }

 private:
  absl::Status FlushBucket(int b, bool boundary);
  // Submits `b`'s reduction to the comm stream and empties it.
  absl::Status Flush(GradBucket* b, bool boundary);
  absl::Status ReduceBucket(const std::vector<int>& ids, const void* data,
                            const std::vector<int64_t>& offsets, bool boundary);
  // ReduceBucket, or, once the ranks' buckets differed in this micro-step
  // (ignore_unused_parameters), the bucket kept for its end
  // (core/engine/deferred_gradients.h).
  absl::Status ReduceOrDefer(const std::vector<int>& ids, const void* data,
                             const std::vector<int64_t>& offsets, bool boundary);
  // The end of a micro-step's bucket reductions with deferral on: a marker
  // every rank exchanges unless it deferred already, then what any rank
  // deferred reduced in layout order (stage 2; stage 0's leftovers take it).
  absl::Status FinishDeferred(bool boundary);
  // Stages 2-3: one param's gradient at `data`, larger than the staging,
  // reduced in rounds of at most pack_cap_/W elements of each rank's slice.
  absl::Status ReduceLargeParam(int id, const char* data);
  // Stage 0: `numel` gradient elements at `grads` all-reduced in place in
  // pieces of at most pack_cap_ (fp32 through the staging).
  absl::Status AllReduceInPieces(char* grads, int64_t numel);
  // A param larger than a bucket: its own buffer (`big_`).
  bool Large(int64_t numel) const { return numel > bucket_cap_; }
  absl::StatusOr<void*> LargeGradBuffer(int id);
  // Rotates to the other bucket after waiting for its reduction.
  absl::Status RotateBucket();
  // The fp32 pack reduced over ranks in communication_data_type: fp32 as
  // is; fp16/bf16 cast into `half_`, reduced there (half the bytes) and
  // widened back. `recv` gets this rank's piece (counts[rank] elements).
  absl::Status ReduceScatterPack(const float* pack, float* recv,
                                 const std::vector<int64_t>& counts);
  absl::Status AllReducePack(float* pack, int64_t n);
  // Whether the working dtype's gradients reduce as they are stored: no
  // averaging before the sum (pre-scale 1) and communication_data_type the
  // working dtype. The fp32 pack would then hold the same values, cast back
  // to the same bits before the collective (or sent as they are, fp32), so
  // the collective runs on the gradients themselves (docs/ARCHITECTURE.md,
  // "Reduced as stored").
  bool ReducesAsStored() const;
  // `n` working-dtype elements at `data` all-reduced in place in the
  // communication dtype (ReducesAsStored).
  absl::Status AllReduceStored(void* data, int64_t n);
  // grads = cast(float(reduced) * post_scale_), `n` working-dtype elements.
  void WriteBackScaled(const void* reduced, void* grads, int64_t n);
  // Stage 0, the boundary micro-step, ReducesAsStored: the bucket's slots
  // take the accumulated gradient and are all-reduced in place (no pack, no
  // cast), then written back scaled into the full local gradient.
  // Stages 2-3: working-dtype gradient pieces, in rank order (counts[r]
  // elements of rank r's), reduced; returns this rank's reduced fp32 piece
  // (counts[rank] elements, not yet times post_scale_) in recv_ or pack_.
  // ReducesAsStored: sent as they lie when back to back, else copied into
  // the send buffer; otherwise packed into fp32 (ReduceScatterPack,
  // AllReducePack).
  struct Piece {
    const char* src;
    int64_t n;
  };
  absl::StatusOr<float*> ReducePieces(const std::vector<Piece>& pieces,
                                      const std::vector<int64_t>& counts);
  // Stage 1, group `g`, ReducesAsStored with a half working dtype: the local
  // gradient reduce-scattered as it lies (one chunk) or copied into the half
  // send buffer (no fp32 pack between), this rank's piece widened into `out`.
  absl::Status ReduceScatterFlatHalf(int g, float* out, bool zero_grads, bool defer);
  absl::Status AllReduceInSlots(const std::vector<int>& ids, char* base,
                                const std::vector<int64_t>& offsets);

  EngineContext* ctx_;
  const ParamRegistry* params_;
  ShardedState* sharded_;
  GradBuckets buckets_;
  int64_t bucket_cap_ = 0;
  // The gradient of one param larger than a bucket (capacity: the largest
  // such param; none if there is none), reduced as soon as it is ready.
  GradBucket big_;
  DeviceBuffer pack_, recv_;  // fp32 staging; recv_ only for reduce-scatters
  // communication_data_type fp16/bf16: the pack and a receive, 2 bytes each.
  DeviceBuffer half_;
  int64_t pack_cap_ = 0;
  // Each rank's fp32 gradient times pre_scale_ is summed over ranks, the
  // sum times post_scale_ kept (Config::prescale_gradients).
  float pre_scale_ = 1.0f, post_scale_ = 1.0f;
  std::vector<char> reduced_at_boundary_;  // stage 0, by layout index
  // By layout index: handed in this micro-step, even if its bucket has
  // been flushed since (a second grad_buffer would count it twice).
  std::vector<char> handed_in_;
  int64_t flushed_ = 0;  // buckets flushed this micro-step (their numbers)
  std::unique_ptr<DeferredGradients> deferred_;  // null: a divergence is an error
  // qgZ: the bucket reduce-scatter, hierarchical and quantized across nodes.
  std::unique_ptr<QuantizedReduceScatter> qgz_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_GRADIENT_REDUCER_H_

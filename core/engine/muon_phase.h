// The boundary's Muon phase (docs/ARCHITECTURE.md, "Muon"): DeepSpeed's
// MuonWithAuxAdam on a sharded, maybe offloaded, state. Newton-Schulz needs
// whole matrices and each rank owns only a slice of some of them, so:
//   Prepare (after the norm, before pass 2): each rank folds its slice of
//     each Muon matrix's gradient (unscaled and clipped) into the momentum
//     (exp_avg), sends the Nesterov blend to the matrix's owner rank
//     (core/optim/muon_owners.h, one all-to-all), the owner orthogonalises
//     (core/optim/newton_schulz.h) and sends each slice's update back (a
//     second all-to-all); each rank computes its slice's new master.
//   pass 2 runs the optimizer's AdamW over every owned element, these too;
//   Commit (after pass 2) writes the Muon slices' master, momentum, a zero
//     exp_avg_sq and working copy over what AdamW wrote there.
// State goes through OptimizerStateStore::Read/Write, so memory, ZeRO-Offload
// host and NVMe stores all hold Muon's momentum like any moment (and in
// checkpoints, resharded like any moment). Stage 0 owns whole matrices:
// every rank orthogonalises every matrix, no exchange. The phase's host
// buffers are made at its first step, sized by PlanMuonBuffers (which the
// memory estimator calls too), and reused by every later step.
#ifndef ZERO_CORE_ENGINE_MUON_PHASE_H_
#define ZERO_CORE_ENGINE_MUON_PHASE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine/engine_context.h"
#include "core/engine/optimizer_state_store.h"
#include "core/engine/param_registry.h"
#include "core/engine/sharded_state.h"
#include "core/optim/newton_schulz.h"
#include "core/optim/optimizer.h"
#include "core/partition/layout.h"

namespace zero {

// One matrix on Muon: where it sits in the flat layout and its shape as a
// matrix (dimension 0 by the product of the rest, as DeepSpeed views a conv).
struct MuonMatrix {
  std::string name;
  int group = 0;
  int64_t offset = 0;  // first element within the group
  int64_t rows = 0, cols = 0;
  int64_t numel() const { return rows * cols; }
};

// The trainable params with ParamRecord::use_muon, in layout order.
std::vector<MuonMatrix> MuonMatricesOf(const ParamRegistry& params, const Layout& layout);

// Matrix m's elements on rank r, in group coordinates: [lo, hi) (empty:
// lo == hi). With `exchanges` (stages 1-3, world > 1) rank r owns its shard
// of each group; without, every rank holds every group whole.
void MuonRankSlice(const MuonMatrix& m, const Layout& layout, bool exchanges, int r, int64_t* lo,
                   int64_t* hi);

// The host buffers the Muon phase keeps on one rank, in floats: its slices
// of every matrix three times (master, momentum, and the exchange's
// outgoing blend and returning update), and with an exchange the matrices
// it owns as received (every rank's slice; sent back in place) and one
// whole matrix, the largest it owns; plus Newton-Schulz's work buffers for
// that matrix. Owners differ per rank, so these do too.
struct MuonBufferPlan {
  int64_t slice_elems = 0;
  int64_t owned_elems = 0;  // 0 without an exchange
  int64_t whole_elems = 0;  // 0 without an exchange (slices are whole matrices)
  NewtonSchulzSizes ns;
  int64_t bytes() const { return (3 * slice_elems + owned_elems + whole_elems) * 4 + ns.bytes(); }
};
MuonBufferPlan PlanMuonBuffers(const std::vector<MuonMatrix>& matrices,
                               const std::vector<int>& owners, const Layout& layout,
                               bool exchanges, int rank);

// fp32 values of owned gradient elements [begin, begin+len) of group g into
// host memory `out`, as pass 2 would read them before its grad_scale.
using MuonGradReader = std::function<absl::Status(int g, int64_t begin, int64_t len, float* out)>;

class MuonPhase {
 public:
  // Refuses what it cannot run, naming it: hybrid sharding, offload_param
  // nvme.
  static absl::StatusOr<std::unique_ptr<MuonPhase>> Make(EngineContext* ctx,
                                                          ShardedState* sharded,
                                                          OptimizerStateStore* store,
                                                          const MuonSettings& settings,
                                                          std::vector<MuonMatrix> matrices);

  // COLLECTIVE (stages 1-3, world > 1). `lr` is the scheduled lr,
  // `grad_scale` pass 2's unscale-and-clip factor.
  absl::Status Prepare(const MuonGradReader& grads, float grad_scale, double lr);
  // After pass 2: the Muon slices' state and working copy.
  absl::Status Commit();

  const std::vector<MuonMatrix>& matrices() const { return matrices_; }
  const std::vector<int>& owners() const { return owners_; }
  // The host buffers' allocated bytes (0 before the first step): zero_stats'
  // muon_bytes, part of its buffer_bytes.
  int64_t buffer_bytes() const;

 private:
  MuonPhase(EngineContext* ctx, ShardedState* sharded, OptimizerStateStore* store,
            const MuonSettings& settings, std::vector<MuonMatrix> matrices);
  void RankSlice(int i, int r, int64_t* lo, int64_t* hi) const;
  bool exchanges() const;
  // The buffers, at the first Prepare.
  void MakeBuffers();

  // This rank's slice of one matrix: where it sits in the owned range and
  // in the slice buffers (master_, momentum_, out_). The slice buffers hold
  // the slices by (owner, matrix), the exchange's order.
  struct Slice {
    int i = 0;
    int64_t begin = 0;  // owned offset of the slice's first element
    int64_t len = 0;
    int64_t at = 0;     // offset in the slice buffers
  };

  EngineContext* ctx_;
  ShardedState* sharded_;
  OptimizerStateStore* store_;
  MuonSettings settings_;
  std::vector<MuonMatrix> matrices_;
  std::vector<int> owners_;
  std::vector<Slice> slices_;  // in matrix order
  std::vector<int64_t> send_counts_, recv_counts_;  // per rank, the first exchange's
  std::vector<int> owned_;  // the matrices this rank orthogonalises
  // Where rank r's slice of owned_[k] is in in_: in_at_[k * world + r].
  std::vector<int64_t> in_at_;
  bool made_ = false;
  // PlanMuonBuffers': out_ carries the blends to the owners and brings the
  // updates back; in_ receives the owned matrices' slices (rank by rank) and
  // sends their updates from the same places.
  std::vector<float> master_, momentum_, out_, in_, whole_;
  NewtonSchulzWork ns_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_MUON_PHASE_H_

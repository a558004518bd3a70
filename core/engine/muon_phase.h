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
// every rank orthogonalises every matrix, no exchange.
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
#include "core/optim/optimizer.h"

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

 private:
  MuonPhase(EngineContext* ctx, ShardedState* sharded, OptimizerStateStore* store,
            const MuonSettings& settings, std::vector<MuonMatrix> matrices);
  // Matrix i's elements on rank r, in group coordinates: [lo, hi).
  void RankSlice(int i, int r, int64_t* lo, int64_t* hi) const;
  bool exchanges() const;

  // This rank's slice of one matrix, held from Prepare to Commit.
  struct Held {
    int i = 0;
    int64_t begin = 0;  // owned offset of the slice's first element
    std::vector<float> master, momentum, update;
  };

  EngineContext* ctx_;
  ShardedState* sharded_;
  OptimizerStateStore* store_;
  MuonSettings settings_;
  std::vector<MuonMatrix> matrices_;
  std::vector<int> owners_;
  std::vector<Held> held_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_MUON_PHASE_H_

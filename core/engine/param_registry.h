// The params the caller registered: names, shapes, dtypes, their initial
// values until finalize, and the check that every rank registered the same
// (docs/ARCHITECTURE.md, "The engine's parts").
#ifndef ZERO_CORE_ENGINE_PARAM_REGISTRY_H_
#define ZERO_CORE_ENGINE_PARAM_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/comm_stream.h"
#include "core/comm/communicator.h"
#include "core/common/dtype.h"
#include "core/engine/auto_sizes.h"
#include "core/engine/init_spec.h"
#include "core/partition/layout.h"

namespace zero {

// Mirrors the C ABI's ZERO_MAX_DIMS.
inline constexpr int kMaxDims = 8;

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  // One init source: `init` values (numel, copied), or `init_spec`
  // (copied), or `fill` (called at finalize); none of them: zeros.
  const float* init = nullptr;
  const InitSpec* init_spec = nullptr;
  FillFn fill = nullptr;
  void* fill_user = nullptr;
  bool trainable = true;
  // Muon's half (core/optim/muon_optimizer.cc): 1 on Muon (a matrix, at
  // least 2-D), 0 on AdamW, -1 DeepSpeed's rule (MuonDefault).
  int use_muon = -1;
};

// DeepSpeed's rule for Muon's half: at least 2-D, and the name holds neither
// "embed" nor "lm_head" (case-insensitive).
bool MuonDefault(const std::string& name, const std::vector<int64_t>& shape);

enum class InitSource { kValues, kSpec, kFill };

struct ParamRecord {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  int64_t numel = 0;
  bool trainable = true;
  int use_muon_flag = -1;   // as registered (ParamSpec::use_muon)
  bool use_muon = false;    // resolved: updated by Muon when the optimizer is Muon
  int li = -1;              // index in the layout (trainable params)
  // ONE init source, until finalize: values (a full copy), a spec, or a
  // fill callback; specs and callbacks hold no numel-sized buffer.
  InitSource source = InitSource::kSpec;
  std::vector<float> init;  // kValues
  InitSpec spec;            // kSpec (zeros when nothing was given)
  uint64_t name_hash = 0;   // kSpec
  FillFn fill = nullptr;    // kFill
  void* fill_user = nullptr;
  int gather_refs = 0;      // the caller's outstanding gathers
  // One entry per outstanding gather, innermost last (a release ends the
  // innermost): true where the caller holds a copy that an optimizer step
  // would leave stale (every stage-3 gather of a trainable param, a
  // gather_into at any stage), false for stages 0-2's resident pointer,
  // which the step updates in place. Engine::Step refuses the boundary while
  // any is true (docs/ARCHITECTURE.md, "Stage 3").
  std::vector<bool> gathered_copies;
};

std::string ShapeText(const std::vector<int64_t>& shape);

class ParamRegistry {
 public:
  // Trainable params must use the engine's working dtype.
  explicit ParamRegistry(DType working) : working_(working) {}

  absl::StatusOr<int> Register(const ParamSpec& spec);
  absl::StatusOr<int> Find(const std::string& name) const;
  absl::Status CheckId(int id, const char* call) const;

  int size() const { return static_cast<int>(params_.size()); }
  bool empty() const { return params_.empty(); }
  ParamRecord& at(int id) { return params_[id]; }
  const ParamRecord& at(int id) const { return params_[id]; }
  ParamSpec Info(int id) const;
  const std::vector<ParamRecord>& all() const { return params_; }

  // Numbers the trainable params in registration order; their layout.
  std::vector<LayoutParam> AssignLayout();
  // Layout index -> param id.
  const std::vector<int>& trainable_ids() const { return trainable_ids_; }
  const ParamRecord& by_layout(int li) const { return params_[trainable_ids_[li]]; }
  // What the "auto" sizes read of each param (core/engine/auto_sizes.h: an
  // embedding [vocab, h], a Linear [4h, h] or [h, h] all give hidden h).
  std::vector<SizingParam> SizingParams() const;
  void DropInitValues();

  // The fp32 initial values of elements [offset, offset+count) of `p`,
  // handed to fn(done, n, src) in pieces of at most kInitChunk elements
  // (values: one piece pointing into the copy). A failing fill callback
  // hands zeros and records the first error (InitError) instead of
  // returning: every rank reaches AgreeInitErrors.
  static constexpr int64_t kInitChunk = int64_t{1} << 20;
  using InitSink = std::function<void(int64_t done, int64_t n, const float* src)>;
  void ProduceInit(const ParamRecord& p, int64_t offset, int64_t count,
                   const InitSink& fn) const;
  // Bytes of initial values the registry holds (kValues copies).
  int64_t init_bytes() const;
  bool has_fill() const;
  // COLLECTIVE when some param has a fill callback (every rank knows, as
  // VerifyRanksAgree compares the source): the lowest failing rank's first
  // fill error, on every rank. Otherwise this rank's own (always OK).
  absl::Status AgreeInitErrors(Communicator* ctrl, CommStream* stream) const;

  // COLLECTIVE over `ctrl` (run on `stream`). Rank 0's descriptions are
  // broadcast; the earliest difference anywhere fails every rank alike
  // (a MismatchError naming rank 0's entry and the first differing rank's).
  absl::Status VerifyRanksAgree(Communicator* ctrl, CommStream* stream) const;

 private:
  DType working_;
  std::vector<ParamRecord> params_;
  std::unordered_map<std::string, int> by_name_;
  std::vector<int> trainable_ids_;
  mutable absl::Status init_error_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_PARAM_REGISTRY_H_

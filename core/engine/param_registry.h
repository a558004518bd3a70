// The params the caller registered: names, shapes, dtypes, their initial
// values until finalize, and the check that every rank registered the same
// (docs/ARCHITECTURE.md, "The engine's parts").
#ifndef ZERO_CORE_ENGINE_PARAM_REGISTRY_H_
#define ZERO_CORE_ENGINE_PARAM_REGISTRY_H_

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/comm/comm_stream.h"
#include "core/comm/communicator.h"
#include "core/common/dtype.h"
#include "core/partition/layout.h"

namespace zero {

// Mirrors the C ABI's ZERO_MAX_DIMS.
inline constexpr int kMaxDims = 8;

struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  const float* init = nullptr;  // numel values or null for zeros; copied
  bool trainable = true;
};

struct ParamRecord {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  int64_t numel = 0;
  bool trainable = true;
  int li = -1;              // index in the layout (trainable params)
  std::vector<float> init;  // until finalize
  int gather_refs = 0;      // the caller's outstanding gathers
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
  // The largest trainable 2-D param's numel (hidden^2 for "auto" sizes).
  int64_t LargestMatrix() const;
  void DropInitValues();

  // COLLECTIVE over `ctrl` (run on `stream`). Rank 0's descriptions are
  // broadcast; the earliest difference anywhere fails every rank alike
  // (a MismatchError naming rank 0's entry and the first differing rank's).
  absl::Status VerifyRanksAgree(Communicator* ctrl, CommStream* stream) const;

 private:
  DType working_;
  std::vector<ParamRecord> params_;
  std::unordered_map<std::string, int> by_name_;
  std::vector<int> trainable_ids_;
};

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_PARAM_REGISTRY_H_

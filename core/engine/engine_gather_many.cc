// A block's gathers and releases in one call (zero_engine_gather_into_many,
// zero_engine_release_many): a binding's module hook crosses into the engine
// once per block instead of once per param (docs/ARCHITECTURE.md, "Stage 3",
// batched gathers). Each entry is the single call's own work, in order, so
// what moves, the prefetch trace and the flight record are those of the
// single calls; what the batch adds is that a bad entry refuses the whole
// call before anything moves.
#include <cstddef>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "core/common/status_macros.h"
#include "core/engine/engine.h"
#include "core/engine/param_registry.h"

namespace zero {
namespace {

// `s` with the batch call and the entry in front: the single call's message
// already names the param.
absl::Status AtEntry(const char* call, size_t k, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat(call, ", entry ", k, ": ", s.message()));
}

}  // namespace

absl::Status Engine::CheckGatherIntoArgs(int id, DType dtype, const void* dst,
                                         size_t bytes) const {
  RETURN_IF_ERROR(params_.CheckId(id, "gather_into"));
  const ParamRecord& p = params_.at(id);
  // fp16 and bf16 are both 2 bytes: the dtype is checked, not just the size,
  // so a caller expecting the other never reads the wrong bits silently.
  if (dtype != p.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather_into '", p.name, "': the param is ", DTypeName(p.dtype), ", not ",
        DTypeName(dtype), " (no conversion: the working copy's bits are copied)"));
  }
  const size_t want = static_cast<size_t>(p.numel) * DTypeSize(p.dtype);
  if (bytes != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gather_into '", p.name, "': ", bytes, " bytes given; its ", p.numel, " ",
        DTypeName(p.dtype), " elements (shape ", ShapeText(p.shape), ") take ", want));
  }
  if (dst == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("gather_into '", p.name, "': dst is NULL"));
  }
  return absl::OkStatus();
}

absl::Status Engine::GatherIntoMany(const int32_t* ids, size_t count, DType dtype,
                                    void* const* dsts, const size_t* bytes) {
  static constexpr char kCall[] = "gather_into_many";
  RETURN_IF_ERROR(Check(true, kCall));
  // Everything GatherInto would refuse for an entry's own arguments, for
  // every entry first: a refused call gathers nothing.
  for (size_t k = 0; k < count; ++k) {
    absl::Status ok = CheckGatherIntoArgs(ids[k], dtype, dsts[k], bytes[k]);
    if (!ok.ok()) return AtEntry(kCall, k, ok);
  }
  for (size_t k = 0; k < count; ++k) {
    absl::Status s = GatherInto(ids[k], dtype, dsts[k], bytes[k]);
    if (s.ok()) continue;
    // What could still fail is the engine's own state (the live budget, a
    // collective, the device): what this call gathered is released, newest
    // first, so the caller holds nothing of the batch. A failed engine
    // refuses the releases too; it is unusable anyway.
    for (size_t j = k; j-- > 0;) (void)Release(ids[j]);
    return AtEntry(kCall, k, s);
  }
  return absl::OkStatus();
}

absl::Status Engine::ReleaseMany(const int32_t* ids, size_t count) {
  static constexpr char kCall[] = "release_many";
  RETURN_IF_ERROR(Check(true, kCall));
  // Counted down first and put back on a refusal: an id the list names
  // more often than it is gathered is refused with nothing released, and no
  // scratch memory is needed for the count.
  size_t taken = 0;
  absl::Status bad;
  for (; taken < count; ++taken) {
    bad = params_.CheckId(ids[taken], "release");
    if (!bad.ok()) break;
    ParamRecord& p = params_.at(ids[taken]);
    if (p.gather_refs <= 0) {
      bad = absl::FailedPreconditionError(
          absl::StrCat("release '", p.name, "': not gathered (or named more often than gathered)"));
      break;
    }
    --p.gather_refs;
  }
  if (!bad.ok()) {
    for (size_t j = 0; j < taken; ++j) ++params_.at(ids[j]).gather_refs;
    return AtEntry(kCall, taken, bad);
  }
  for (size_t k = 0; k < count; ++k) {
    ++params_.at(ids[k]).gather_refs;  // Release counts it down again
    RETURN_IF_ERROR(Release(ids[k]));
  }
  return absl::OkStatus();
}

}  // namespace zero

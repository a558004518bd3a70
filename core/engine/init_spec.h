// Initial values described instead of copied: a distribution (InitSpec) or a
// caller's fill callback. A spec's element i of a param is a function of
// (seed, the param's name, i) only — Philox4x32-10 at counter {i, hash(name)}
// under key seed — so it is the same at every world size and stage, and each
// rank computes only the elements it needs (docs/ARCHITECTURE.md, "The
// engine's life").
#ifndef ZERO_CORE_ENGINE_INIT_SPEC_H_
#define ZERO_CORE_ENGINE_INIT_SPEC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace zero {

// The values match the C ABI's zero_init_kind; never change them.
enum class InitKind : int32_t {
  kZeros = 0,
  kOnes = 1,
  kConstant = 2,        // value
  kUniform = 3,         // U(low, high)
  kNormal = 4,          // N(mean, std)
  kTruncNormal = 5,     // N(mean, std) restricted to [low, high] (rejection)
  kKaimingUniform = 6,  // U(-b, b), b = sqrt(6 / ((1 + a^2) fan_in)); a = sqrt(5)
                        // is torch's nn.Linear / Conv weight default
  kFanInUniform = 7,    // U(-1/sqrt(fan_in), 1/sqrt(fan_in)): nn.Linear bias
};

struct InitSpec {
  InitKind kind = InitKind::kZeros;
  uint64_t seed = 0;
  double value = 0.0;
  double low = 0.0, high = 1.0;
  double mean = 0.0, std = 1.0;
  double a = 2.23606797749978969641;  // kaiming's negative slope, sqrt(5)
  int64_t fan_in = 0;  // 0: from the shape (shape[1] * prod(shape[2:]))
};

// fill(user, name, offset, count, out): elements [offset, offset+count) of
// the named param into out[0..count). Non-zero return is an error.
using FillFn = int32_t (*)(void* user, const char* name, int64_t offset,
                           int64_t count, float* out);

// Checks the spec against the param's shape ("register_param '<name>': ...").
absl::Status ValidateInitSpec(const InitSpec& s, const std::string& name,
                              const std::vector<int64_t>& shape);

// 64-bit FNV-1a of the name: the param's stream in the counter.
uint64_t ParamNameHash(const std::string& name);

// fan_in as torch's _calculate_fan_in_and_fan_out: shape[1] * prod(shape[2:])
// for 2+ dims; 0 for fewer (the spec must give it).
int64_t FanInFromShape(const std::vector<int64_t>& shape);

// Elements [offset, offset+count) of a spec-initialized param into out.
void GenerateInit(const InitSpec& s, uint64_t name_hash,
                  const std::vector<int64_t>& shape, int64_t offset,
                  int64_t count, float* out);

}  // namespace zero

#endif  // ZERO_CORE_ENGINE_INIT_SPEC_H_

#include "core/engine/init_spec.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/philox_math.h"

namespace zero {
namespace {

constexpr double kTwoPi = 6.28318530717958647692;

math::Philox4x32 Draw(uint64_t seed, uint64_t name_hash, int64_t i, uint32_t attempt) {
  math::Philox4x32 c;
  const uint64_t u = static_cast<uint64_t>(i);
  c.v[0] = static_cast<uint32_t>(u);
  c.v[1] = static_cast<uint32_t>(u >> 32);
  c.v[2] = static_cast<uint32_t>(name_hash);
  c.v[3] = static_cast<uint32_t>(name_hash >> 32);
  // Retries of a rejection sampler use further keys of the same seed.
  return math::Philox4x32_10(c, static_cast<uint32_t>(seed),
                             static_cast<uint32_t>(seed >> 32) ^ (attempt * 0x9E3779B9u));
}

// Box-Muller in double from two words.
double Normal(uint32_t w0, uint32_t w1) {
  const double u1 = math::PhiloxUniform01Open(w0);
  const double u2 = math::PhiloxUniform01(w1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
}

double KaimingBound(const InitSpec& s, int64_t fan_in) {
  return std::sqrt(6.0 / ((1.0 + s.a * s.a) * static_cast<double>(fan_in)));
}

}  // namespace

uint64_t ParamNameHash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int64_t FanInFromShape(const std::vector<int64_t>& shape) {
  if (shape.size() < 2) return 0;
  int64_t f = shape[1];
  for (size_t d = 2; d < shape.size(); ++d) f *= shape[d];
  return f;
}

absl::Status ValidateInitSpec(const InitSpec& s, const std::string& name,
                              const std::vector<int64_t>& shape) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("register_param '", name, "': init spec ", why));
  };
  switch (s.kind) {
    case InitKind::kZeros:
    case InitKind::kOnes:
      return absl::OkStatus();
    case InitKind::kConstant:
      if (!std::isfinite(s.value)) return bad("constant value is not finite");
      return absl::OkStatus();
    case InitKind::kUniform:
      if (!std::isfinite(s.low) || !std::isfinite(s.high) || !(s.low <= s.high)) {
        return bad(absl::StrCat("uniform needs finite low <= high, got [", s.low, ", ", s.high, "]"));
      }
      return absl::OkStatus();
    case InitKind::kNormal:
    case InitKind::kTruncNormal:
      if (!std::isfinite(s.mean) || !std::isfinite(s.std) || s.std < 0) {
        return bad(absl::StrCat("normal needs a finite mean and std >= 0, got mean ", s.mean,
                                " std ", s.std));
      }
      if (s.kind == InitKind::kTruncNormal &&
          (!std::isfinite(s.low) || !std::isfinite(s.high) || !(s.low < s.high) ||
           s.mean < s.low || s.mean > s.high)) {
        return bad(absl::StrCat("trunc_normal needs finite low < high around the mean, got [",
                                s.low, ", ", s.high, "]"));
      }
      return absl::OkStatus();
    case InitKind::kKaimingUniform:
    case InitKind::kFanInUniform: {
      const int64_t f = s.fan_in > 0 ? s.fan_in : FanInFromShape(shape);
      if (s.fan_in < 0 || f <= 0) {
        return bad(absl::StrCat("needs fan_in > 0 (a shape of 2+ dims gives it), got ", s.fan_in));
      }
      if (!std::isfinite(s.a)) return bad("kaiming a is not finite");
      return absl::OkStatus();
    }
  }
  return bad(absl::StrCat("has unknown kind ", static_cast<int32_t>(s.kind)));
}

void GenerateInit(const InitSpec& s, uint64_t h, const std::vector<int64_t>& shape,
                  int64_t offset, int64_t count, float* out) {
  switch (s.kind) {
    case InitKind::kZeros:
    case InitKind::kOnes:
    case InitKind::kConstant: {
      const float v = s.kind == InitKind::kZeros ? 0.0f
                      : s.kind == InitKind::kOnes ? 1.0f
                                                  : static_cast<float>(s.value);
      for (int64_t k = 0; k < count; ++k) out[k] = v;
      return;
    }
    case InitKind::kNormal:
      for (int64_t k = 0; k < count; ++k) {
        const math::Philox4x32 r = Draw(s.seed, h, offset + k, 0);
        out[k] = static_cast<float>(s.mean + s.std * Normal(r.v[0], r.v[1]));
      }
      return;
    case InitKind::kTruncNormal:
      for (int64_t k = 0; k < count; ++k) {
        double x = s.mean;  // after 64 rejected draws: the mean (never reached in practice)
        for (uint32_t attempt = 0; attempt < 32; ++attempt) {
          const math::Philox4x32 r = Draw(s.seed, h, offset + k, attempt);
          const double y0 = s.mean + s.std * Normal(r.v[0], r.v[1]);
          const double y1 = s.mean + s.std * Normal(r.v[2], r.v[3]);
          if (y0 >= s.low && y0 <= s.high) { x = y0; break; }
          if (y1 >= s.low && y1 <= s.high) { x = y1; break; }
        }
        out[k] = static_cast<float>(x);
      }
      return;
    case InitKind::kUniform:
    case InitKind::kKaimingUniform:
    case InitKind::kFanInUniform: {
      double lo = s.low, hi = s.high;
      if (s.kind != InitKind::kUniform) {
        const int64_t f = s.fan_in > 0 ? s.fan_in : FanInFromShape(shape);
        const double b = s.kind == InitKind::kKaimingUniform
                             ? KaimingBound(s, f)
                             : 1.0 / std::sqrt(static_cast<double>(f));
        lo = -b;
        hi = b;
      }
      for (int64_t k = 0; k < count; ++k) {
        const math::Philox4x32 r = Draw(s.seed, h, offset + k, 0);
        out[k] = static_cast<float>(lo + (hi - lo) * math::PhiloxUniform01(r.v[0]));
      }
      return;
    }
  }
}

}  // namespace zero

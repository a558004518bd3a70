// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11; the Random123 reference): a counter-based generator, so the
// value at any counter is computed directly, on the host or a device, with
// no state to carry between elements. Checked against Random123's
// known-answer vectors in tests/init_spec_test.cc.
#ifndef ZERO_KERNELS_PHILOX_MATH_H_
#define ZERO_KERNELS_PHILOX_MATH_H_

#include <stdint.h>

#include "kernels/hd.h"

namespace zero {
namespace math {

struct Philox4x32 {
  uint32_t v[4];
};

ZERO_HD void PhiloxMulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Ten rounds of Philox4x32 on `ctr` under key {k0, k1}.
ZERO_HD Philox4x32 Philox4x32_10(Philox4x32 ctr, uint32_t k0, uint32_t k1) {
  const uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  const uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    PhiloxMulHiLo(kM0, ctr.v[0], &hi0, &lo0);
    PhiloxMulHiLo(kM1, ctr.v[2], &hi1, &lo1);
    Philox4x32 n;
    n.v[0] = hi1 ^ ctr.v[1] ^ k0;
    n.v[1] = lo1;
    n.v[2] = hi0 ^ ctr.v[3] ^ k1;
    n.v[3] = lo0;
    ctr = n;
  }
  return ctr;
}

// A uniform float in [0, 1) from the top 24 bits of `u` (every value exact).
ZERO_HD float PhiloxUniform01(uint32_t u) {
  return static_cast<float>(u >> 8) * (1.0f / 16777216.0f);
}

// A uniform float in (0, 1]: never 0, for log() in Box-Muller.
ZERO_HD float PhiloxUniform01Open(uint32_t u) {
  return static_cast<float>((u >> 8) + 1) * (1.0f / 16777216.0f);
}

}  // namespace math
}  // namespace zero

#endif  // ZERO_KERNELS_PHILOX_MATH_H_

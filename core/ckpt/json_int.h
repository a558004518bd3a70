// Checked reads of integers from untrusted JSON (checkpoint manifests, rank
// file indexes). nlohmann's get<int64_t>() of a float or of an integer beyond
// the target type converts with undefined behaviour (1e300 -> int64_t); these
// return an error instead, for the caller to turn into DataLoss naming the
// file and the field.
#ifndef ZERO_CORE_CKPT_JSON_INT_H_
#define ZERO_CORE_CKPT_JSON_INT_H_

#include <cstdint>
#include <stdexcept>
#include <string>

namespace zero {
namespace ckpt {

// `v` as an integer in [lo, hi]; throws std::invalid_argument naming what it
// got when `v` is not a JSON integer (floats included) or is out of range.
// Callers catch std::exception around the whole parse.
template <typename Json>
int64_t JsonInt(const Json& v, int64_t lo = INT64_MIN, int64_t hi = INT64_MAX) {
  bool ok = false;
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.template get<uint64_t>();
    ok = u <= static_cast<uint64_t>(INT64_MAX);
    x = ok ? static_cast<int64_t>(u) : 0;
  } else if (v.is_number_integer()) {
    x = v.template get<int64_t>();
    ok = true;
  }
  if (!ok || x < lo || x > hi) {
    throw std::invalid_argument("expected an integer in [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "], got " + v.dump());
  }
  return x;
}

// A 64-bit checksum written as 1 to 16 hex digits (std::stoull would also
// take "-1", "0x..", leading blanks and trailing junk).
template <typename Json>
uint64_t JsonHex64(const Json& v) {
  if (!v.is_string()) throw std::invalid_argument("expected a hex string, got " + v.dump());
  const std::string& s = v.template get_ref<const std::string&>();
  if (s.empty() || s.size() > 16) {
    throw std::invalid_argument("expected 1 to 16 hex digits, got " + v.dump());
  }
  uint64_t x = 0;
  for (char c : s) {
    int d = c >= '0' && c <= '9'   ? c - '0'
            : c >= 'a' && c <= 'f' ? c - 'a' + 10
            : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                   : -1;
    if (d < 0) throw std::invalid_argument("expected 1 to 16 hex digits, got " + v.dump());
    x = x << 4 | static_cast<uint64_t>(d);
  }
  return x;
}

}  // namespace ckpt
}  // namespace zero

#endif  // ZERO_CORE_CKPT_JSON_INT_H_

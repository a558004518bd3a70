// The struct_size rule of zero_c.h (convention 3), once for every public
// struct: a shorter struct (older client) is a prefix, fields past it take
// their defaults and only its bytes are written; a longer one (newer client)
// is accepted only when the bytes this library does not know are all zero,
// as Linux's copy_struct_from_user; one below the struct's first published
// size is refused. Internal to libzero_c.
#ifndef ZERO_CAPI_ABI_STRUCT_H_
#define ZERO_CAPI_ABI_STRUCT_H_

#include <algorithm>
#include <cstddef>
#include <cstring>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "zero_c.h"

namespace zero_capi {

// Per public struct: its name, and its first published size (the sizeof of
// the version that introduced it: through `last`, rounded up to the
// struct's alignment), which layout_check pins.
template <typename T>
struct AbiStruct;

#define ZERO_ABI_STRUCT(T, last)                                            \
  template <>                                                               \
  struct AbiStruct<T> {                                                     \
    static constexpr const char* kName = #T;                                \
    static constexpr size_t kFirstSize =                                    \
        (offsetof(T, last) + sizeof(static_cast<T*>(nullptr)->last) +       \
         alignof(T) - 1) / alignof(T) * alignof(T);                         \
  }

ZERO_ABI_STRUCT(zero_config, comm_timeout_seconds);  // 1.0
ZERO_ABI_STRUCT(zero_param_desc, trainable);         // 1.0
ZERO_ABI_STRUCT(zero_step_info, lr);                 // 1.0
ZERO_ABI_STRUCT(zero_stats, micro_step);             // 1.0
ZERO_ABI_STRUCT(zero_load_options, allow_missing);   // 1.0
ZERO_ABI_STRUCT(zero_param_info, trainable);         // 1.1
ZERO_ABI_STRUCT(zero_safetensors_options, allow_missing);  // 1.4
ZERO_ABI_STRUCT(zero_init_spec, fan_in);             // 1.4
ZERO_ABI_STRUCT(zero_step_breakdown, nvme_write_bytes);  // 1.5
ZERO_ABI_STRUCT(zero_comm_log_entry, busbw_gbs);     // 1.5
ZERO_ABI_STRUCT(zero_link_stats, inter_values_control);  // 1.5
ZERO_ABI_STRUCT(zero_memory_estimate, host_bytes_per_node);  // 1.5
ZERO_ABI_STRUCT(zero_device_info, dlpack_device_type);  // 1.5
ZERO_ABI_STRUCT(zero_save_options, keep_last);      // 1.11
ZERO_ABI_STRUCT(zero_preemption_options, exit_code);  // 1.11

#undef ZERO_ABI_STRUCT

// No struct of any version comes near this; a larger struct_size is an
// uninitialized struct, and scanning its "tail" could fault.
inline constexpr size_t kMaxStructSize = 4096;

// Checks `p->struct_size` by the rule. Does not touch bytes past
// struct_size.
template <typename T>
absl::Status CheckStructSize(const T* p) {
  using A = AbiStruct<T>;
  const size_t n = p->struct_size;
  if (n < A::kFirstSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        A::kName, ": struct_size ", n, " is smaller than ", A::kFirstSize,
        ", the size of its first version; fill it from its ZERO_*_INIT macro"));
  }
  if (n > kMaxStructSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        A::kName, ": struct_size ", n, " is not a struct size (over ", kMaxStructSize,
        "); fill it from its ZERO_*_INIT macro"));
  }
  if (n > sizeof(T)) {
    const unsigned char* bytes = reinterpret_cast<const unsigned char*>(p);
    for (size_t i = sizeof(T); i < n; ++i) {
      if (bytes[i] != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            A::kName, ": struct_size ", n, " is larger than this library's ", sizeof(T),
            " (zero ", ZERO_VERSION_MAJOR, ".", ZERO_VERSION_MINOR, ".", ZERO_VERSION_PATCH,
            ") and byte ", i, " past its end is not zero: a field of a newer zero_c.h "
            "that this library does not know is set"));
      }
    }
  }
  return absl::OkStatus();
}

// The caller's struct as this library's T: the caller's prefix, `defaults`
// (the struct's ZERO_*_INIT) past it. struct_size of the result is the
// caller's.
template <typename T>
absl::StatusOr<T> ReadStruct(const T* p, const T& defaults) {
  absl::Status s = CheckStructSize(p);
  if (!s.ok()) return s;
  T out = defaults;
  std::memcpy(&out, p, std::min(p->struct_size, sizeof(T)));
  return out;
}

// Writes `value` into the caller's struct, whose struct_size passed
// CheckStructSize: at most its first struct_size bytes, never struct_size
// itself, never bytes past this library's sizeof.
template <typename T>
void WriteStruct(const T& value, T* p) {
  constexpr size_t kHead = sizeof(p->struct_size);
  const size_t n = std::min(p->struct_size, sizeof(T));
  if (n > kHead) {
    std::memcpy(reinterpret_cast<char*>(p) + kHead,
                reinterpret_cast<const char*>(&value) + kHead, n - kHead);
  }
}

// A zero-filled T (padding included) with struct_size = sizeof(T).
template <typename T>
T ZeroStruct() {
  T v;
  std::memset(&v, 0, sizeof(v));
  v.struct_size = sizeof(T);
  return v;
}

}  // namespace zero_capi

#endif  // ZERO_CAPI_ABI_STRUCT_H_

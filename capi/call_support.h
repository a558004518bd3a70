// What every call of the C ABI shares (zero_c.cc and the *_calls.cc files):
// the handles behind the opaque pointers, the thread-local message of
// zero_last_error, and the turning of absl::Status and C++ exceptions into
// zero_status codes. Internal to //capi:zero_c_impl.
#ifndef ZERO_CAPI_CALL_SUPPORT_H_
#define ZERO_CAPI_CALL_SUPPORT_H_

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <type_traits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/comm/communicator.h"
#include "core/common/dtype.h"
#include "core/common/progress.h"
#include "core/engine/engine.h"
#include "zero_c.h"

struct zero_comm_t {
  std::unique_ptr<zero::Communicator> comm;
};

struct zero_engine_t {
  std::unique_ptr<zero::Engine> engine;
};

namespace zero_capi {

// The message zero_last_error returns, one per thread (zero_c.cc). A
// function, not an extern variable: a thread_local variable shared between
// files would be exported from the library (//tests:abi_symbols_test).
std::string& LastError();

// `s` as a zero_status; its message becomes zero_last_error's (cleared on ok).
zero_status Report(const absl::Status& s);

// A struct_size refused by the rule of zero_c.h convention 3, as `call`'s
// error ("call: zero_stats: struct_size 8 is smaller than ...").
zero_status BadStruct(const char* call, const absl::Status& s);

// "call: what is NULL", ZERO_INVALID_ARGUMENT.
zero_status Null(const char* call, const char* what);

// Runs `f`, converting any escaping exception into a status.
template <typename F>
zero_status Guard(F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    LastError() = "out of memory";
    return ZERO_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    LastError() = absl::StrCat("internal error: ", e.what());
    return ZERO_INTERNAL;
  } catch (...) {
    LastError() = "internal error: unknown exception";
    return ZERO_INTERNAL;
  }
}

#define ZERO_CHECK_ARG(call, p) \
  if ((p) == nullptr) return ::zero_capi::Null(call, #p)

// A C enum's value as the integer the caller stored. A C caller may store
// any int in a zero_dtype; C++ loading one outside the enumerators' range as
// the enum type is undefined behaviour (UBSan's -fsanitize=enum), so every
// enum the caller hands in is read through its bytes and range-checked as an
// integer before it is used as the enum (//tests:enum_range_c_test).
template <typename E>
int64_t EnumValue(const E& e) {
  static_assert(std::is_enum<E>::value, "EnumValue reads enums");
  std::make_signed_t<std::underlying_type_t<E>> v;
  static_assert(sizeof v == sizeof e, "an enum's underlying type");
  std::memcpy(&v, &e, sizeof v);
  return v;
}

inline bool ValidDType(int64_t t) { return t >= ZERO_DTYPE_F32 && t <= ZERO_DTYPE_BF16; }

// Only after ValidDType.
inline zero::DType ToDType(int64_t t) { return static_cast<zero::DType>(t); }

// The C progress callback as the core's; empty when fn is null. A nonzero
// return cancels.
inline zero::ProgressCallback WrapProgress(zero_progress_fn fn, void* user) {
  if (fn == nullptr) return nullptr;
  return [fn, user](const char* what, int64_t done, int64_t total) {
    return fn(user, what, done, total) == 0;
  };
}

}  // namespace zero_capi

#endif  // ZERO_CAPI_CALL_SUPPORT_H_

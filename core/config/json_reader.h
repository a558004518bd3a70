// Reading DeepSpeed's JSON: the text parsed with comments allowed (`//`,
// `/* */` and `#`), and ObjectReader, which consumes one object's keys so
// that a key nobody read is an error naming its path. Internal to
// core/config (ds_config.cc).
#ifndef ZERO_CORE_CONFIG_JSON_READER_H_
#define ZERO_CORE_CONFIG_JSON_READER_H_

#include <cmath>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/status_macros.h"

namespace zero {
namespace config_internal {

using json = nlohmann::json;

// While set, every key path an ObjectReader looks up on this thread, present
// in the text or not (ParseDsConfigKeysRead). A function over a file-local
// thread_local: a TLS variable with external linkage stays in libzero_c's
// dynamic symbol table whatever its version script says.
std::set<std::string>*& KeysRead();

inline std::string Show(const json& v) {
  std::string s = v.dump();
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Reads the keys of one JSON object, remembering which were consumed so that
// Finish() can reject the rest (typos are errors, not silently ignored).
// Keys accepted without effect go to `no_effect` (Config::no_effect_keys).
class ObjectReader {
 public:
  ObjectReader(const json& obj, std::string path,
               std::vector<std::string>* no_effect)
      : obj_(obj), path_(std::move(path)), no_effect_(no_effect) {}

  static absl::StatusOr<ObjectReader> Make(const json& v, std::string path,
                                           std::vector<std::string>* no_effect) {
    if (!v.is_object()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path.empty() ? "config" : path,
                       ": expected an object, got ", Show(v)));
    }
    return ObjectReader(v, std::move(path), no_effect);
  }

  std::string Path(const std::string& key) const {
    return path_.empty() ? key : absl::StrCat(path_, ".", key);
  }

  const json* Find(const std::string& key) {
    seen_.insert(key);
    if (KeysRead() != nullptr) KeysRead()->insert(Path(key));
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  bool IsAuto(const json* v) const {
    return v && v->is_string() && v->get<std::string>() == "auto";
  }

  // Integers may arrive as JSON floats with integral values (5e8). Values
  // outside int64_t (1e30, 2^64 - 1) are range errors, never converted.
  absl::Status Int(const std::string& key, int64_t* out, int64_t lo,
                   int64_t hi, bool* is_auto = nullptr) {
    const json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (IsAuto(v) && is_auto) {
      *is_auto = true;
      return absl::OkStatus();
    }
    int64_t x;
    if (v->is_number_unsigned()) {
      if (v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return Bad(key, RangeText(lo, hi), *v, false);
      }
      x = static_cast<int64_t>(v->get<uint64_t>());
    } else if (v->is_number_integer()) {
      x = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()) {
      // [-2^63, 2^63): exactly the doubles that convert to int64_t.
      const double d = v->get<double>();
      if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) {
        return Bad(key, RangeText(lo, hi), *v, false);
      }
      x = static_cast<int64_t>(d);
    } else {
      return Bad(key, RangeText(lo, hi), *v, is_auto != nullptr);
    }
    if (x < lo || x > hi) return Bad(key, RangeText(lo, hi), *v, false);
    *out = x;
    return absl::OkStatus();
  }

  absl::Status Int(const std::string& key, int* out, int64_t lo, int64_t hi) {
    int64_t x = *out;
    RETURN_IF_ERROR(Int(key, &x, lo, hi));
    *out = static_cast<int>(x);
    return absl::OkStatus();
  }

  absl::Status Num(const std::string& key, double* out, double lo, double hi,
                   bool* is_auto = nullptr) {
    const json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (IsAuto(v) && is_auto) {
      *is_auto = true;
      return absl::OkStatus();
    }
    if (!v->is_number() || !(v->get<double>() >= lo && v->get<double>() <= hi)) {
      return Bad(key, absl::StrCat("a number in [", lo, ", ", hi, "]"), *v,
                 is_auto != nullptr);
    }
    *out = v->get<double>();
    return absl::OkStatus();
  }

  absl::Status Bool(const std::string& key, bool* out) {
    const json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (!v->is_boolean()) return Bad(key, "true or false", *v, false);
    *out = v->get<bool>();
    return absl::OkStatus();
  }

  absl::Status String(const std::string& key, std::string* out,
                      const std::vector<std::string>& allowed = {}) {
    const json* v = Find(key);
    if (!v) return absl::OkStatus();
    if (!v->is_string()) return Bad(key, "a string", *v, false);
    std::string s = v->get<std::string>();
    if (!allowed.empty()) {
      bool ok = false;
      for (const auto& a : allowed) ok |= absl::AsciiStrToLower(s) == a;
      if (!ok) {
        return Bad(key, absl::StrCat("one of ", absl::StrJoin(allowed, ", ")),
                   *v, false);
      }
      s = absl::AsciiStrToLower(s);
    }
    *out = s;
    return absl::OkStatus();
  }

  // Keys accepted for DeepSpeed compatibility that change nothing in zero
  // (docs/DEEPSPEED_COMPAT.md, "When a no-effect key is reported"). Each is
  // recorded in no_effect_keys when present with a value other than `inert`, the value
  // that describes what zero does anyway; a null `inert` means no value does,
  // and the key is recorded whenever present. The typed forms keep the type
  // and range checks these keys always had.
  void NoEffect(const std::string& key, const json& inert = json()) {
    const json* v = Find(key);
    if (v && (inert.is_null() || *v != inert)) Note(key);
  }

  absl::Status NoEffectBool(const std::string& key, bool inert) {
    bool b = inert;
    RETURN_IF_ERROR(Bool(key, &b));
    if (b != inert) Note(key);
    return absl::OkStatus();
  }

  absl::Status NoEffectInt(const std::string& key, int64_t lo, int64_t hi,
                           const json& inert = json()) {
    RETURN_IF_ERROR(Int(key, &scratch_int_, lo, hi));
    NoEffect(key, inert);
    return absl::OkStatus();
  }

  absl::Status NoEffectNum(const std::string& key, double lo, double hi,
                           const json& inert) {
    RETURN_IF_ERROR(Num(key, &scratch_num_, lo, hi));
    NoEffect(key, inert);
    return absl::OkStatus();
  }

  // A DeepSpeed feature block zero does not have: inert when {} or
  // "enabled": false, recorded otherwise (any contents, any type).
  void NoEffectBlock(const std::string& key) {
    const json* v = Find(key);
    if (!v) return;
    const bool off = v->is_object() &&
                     (v->empty() || (v->contains("enabled") &&
                                     (*v)["enabled"] == false));
    if (!off) Note(key);
  }

  // A key read elsewhere whose value (this one) has no effect.
  void Note(const std::string& key) {
    if (no_effect_) no_effect_->push_back(Path(key));
  }

  absl::Status Finish() const {
    for (auto it = obj_.begin(); it != obj_.end(); ++it) {
      if (!seen_.count(it.key())) {
        return absl::InvalidArgumentError(
            absl::StrCat(Path(it.key()), ": unknown key"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status Bad(const std::string& key, const std::string& expected,
                   const json& got, bool auto_ok) const {
    return absl::InvalidArgumentError(
        absl::StrCat(Path(key), ": expected ", expected,
                     auto_ok ? " or \"auto\"" : "", ", got ", Show(got)));
  }

 private:
  static std::string RangeText(int64_t lo, int64_t hi) {
    if (hi == INT64_MAX) return absl::StrCat("an integer >= ", lo);
    return absl::StrCat(lo, "..", hi);
  }

  const json& obj_;
  std::string path_;
  std::vector<std::string>* no_effect_;
  std::set<std::string> seen_;
  int64_t scratch_int_ = 0;
  double scratch_num_ = 0.0;
};

// Parses with comments allowed. Errors are InvalidArgument: syntax errors
// with their line and column; a number beyond a double (1e400) names the
// key path it was the value of.
absl::StatusOr<json> ParseJson(const std::string& text);

}  // namespace config_internal
}  // namespace zero

#endif  // ZERO_CORE_CONFIG_JSON_READER_H_

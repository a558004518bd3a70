#include "core/config/json_reader.h"

#include <map>

namespace zero {
namespace config_internal {

std::set<std::string>*& KeysRead() {
  static thread_local std::set<std::string>* keys_read = nullptr;
  return keys_read;
}

namespace {

// `#` line comments, as DeepSpeed users paste them: blanked to spaces
// outside strings, line breaks kept so parse errors keep their line and
// column. `//` and `/* */` are skipped over here (a quote or `#` inside them
// means nothing) and left to the parser's ignore_comments.
std::string BlankHashComments(std::string s) {
  enum { kCode, kString, kLine, kBlock } st = kCode;
  const size_t n = s.size();
  for (size_t i = 0; i < n; ++i) {
    const char ch = s[i];
    const char next = i + 1 < n ? s[i + 1] : '\0';
    switch (st) {
      case kCode:
        if (ch == '"') {
          st = kString;
        } else if (ch == '#') {
          for (; i < n && s[i] != '\n' && s[i] != '\r'; ++i) s[i] = ' ';
        } else if (ch == '/' && next == '/') {
          st = kLine;
          ++i;
        } else if (ch == '/' && next == '*') {
          st = kBlock;
          ++i;
        }
        break;
      case kString:
        if (ch == '\\') {
          ++i;
        } else if (ch == '"' || ch == '\n') {
          st = kCode;  // a raw line break ends it: invalid JSON, reported there
        }
        break;
      case kLine:
        if (ch == '\n' || ch == '\r') st = kCode;
        break;
      case kBlock:
        if (ch == '*' && next == '/') {
          st = kCode;
          ++i;
        }
        break;
    }
  }
  return s;
}

// The first key that appears twice in one object of `text` (valid JSON once
// comments are skipped), as "path: key 'k' appears twice (lines A and B)";
// "" when none does. nlohmann keeps the last of duplicates silently, so a
// second "zero_optimization" block would win unnoticed; DeepSpeed refuses
// such a file. A scan of its own, for the lines the parser does not report.
std::string FindDuplicateKey(const std::string& s) {
  struct Frame {
    bool object;
    std::map<std::string, int> keys;  // decoded key -> line
    std::string key;                  // the current member's key
    int64_t index = 0;                // arrays: the current element
  };
  std::vector<Frame> stack;
  bool expect_key = false;
  int line = 1;
  auto path = [&] {
    std::string out;
    for (const Frame& f : stack) {
      if (!f.object) {
        absl::StrAppend(&out, "[", f.index, "]");
      } else if (&f != &stack.back()) {
        absl::StrAppend(&out, out.empty() ? "" : ".", f.key);
      }
    }
    return out.empty() ? std::string("config") : out;
  };
  const size_t n = s.size();
  for (size_t i = 0; i < n; ++i) {
    const char ch = s[i];
    const char next = i + 1 < n ? s[i + 1] : '\0';
    if (ch == '\n') {
      ++line;
    } else if (ch == '/' && next == '/') {
      while (i + 1 < n && s[i + 1] != '\n') ++i;
    } else if (ch == '/' && next == '*') {
      for (i += 2; i + 1 < n && !(s[i] == '*' && s[i + 1] == '/'); ++i) line += s[i] == '\n';
      ++i;
    } else if (ch == '{' || ch == '[') {
      stack.push_back({ch == '{', {}, "", 0});
      expect_key = ch == '{';
    } else if (ch == '}' || ch == ']') {
      if (!stack.empty()) stack.pop_back();
      expect_key = false;
    } else if (ch == ',') {
      if (stack.empty()) continue;
      if (stack.back().object) {
        expect_key = true;
      } else {
        ++stack.back().index;
      }
    } else if (ch == '"') {
      const size_t start = i;
      for (++i; i < n && s[i] != '"'; ++i) i += s[i] == '\\';
      if (!expect_key || stack.empty()) continue;
      expect_key = false;
      std::string key = s.substr(start + 1, i - start - 1);
      try {  // escapes decoded as the parser decodes them ("\u0061" is "a")
        key = json::parse(s.substr(start, i - start + 1)).get<std::string>();
      } catch (const json::exception&) {
      }
      Frame& f = stack.back();
      f.key = key;
      auto [it, fresh] = f.keys.emplace(key, line);
      if (!fresh) {
        return absl::StrCat(path(), ": key '", key, "' appears twice in one object (lines ",
                            it->second, " and ", line,
                            "); DeepSpeed refuses duplicate keys (the parser would keep the last)");
      }
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<json> ParseJson(const std::string& text) {
  struct Frame {
    bool array;
    std::string key;
    int64_t index;
  };
  std::vector<Frame> stack;
  auto advance = [&] {
    if (!stack.empty() && stack.back().array) ++stack.back().index;
  };
  json::parser_callback_t track = [&](int, json::parse_event_t e, json& parsed) {
    switch (e) {
      case json::parse_event_t::object_start: stack.push_back({false, "", 0}); break;
      case json::parse_event_t::array_start: stack.push_back({true, "", 0}); break;
      case json::parse_event_t::key: stack.back().key = parsed.get<std::string>(); break;
      case json::parse_event_t::object_end:
      case json::parse_event_t::array_end:
        stack.pop_back();
        advance();
        break;
      case json::parse_event_t::value: advance(); break;
    }
    return true;
  };
  auto where = [&] {
    std::string path;
    for (const Frame& f : stack) {
      if (f.array) {
        absl::StrAppend(&path, "[", f.index, "]");
      } else if (!f.key.empty()) {
        absl::StrAppend(&path, path.empty() ? "" : ".", f.key);
      }
    }
    return path.empty() ? std::string("config") : path;
  };
  try {
    const std::string blanked = BlankHashComments(text);
    json parsed = json::parse(blanked, track, /*allow_exceptions=*/true,
                              /*ignore_comments=*/true);
    const std::string duplicate = FindDuplicateKey(blanked);
    if (!duplicate.empty()) return absl::InvalidArgumentError(duplicate);
    return parsed;
  } catch (const json::out_of_range& e) {
    // 406 "number overflow parsing '1e400'": the token is between quotes.
    std::string what = e.what();
    const size_t a = what.find('\''), b = what.rfind('\'');
    const std::string token = a != std::string::npos && b > a
                                  ? what.substr(a + 1, b - a - 1)
                                  : what;
    return absl::InvalidArgumentError(absl::StrCat(
        where(), ": expected a number within the range of a double, got ", token));
  } catch (const json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config: invalid JSON: ", e.what()));
  }
}

}  // namespace config_internal
}  // namespace zero

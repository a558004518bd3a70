#include "core/config/json_reader.h"

namespace zero {
namespace config_internal {
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
    return json::parse(BlankHashComments(text), track, /*allow_exceptions=*/true,
                       /*ignore_comments=*/true);
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

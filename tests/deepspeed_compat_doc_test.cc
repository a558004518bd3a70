// docs/DEEPSPEED_COMPAT.md against ParseDsConfig: every key the doc's tables
// list is classified by the parser as its status says, and every key the
// parser reads is listed in a table.
//
// The table format this test reads (a new row or table follows it):
// - A table's first column is "key"; its keys are the object named by the
//   header's "key (`path`)" or else by the section heading: "## Top level"
//   (and any heading without a key name) is the top level, "## fp16" is fp16,
//   "### offload_param (stage 3)" under "## zero_optimization" is
//   zero_optimization.offload_param. "(alias `x`)" in a heading: the same
//   keys under x. Columns named "... default" hold the defaults.
// - The key cell names its keys in backticks (aliases too); an optimizer or
//   scheduler type named in it, or in the status before the first ";", is
//   the type the keys are tried with (the types are those the section's
//   "`type`, ...: `A`, `B` take effect" paragraph lists).
// - The status begins with one of
//     "takes effect"      the parser accepts the key and does not report it;
//     "no effect"         accepted and reported ("reported: always"), or
//                         "reported unless `v`" (or `v` or `w`): not
//                         reported with v, reported with another value;
//     "refused when `v`"  v is an error naming the key path.
// A value tried for a key is the first the parser accepts among: the default
// columns, the values in backticks in the status, then {}, {"enabled":
// true}, true, 1, 0.5, "auto".
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "core/config/config.h"

namespace zero {
namespace {

using json = nlohmann::json;

// In two pieces: //tests:doc_references_test takes a quoted string after a
// doc's file name for a cited section.
std::string DocPath() { return absl::StrCat("docs/DEEPSPEED_COMPAT", ".md"); }

enum class Status { kEffect, kNoEffect, kRefused };

struct Row {
  int line = 0;
  std::string section;  // the object's path ("" = top level)
  std::vector<std::string> keys;
  std::string key_rest;  // the key cell without its backticked names
  std::vector<std::string> defaults;
  std::string status;
};

struct Doc {
  std::vector<Row> rows;
  std::set<std::string> sections;                             // table paths
  std::map<std::string, std::vector<std::string>> aliases;    // bf16 -> bfloat16
  std::map<std::string, std::vector<std::string>> types;      // optimizer -> Adam, ...
};

std::vector<std::string> Backticked(const std::string& s) {
  std::vector<std::string> out;
  for (size_t a = s.find('`'); a != std::string::npos; a = s.find('`', a + 1)) {
    const size_t b = s.find('`', a + 1);
    if (b == std::string::npos) break;
    out.push_back(s.substr(a + 1, b - a - 1));
    a = b;
  }
  return out;
}

// A table row's cells; "\|" inside a cell is not a separator.
std::vector<std::string> Cells(const std::string& line) {
  std::vector<std::string> cells;
  std::string cur;
  for (size_t i = 1; i < line.size(); ++i) {
    if (line[i] == '\\' && i + 1 < line.size() && line[i + 1] == '|') {
      cur += '|';
      ++i;
    } else if (line[i] == '|') {
      cells.push_back(std::string(absl::StripAsciiWhitespace(cur)));
      cur.clear();
    } else {
      cur += line[i];
    }
  }
  return cells;
}

// The key a heading names ("offload_param (stage 3)" -> offload_param), or
// "" when its first word is not a key name ("Top level", "zero's own keys").
std::string HeadingKey(const std::string& heading) {
  const std::string word = heading.substr(0, heading.find(' '));
  if (heading == "Top level" || word.empty()) return "";
  for (char ch : word) {
    if (!(std::islower(static_cast<unsigned char>(ch)) ||
          std::isdigit(static_cast<unsigned char>(ch)) || ch == '_')) {
      return "";
    }
  }
  return word;
}

std::string Join(const std::string& a, const std::string& b) {
  return a.empty() ? b : b.empty() ? a : absl::StrCat(a, ".", b);
}

Doc ReadDoc() {
  std::ifstream in(DocPath());
  EXPECT_TRUE(in) << "cannot open " << DocPath();
  Doc doc;
  std::string line, h2, h3, table, para;
  std::vector<std::string> header;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (absl::StartsWith(line, "# ")) {
      h2 = h3 = "";
    } else if (absl::StartsWith(line, "## ")) {
      h2 = HeadingKey(line.substr(3));
      h3 = "";
      if (absl::StrContains(line, "alias")) doc.aliases[h2] = Backticked(line);
    } else if (absl::StartsWith(line, "### ")) {
      h3 = HeadingKey(line.substr(4));
      if (absl::StrContains(line, "alias")) doc.aliases[Join(h2, h3)] = Backticked(line);
    }
    // The paragraph "`type`...: `A`, `B` take effect" lists the types.
    para = line.empty() ? "" : para.empty() ? line : absl::StrCat(para, " ", line);
    if (absl::StartsWith(para, "`type`") && absl::StrContains(para, "take effect") &&
        !doc.types.count(h2)) {
      for (const std::string& t : Backticked(para.substr(0, para.find("take effect")))) {
        if (t != "type") doc.types[h2].push_back(t);
      }
    }
    if (!absl::StartsWith(line, "|")) {
      header.clear();
      continue;
    }
    std::vector<std::string> cells = Cells(line);
    if (header.empty()) {
      header = cells;
      const std::vector<std::string> named = Backticked(cells[0]);
      table = named.empty() ? Join(h2, h3) : named[0];
      doc.sections.insert(table);
      continue;
    }
    if (absl::StartsWith(cells[0], "---")) continue;
    EXPECT_EQ(cells.size(), header.size()) << DocPath() << ":" << n << ": cells";
    if (cells.size() != header.size()) continue;
    Row row;
    row.line = n;
    row.section = table;
    row.keys = Backticked(cells[0]);
    row.key_rest = cells[0];
    for (const std::string& k : row.keys) {
      absl::StrReplaceAll({{absl::StrCat("`", k, "`"), ""}}, &row.key_rest);
    }
    for (size_t i = 1; i < header.size(); ++i) {
      if (absl::StrContains(absl::AsciiStrToLower(header[i]), "default")) {
        row.defaults.push_back(cells[i]);
      } else if (header[i] == "status") {
        row.status = cells[i];
      }
    }
    EXPECT_FALSE(row.keys.empty()) << DocPath() << ":" << n << ": no key in backticks";
    doc.rows.push_back(row);
  }
  return doc;
}

// The first type the key cell, or else the status's first clause, names.
std::string TypeFor(const Doc& doc, const Row& row, const std::string& root,
                    const std::string& fallback) {
  auto it = doc.types.find(root);
  if (it == doc.types.end()) return "";
  for (const std::string& text :
       {row.key_rest, row.status.substr(0, row.status.find(';'))}) {
    size_t best = std::string::npos;
    std::string found;
    for (const std::string& t : it->second) {
      for (size_t p = text.find(t); p != std::string::npos; p = text.find(t, p + 1)) {
        const size_t end = p + t.size();
        const bool word = (p == 0 || !std::isalnum(static_cast<unsigned char>(text[p - 1]))) &&
                          (end == text.size() ||
                           !std::isalnum(static_cast<unsigned char>(text[end])));
        if (word && p < best) {
          best = p;
          found = t;
        }
      }
    }
    if (!found.empty()) return found;
  }
  return fallback;
}

// What a key needs beside it to be read: the section's type, the scheduler's
// required total, a stage that has the key, zero_trace's path.
void AddSiblings(json* root, const std::string& section, const std::string& key,
                 const std::string& type) {
  auto put = [&](const std::string& path, const std::string& k, const json& v) {
    json& obj = (*root)[json::json_pointer("/" + absl::StrReplaceAll(path, {{".", "/"}}))];
    if (!obj.contains(k)) obj[k] = v;
  };
  const std::string root_key = section.substr(0, section.find('.'));
  if (root_key == "optimizer") put("optimizer", "type", type);
  if (root_key == "scheduler") {
    put("scheduler", "type", type);
    if (type != "WarmupLR" && key != "total_num_steps") put("scheduler.params", "total_num_steps", 10);
  }
  if (root_key == "zero_optimization" && !(section == "zero_optimization" && key == "stage")) {
    put("zero_optimization", "stage", section == "zero_optimization" ? 2 : 3);
  }
  if (root_key == "zero_trace" && key != "path") put("zero_trace", "path", "trace.json");
}

struct Outcome {
  bool ok = false;
  bool reported = false;
  std::string error;
};

// ParseDsConfig of `value` (JSON text) for `key` in `section`, with what it
// needs beside it; error "not JSON" when the text is no JSON value.
Outcome Try(const std::string& section, const std::string& key, const std::string& value,
            const std::string& type) {
  Outcome out;
  json v = json::parse(value, nullptr, false);
  if (v.is_discarded()) {
    out.error = "not JSON";
    return out;
  }
  json root = json::object();
  const std::string ptr =
      "/" + absl::StrReplaceAll(Join(section, key), {{".", "/"}});
  root[json::json_pointer(ptr)] = v;
  AddSiblings(&root, section, key, type);
  auto c = ParseDsConfig(root.dump());
  out.ok = c.ok();
  if (!c.ok()) {
    out.error = std::string(c.status().message());
    return out;
  }
  const std::string path = Join(section, key);
  out.reported = std::find(c->no_effect_keys.begin(), c->no_effect_keys.end(), path) !=
                 c->no_effect_keys.end();
  return out;
}

// A cell or backticked token as JSON text: `"enabled": false` is an object.
std::string AsJson(std::string s) {
  s = std::string(absl::StripAsciiWhitespace(absl::StrReplaceAll(s, {{"`", ""}})));
  if (!s.empty() && s[0] != '{' && absl::StrContains(s, "\":")) {
    return "{" + s + "}";
  }
  return s;
}

// Values to try for a row's key: the defaults (the whole cell, then its first
// word), the status's backticked values, then generic ones.
std::vector<std::string> Candidates(const Row& row) {
  std::vector<std::string> out;
  for (const std::string& d : row.defaults) {
    out.push_back(AsJson(d));
    out.push_back(AsJson(d.substr(0, d.find(' '))));
  }
  for (const std::string& t : Backticked(row.status)) out.push_back(AsJson(t));
  for (const char* g : {"{}", "{\"enabled\": true}", "true", "1", "0.5", "\"auto\""}) {
    out.push_back(g);
  }
  return out;
}

// The values after "reported unless " (`a` or `b`), or after "refused when "
// (a backticked value or a bare word).
std::vector<std::string> ValuesAfter(const std::string& status, const std::string& lead) {
  std::vector<std::string> out;
  size_t p = status.find(lead);
  if (p == std::string::npos) return out;
  p += lead.size();
  while (p < status.size()) {
    if (status[p] == '`') {
      const size_t e = status.find('`', p + 1);
      if (e == std::string::npos) break;
      out.push_back(AsJson(status.substr(p + 1, e - p - 1)));
      p = e + 1;
    } else if (out.empty()) {  // a bare word: true, false
      size_t e = p;
      while (e < status.size() && std::isalnum(static_cast<unsigned char>(status[e]))) ++e;
      if (e > p) out.push_back(status.substr(p, e - p));
      break;
    }
    if (status.compare(p, 4, " or ") != 0) break;
    p += 4;
  }
  return out;
}

Status Classify(const Row& row, const std::string& where) {
  const std::string s = absl::AsciiStrToLower(row.status);
  if (absl::StartsWith(s, "takes effect")) return Status::kEffect;
  if (absl::StartsWith(s, "no effect")) return Status::kNoEffect;
  if (absl::StartsWith(s, "refused")) return Status::kRefused;
  ADD_FAILURE() << where << ": the status begins with neither \"takes effect\", \"no effect\" "
                << "nor \"refused\": " << row.status.substr(0, 80);
  return Status::kEffect;
}

// Every other value than the inert ones that the parser accepts.
std::vector<std::string> NonInert(const Row& row, const std::vector<std::string>& inert) {
  std::vector<std::string> out;
  for (const std::string& v : inert) {
    double d;
    if (v == "true") out.push_back("false");
    if (v == "false") out.push_back("true");
    if (absl::SimpleAtod(v, &d)) {
      for (double x : {d + 1, d / 2, d - 1, 0.0}) out.push_back(absl::StrCat(x));
    }
  }
  for (const std::string& c : Candidates(row)) out.push_back(c);
  std::vector<std::string> unique;
  for (const std::string& c : out) {
    if (std::find(inert.begin(), inert.end(), c) == inert.end() &&
        std::find(unique.begin(), unique.end(), c) == unique.end()) {
      unique.push_back(c);
    }
  }
  return unique;
}

void CheckKey(const Doc& doc, const Row& row, const std::string& section,
              const std::string& key) {
  const std::string root = section.substr(0, section.find('.'));
  const std::string type =
      TypeFor(doc, row, root, root == "optimizer" ? "AdamW" : "WarmupDecayLR");
  const std::string path = Join(section, key);
  const std::string where = absl::StrCat(DocPath(), ":", row.line, ": ", path);
  auto first_ok = [&](const std::vector<std::string>& values, std::string* used) {
    std::vector<std::string> errors;
    for (const std::string& v : values) {
      Outcome o = Try(section, key, v, type);
      if (o.ok) {
        *used = v;
        return o;
      }
      if (o.error != "not JSON") errors.push_back(v + " -> " + o.error);
    }
    ADD_FAILURE() << where << ": the parser accepts none of the values tried: "
                  << absl::StrJoin(errors, "; ");
    return Outcome{};
  };
  std::string used;
  switch (Classify(row, where)) {
    case Status::kEffect: {
      // Every value tried, the defaults' neighbours too (a no-effect key is
      // silent at its inert value, usually the default).
      std::vector<std::string> defaults;
      for (const std::string& d : row.defaults) defaults.push_back(AsJson(d));
      first_ok(Candidates(row), &used);
      for (const std::string& v : NonInert(row, defaults)) {
        Outcome o = Try(section, key, v, type);
        EXPECT_FALSE(o.ok && o.reported)
            << where << ": documented as taking effect, reported as without effect with " << v;
      }
      break;
    }
    case Status::kNoEffect: {
      const std::string s = row.status;
      if (absl::StrContains(s, "reported: always")) {
        Outcome o = first_ok(Candidates(row), &used);
        EXPECT_TRUE(!o.ok || o.reported)
            << where << ": documented as reported always, not reported with " << used;
        break;
      }
      const std::vector<std::string> inert = ValuesAfter(s, "reported unless ");
      ASSERT_FALSE(inert.empty())
          << where << ": a no-effect status says \"reported: always\" or "
          << "\"reported unless `value`\"";
      for (const std::string& v : inert) {
        Outcome o = Try(section, key, v, type);
        EXPECT_TRUE(o.ok) << where << ": the inert value " << v << " is refused: " << o.error;
        EXPECT_FALSE(o.reported) << where << ": reported with its inert value " << v;
      }
      Outcome o = first_ok(NonInert(row, inert), &used);
      EXPECT_TRUE(!o.ok || o.reported) << where << ": not reported with " << used
                                       << " (inert: " << absl::StrJoin(inert, ", ") << ")";
      break;
    }
    case Status::kRefused: {
      const std::vector<std::string> bad = ValuesAfter(row.status, "refused when ");
      ASSERT_FALSE(bad.empty()) << where << ": a refused status says \"refused when `value`\"";
      Outcome o = Try(section, key, bad[0], type);
      EXPECT_FALSE(o.ok) << where << ": documented as refused with " << bad[0] << ", accepted";
      EXPECT_TRUE(o.ok || absl::StrContains(o.error, path))
          << where << ": the error does not name the key: " << o.error;
      break;
    }
  }
}

class DeepSpeedCompatDocTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { doc_ = new Doc(ReadDoc()); }
  static const Doc* doc_;
};
const Doc* DeepSpeedCompatDocTest::doc_ = nullptr;

TEST_F(DeepSpeedCompatDocTest, TablesHaveTheKeysAndTypes) {
  EXPECT_GT(doc_->rows.size(), 100u);
  for (const char* s : {"", "fp16", "bf16", "optimizer.params", "scheduler.params",
                        "zero_optimization", "zero_optimization.offload_optimizer",
                        "zero_optimization.offload_param", "aio", "checkpoint"}) {
    EXPECT_TRUE(doc_->sections.count(s)) << "no table for \"" << s << "\"";
  }
  EXPECT_FALSE(doc_->types.count("optimizer") == 0 || doc_->types.at("optimizer").empty());
  EXPECT_FALSE(doc_->types.count("scheduler") == 0 || doc_->types.at("scheduler").empty());
}

// Each documented key, under its section and the section's aliases, is
// classified by ParseDsConfig as its status says.
TEST_F(DeepSpeedCompatDocTest, EveryDocumentedKeyHasItsStatus) {
  for (const Row& row : doc_->rows) {
    std::vector<std::string> sections = {row.section};
    auto a = doc_->aliases.find(row.section);
    if (a != doc_->aliases.end()) sections.insert(sections.end(), a->second.begin(), a->second.end());
    for (const std::string& section : sections) {
      for (const std::string& key : row.keys) CheckKey(*doc_, row, section, key);
    }
  }
}

// Every key the parser reads, under every optimizer and scheduler type the
// doc lists, with every documented section present, is in a table (or is a
// section, or a section's `type`); and every key in a table is read.
TEST_F(DeepSpeedCompatDocTest, EveryKeyTheParserReadsIsDocumented) {
  std::set<std::string> documented = doc_->sections;
  for (const Row& row : doc_->rows) {
    std::vector<std::string> sections = {row.section};
    auto a = doc_->aliases.find(row.section);
    if (a != doc_->aliases.end()) sections.insert(sections.end(), a->second.begin(), a->second.end());
    for (const std::string& s : sections) {
      for (const std::string& k : row.keys) documented.insert(Join(s, k));
    }
  }
  for (const auto& [section, names] : doc_->aliases) {
    for (const std::string& n : names) documented.insert(n);
  }
  for (const auto& [section, names] : doc_->types) documented.insert(Join(section, "type"));
  std::set<std::string> prefixes;
  for (const std::string& d : documented) {
    for (size_t p = d.find('.'); p != std::string::npos; p = d.find('.', p + 1)) {
      prefixes.insert(d.substr(0, p));
    }
  }
  const std::vector<std::string>& opts = doc_->types.at("optimizer");
  const std::vector<std::string>& scheds = doc_->types.at("scheduler");
  std::set<std::string> read;
  for (size_t i = 0; i < std::max(opts.size(), scheds.size()); ++i) {
    json root = json::object();
    for (const std::string& s : doc_->sections) {
      if (s.empty()) continue;
      root[json::json_pointer("/" + absl::StrReplaceAll(s, {{".", "/"}}))] = json::object();
    }
    for (const auto& [section, names] : doc_->aliases) {
      for (const std::string& n : names) root[n] = json::object();
    }
    AddSiblings(&root, "optimizer.params", "", opts[i % opts.size()]);
    AddSiblings(&root, "scheduler.params", "", scheds[i % scheds.size()]);
    AddSiblings(&root, "zero_optimization.offload_param", "", "");
    AddSiblings(&root, "zero_trace", "", "");
    auto c = ParseDsConfigKeysRead(root.dump(), &read);
    EXPECT_TRUE(c.ok()) << root.dump() << ": " << c.status();
  }
  for (const std::string& k : read) {
    EXPECT_TRUE(documented.count(k) || prefixes.count(k))
        << k << ": the parser reads it; " << DocPath() << " lists it in no table";
  }
  for (const std::string& k : documented) {
    if (k.empty() || prefixes.count(k)) continue;
    EXPECT_TRUE(read.count(k)) << k << ": " << DocPath() << " lists it; the parser does not read it";
  }
}

}  // namespace
}  // namespace zero

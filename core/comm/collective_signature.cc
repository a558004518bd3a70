#include "core/comm/collective_signature.h"

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/common/dtype.h"

namespace zero {

const char* SignedOpName(int64_t op) {
  static const char* const kNames[] = {"all-gather",      "reduce-scatter", "reduce-scatter",
                                       "all-reduce",      "all-reduce",     "all-reduce",
                                       "broadcast",       "barrier",        "all-to-all",
                                       "call entry"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<int>(SignedOp::kCount),
                "one name per SignedOp");
  if (op < 0 || op >= static_cast<int64_t>(SignedOp::kCount)) return "?";
  return kNames[op];
}

void StampCallSite(CollectiveSignature* s) {
  const CallSite& c = CurrentCallSite();
  s->call = static_cast<int64_t>(c.call);
  s->step = c.step;
  s->micro = c.micro;
  s->param = c.param;
  s->nparams = c.nparams;
  s->ids_hash = static_cast<int64_t>(c.ids_hash);
  s->bucket = c.bucket;
  s->deferrable = c.deferrable ? 1 : 0;
}

namespace {

const char* Verb(int64_t op) {
  switch (static_cast<SignedOp>(op)) {
    case SignedOp::kAllGather: return "all-gathers";
    case SignedOp::kReduceScatter:
    case SignedOp::kReduceScatterHalf: return "reduce-scatters";
    case SignedOp::kAllReduceHalf:
    case SignedOp::kAllReduceF32:
    case SignedOp::kAllReduceF64: return "all-reduces";
    case SignedOp::kBroadcast: return "broadcasts";
    case SignedOp::kBarrier: return "waits at a barrier";
    case SignedOp::kAllToAll: return "exchanges (all-to-all)";
    case SignedOp::kCallEntry: return "enters";
    default: return "runs an unknown collective";
  }
}

std::string ElementText(const CollectiveSignature& s) {
  const auto op = static_cast<SignedOp>(s.op);
  if (op == SignedOp::kBarrier || op == SignedOp::kCallEntry) return "";
  if (op == SignedOp::kBroadcast) return absl::StrCat(s.elems, " bytes from rank ", s.root);
  std::string t = "elements";
  if (op == SignedOp::kAllReduceF32) t = "fp32";
  if (op == SignedOp::kAllReduceF64) t = "fp64";
  if (s.dtype >= 0 && s.dtype <= 2) t = DTypeName(static_cast<DType>(s.dtype));
  return absl::StrCat(s.elems, " ", t);
}

std::string Where(const CollectiveSignature& s) {
  std::string w = absl::StrCat(s.op == static_cast<int64_t>(SignedOp::kCallEntry) ? "" : "in ",
                               ApiCallName(s.call));
  if (s.step >= 0) absl::StrAppend(&w, ", step ", s.step, ", micro-step ", s.micro);
  return w;
}

}  // namespace

std::string DescribeCollective(const CollectiveSignature& s, const ParamNamer& name) {
  std::string what;
  if (s.param >= 0) {
    std::string n = name ? name(s.param) : "";
    if (n.empty()) n = absl::StrCat("param #", s.param);
    what = absl::StrCat(s.bucket >= 0 ? absl::StrCat("gradient bucket ", s.bucket, " (") : "",
                        "'", n, "'", s.nparams > 1 ? absl::StrCat(" and ", s.nparams - 1,
                                                                 " more") : "",
                        s.bucket >= 0 ? ")" : "");
  }
  const std::string elems = ElementText(s);
  std::string out = Verb(s.op);
  if (!what.empty()) absl::StrAppend(&out, " ", what);
  if (!elems.empty()) absl::StrAppend(&out, what.empty() ? " " : " (", elems,
                                      what.empty() ? "" : ")");
  absl::StrAppend(&out, " ", Where(s));
  return out;
}

bool SignaturesAgree(const CollectiveSignature& a, const CollectiveSignature& b) {
  if (a.seq != b.seq || a.op != b.op || a.dtype != b.dtype || a.root != b.root ||
      a.call != b.call || a.step != b.step || a.micro != b.micro || a.param != b.param ||
      a.nparams != b.nparams || a.ids_hash != b.ids_hash || a.bucket != b.bucket) {
    return false;
  }
  // An all-to-all's counts are each rank's own (what it sends to whom).
  if (a.op == static_cast<int64_t>(SignedOp::kAllToAll)) return true;
  return a.elems == b.elems && a.counts_hash == b.counts_hash;
}

bool DeferrableDivergence(const std::vector<CollectiveSignature>& all) {
  for (const CollectiveSignature& s : all) {
    if (s.deferrable != 1 || s.seq != all[0].seq || s.step != all[0].step ||
        s.micro != all[0].micro) {
      return false;
    }
  }
  return true;
}

std::string DivergenceMessage(const std::vector<CollectiveSignature>& all,
                              const std::string& comm_name, const ParamNamer& name) {
  // Ranks with the same side share one description.
  std::vector<std::pair<std::string, std::vector<int>>> sides;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    const std::string d = DescribeCollective(all[r], name);
    bool found = false;
    for (auto& [text, ranks] : sides) {
      if (text == d) {
        ranks.push_back(r);
        found = true;
      }
    }
    if (!found) sides.push_back({d, {r}});
  }
  std::vector<std::string> parts;
  for (const auto& [text, ranks] : sides) {
    parts.push_back(absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ",
                                 absl::StrJoin(ranks, ", "), " ", text));
  }
  std::string msg = absl::StrCat("ranks diverged at collective ", all[0].seq, " of the engine's ",
                                 comm_name, " communicator: ", absl::StrJoin(parts, "; "), ". ");
  std::set<int64_t> calls, steps, micros;
  for (const CollectiveSignature& s : all) {
    calls.insert(s.call);
    steps.insert(s.step);
    micros.insert(s.micro);
  }
  if (calls.size() > 1) {
    std::vector<std::string> names;
    for (int64_t c : calls) {
      if (c != static_cast<int64_t>(ApiCall::kNone)) names.push_back(ApiCallName(c));
    }
    absl::StrAppend(&msg, "Different engine calls met (", absl::StrJoin(names, ", "),
                    "): each of them is collective and must be made on every rank, in the "
                    "same order (a call made on some ranks only, such as a save or a "
                    "state_dict on rank 0 alone, must be made on every rank)");
  } else if (steps.size() > 1) {
    absl::StrAppend(&msg, "The ranks are at different steps: every rank must call step() "
                    "the same number of times (a rank with fewer batches must still take "
                    "part in each step)");
  } else if (micros.size() > 1) {
    absl::StrAppend(&msg, "The ranks are at different micro-steps of the accumulation: every "
                    "rank must run the same number of micro-steps");
  } else {
    absl::StrAppend(&msg, "The ranks reached different params or sizes in the same call: a "
                    "module or param used on some ranks only (a skipped expert or branch); "
                    "every rank must gather the same params and hand in the same gradients "
                    "in the same order");
  }
  absl::StrAppend(&msg, " (README.md, \"When ranks disagree\"). This engine refuses further "
                  "calls");
  return msg;
}

}  // namespace zero

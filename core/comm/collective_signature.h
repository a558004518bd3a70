// What one rank is about to do in a collective, in a fixed number of bytes
// (docs/ARCHITECTURE.md, "When ranks disagree"): the checked communicator
// all-gathers it before the data moves, so ranks that would pair different
// collectives (other sizes, other params, other engine calls or steps) find
// out from an exchange that always pairs up, and fail alike with a message
// naming each rank's side.
#ifndef ZERO_CORE_COMM_COLLECTIVE_SIGNATURE_H_
#define ZERO_CORE_COMM_COLLECTIVE_SIGNATURE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/comm/call_site.h"

namespace zero {

// Fixed values: ranks compare them as numbers.
enum class SignedOp : int64_t {
  kAllGather = 0,
  kReduceScatter = 1,
  kReduceScatterHalf = 2,
  kAllReduceHalf = 3,
  kAllReduceF32 = 4,
  kAllReduceF64 = 5,
  kBroadcast = 6,
  kBarrier = 7,
  kAllToAll = 8,
  kCallEntry = 9,  // no data: ranks check they enter the same collective call
  kCount = 10
};
const char* SignedOpName(int64_t op);

// 16 int64 (128 bytes), exchanged as they lie in memory.
struct CollectiveSignature {
  int64_t seq = 0;          // collective number on this communicator, from 1
  int64_t op = 0;           // SignedOp
  int64_t elems = 0;        // elements moved (broadcast: bytes)
  int64_t counts_hash = 0;  // the per-rank counts (v-collectives)
  int64_t dtype = -1;       // DType; -1 none
  int64_t root = -1;        // broadcast root, or the reduce op
  int64_t call = 0;         // ApiCall
  int64_t step = -1, micro = -1;
  int64_t param = -1, nparams = 0;
  int64_t ids_hash = 0;
  int64_t bucket = -1;
  int64_t comm = 0;  // which communicator of the engine (0: the data one)
  int64_t deferrable = 0;  // CallSite::deferrable
  int64_t reserved = 0;
};
static_assert(sizeof(CollectiveSignature) == 128, "fixed size on every rank");

// Fills the call-site fields from this thread's CallSite.
void StampCallSite(CollectiveSignature* s);

// Names a param id ("" when unknown).
using ParamNamer = std::function<std::string(int64_t)>;

// "all-gathers 'experts.1.weight' (1000 fp16 elements) in gather, step 3,
// micro-step 0"; the collective number is not included.
std::string DescribeCollective(const CollectiveSignature& s, const ParamNamer& name);

// Whether ranks may go on pairing a and b (every field that decides the
// data or the meaning agrees).
bool SignaturesAgree(const CollectiveSignature& a, const CollectiveSignature& b);

// Whether the ranks' differing signatures are all deferrable gradient
// reductions of the same step and micro-step (CallSite::deferrable).
bool DeferrableDivergence(const std::vector<CollectiveSignature>& all);

// The error every rank reports when `all` (one per rank, in rank order)
// disagree: each distinct side with its ranks, and what the user must make
// the same on every rank. `comm_name` names the communicator.
std::string DivergenceMessage(const std::vector<CollectiveSignature>& all,
                              const std::string& comm_name, const ParamNamer& name);

}  // namespace zero

#endif  // ZERO_CORE_COMM_COLLECTIVE_SIGNATURE_H_

// The sums the MPI communicator computes itself instead of handing to an
// MPI collective, each in the order that gives the bits every fp32 result
// recorded so far has: the fp16 / bf16 MPI_Op, the reduce-scatter as one
// exchange of pieces summed in libnbc's order, and the two-rank ring
// all-reduce (bench/README.md, "The reduce-scatter at 3+ ranks" and
// "Collectives on the calling thread").
#ifndef ZERO_CORE_COMM_MPI_SUM_ALGORITHMS_H_
#define ZERO_CORE_COMM_MPI_SUM_ALGORITHMS_H_

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <mutex>
#include <vector>

#include "core/comm/mpi_arrival_gate.h"
#include "core/common/dtype.h"

namespace zero {

// MPI_SUM's place for fp16 / bf16 elements (sent as MPI_UINT16_T bits):
// each partial sum is computed in fp32 and rounded to the format.
MPI_Op HalfSum(DType t);

// Sums the W pieces of `n` floats (`piece[r]`: rank r's) into `out` in
// the order of libnbc's reduce-scatter (OpenMPI 4.1, nbc_ireduce_scatter*.c:
// a binomial reduce to rank 0, then a scatter): in round k = 1, 2, ...,
// every rank a with a % 2^k == 0 adds in what rank a + 2^(k-1) holds, if
// there is one; rank 0 ends with the sum. So at 4 ranks (p0 + p1) + (p2 +
// p3), at 3 (p0 + p1) + p2: fp32 addition commutes, so only this grouping
// decides the bits. Partial sums overwrite the pieces in the caller's
// scratch; `piece[own]` (the caller's send buffer) is never written: its
// partial sums go to `out`, as does the last round's.
void TreeSumInto(std::vector<const float*> piece, int own, size_t n, float* out);

// What the hand-written sums keep on one communicator between calls: the
// exchange's receive buffer (W - 1 pieces) and its requests; the pair
// all-reduce takes the same buffer (for doubles a buffer of its own). The
// communicator is a duplicate only collectives use (no other point-to-point
// traffic), so one tag serves both.
struct SumScratch {
  static constexpr int kExchangeTag = 7301;
  std::vector<float> f32;
  std::vector<double> f64;
  std::vector<MPI_Request> reqs;
  std::vector<const float*> piece;  // the exchange's W pieces, own included

  template <typename T>
  std::vector<T>& For();
};
template <>
std::vector<float>& SumScratch::For<float>();
template <>
std::vector<double>& SumScratch::For<double>();

// The fp32 reduce-scatter as one exchange of the pieces (each rank sends
// piece q to rank q) into `scratch`, then the sums here, in libnbc's order
// (TreeSumInto): the same bits as MPI_Ireduce_scatter(_block), which
// reduces the whole vector to rank 0 along a binomial tree and scatters it.
// libnbc allocated a temporary of the whole vector per call, which with a
// fixed mmap threshold was fresh pages every time: a page fault per 4 KiB
// received and an munmap, a quarter of the comm stream's CPU at stage 3 at
// 2 ranks and two fifths at 4 (bench/README.md, "Stage 3's runtime threads"
// and "The reduce-scatter at 3+ ranks"). One round instead of log2(W) + 1
// also leaves fewer waits on a peer that has no core.
//
// PostPieceExchange posts the sends and receives (`c`, `d`: counts and
// displacements) into scratch->reqs, which the caller completes (with its
// timeout), then SumExchangedPieces writes this rank's sum to `recv`.
// Returns an MPI code; on failure posted requests stay posted.
int PostPieceExchange(MPI_Comm comm, int rank, int world, const float* send,
                      const std::vector<int>& c, const std::vector<int>& d,
                      SumScratch* scratch);
void SumExchangedPieces(int rank, size_t n, float* recv, SumScratch* scratch);

// Two ranks: the sum all-reduce on the calling thread as the ring a 2-rank
// tuned MPI_Allreduce runs: each rank receives the peer's copy of its half
// into the scratch and adds it, then the summed halves are swapped. Every
// element is one addition of the two ranks' values, computed once: the
// bits of any 2-rank sum (addition commutes), without the hand-off to the
// worker (3-8 us a call) or libnbc's slower all-reduce. With `gate`,
// arrival is gated with the first exchange (WaitArrivedAndDone). `serial`,
// `deadline` and the result as WaitArrivedAndDone's (MPI_SUCCESS, an MPI
// code, or kArrivalTimedOut).
template <typename T>
int PairAllReduce(MPI_Comm comm, int rank, T* data, int count, MPI_Datatype t, bool gate,
                  std::chrono::steady_clock::time_point deadline, std::mutex* serial,
                  const ArrivalGateOptions& options, SumScratch* scratch);

}  // namespace zero

#endif  // ZERO_CORE_COMM_MPI_SUM_ALGORITHMS_H_

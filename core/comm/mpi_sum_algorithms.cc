#include "core/comm/mpi_sum_algorithms.h"

#include <algorithm>
#include <cstdint>

#include "kernels/cast_math.h"

namespace zero {
namespace {

void SumF16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = math::FloatToHalf(math::HalfToFloat(a[i]) + math::HalfToFloat(b[i]));
  }
}
void SumBf16(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    b[i] = math::FloatToBf16(math::Bf16ToFloat(a[i]) + math::Bf16ToFloat(b[i]));
  }
}

// A piece far larger than a bucket's (a large param reduced alone) is not
// kept: the scratch would hold that memory for the run.
template <typename T>
void ReleaseIfLarge(std::vector<T>* scratch) {
  if (scratch->size() > (size_t{16} << 20)) std::vector<T>().swap(*scratch);
}

}  // namespace

MPI_Op HalfSum(DType t) {
  static MPI_Op f16 = MPI_OP_NULL, bf16 = MPI_OP_NULL;
  static std::once_flag once;
  std::call_once(once, [] {
    MPI_Op_create(&SumF16, 1, &f16);
    MPI_Op_create(&SumBf16, 1, &bf16);
  });
  return t == DType::kF16 ? f16 : bf16;
}

void TreeSumInto(std::vector<const float*> piece, int own, size_t n, float* out) {
  const int w = static_cast<int>(piece.size());
  int rounds = 0;
  while ((1 << rounds) < w) ++rounds;
  for (int k = 1; k <= rounds; ++k) {
    const int half = 1 << (k - 1);
    for (int a = 0; a + half < w; a += 2 * half) {
      const float* x = piece[a];
      const float* y = piece[a + half];
      float* dst = (k == rounds || a == own) ? out : const_cast<float*>(x);
#pragma omp simd
      for (size_t i = 0; i < n; ++i) dst[i] = x[i] + y[i];
      piece[a] = dst;
    }
  }
  if (w == 1) std::copy(piece[0], piece[0] + n, out);
}

template <>
std::vector<float>& SumScratch::For<float>() {
  return f32;
}
template <>
std::vector<double>& SumScratch::For<double>() {
  return f64;
}

int PostPieceExchange(MPI_Comm comm, int rank, int world, const float* send,
                      const std::vector<int>& c, const std::vector<int>& d,
                      SumScratch* scratch) {
  const size_t mine = static_cast<size_t>(c[rank]);
  const size_t need = mine * static_cast<size_t>(world - 1);
  if (scratch->f32.size() < need) scratch->f32.resize(need);
  // Peer q's piece lands in slot q (q < rank) or q - 1 (q > rank).
  std::vector<const float*>& piece = scratch->piece;
  piece.assign(world, nullptr);
  scratch->reqs.assign(2 * static_cast<size_t>(world - 1), MPI_REQUEST_NULL);
  int rc = MPI_SUCCESS;
  for (int q = 0, k = 0; q < world && rc == MPI_SUCCESS; ++q) {
    if (q == rank) {
      piece[q] = send + d[rank];
      continue;
    }
    float* slot = scratch->f32.data() + static_cast<size_t>(q < rank ? q : q - 1) * mine;
    piece[q] = slot;
    rc = MPI_Irecv(slot, c[rank], MPI_FLOAT, q, SumScratch::kExchangeTag, comm,
                   &scratch->reqs[k++]);
    if (rc == MPI_SUCCESS) {
      rc = MPI_Isend(send + d[q], c[q], MPI_FLOAT, q, SumScratch::kExchangeTag, comm,
                     &scratch->reqs[k++]);
    }
  }
  return rc;
}

void SumExchangedPieces(int rank, size_t n, float* recv, SumScratch* scratch) {
  TreeSumInto(scratch->piece, rank, n, recv);
  ReleaseIfLarge(&scratch->f32);
}

template <typename T>
int PairAllReduce(MPI_Comm comm, int rank, T* data, int count, MPI_Datatype t, bool gate,
                  std::chrono::steady_clock::time_point deadline, std::mutex* serial,
                  const ArrivalGateOptions& options, SumScratch* sums) {
  const int peer = 1 - rank, half = count / 2;
  // Rank 0 owns [0, half), rank 1 [half, count).
  T* mine = data + (rank == 0 ? 0 : half);
  T* theirs = data + (rank == 0 ? half : 0);
  const int n_mine = rank == 0 ? half : count - half, n_theirs = count - n_mine;
  std::vector<T>& scratch = sums->For<T>();
  if (scratch.size() < static_cast<size_t>(n_mine)) scratch.resize(n_mine);
  auto exchange = [&](MPI_Request* arrival, T* recv, int n_recv, const T* send, int n_send) {
    MPI_Request reqs[2];
    int rc;
    {
      std::unique_lock<std::mutex> l;
      if (serial != nullptr) l = std::unique_lock<std::mutex>(*serial);
      rc = MPI_Irecv(recv, n_recv, t, peer, SumScratch::kExchangeTag, comm, &reqs[0]);
      if (rc == MPI_SUCCESS) {
        rc = MPI_Isend(send, n_send, t, peer, SumScratch::kExchangeTag, comm, &reqs[1]);
      }
    }
    if (rc == MPI_SUCCESS) rc = WaitArrivedAndDone(arrival, 2, reqs, deadline, serial, options);
    return rc;
  };
  MPI_Request arrival = MPI_REQUEST_NULL;
  int rc = gate ? PostArrival(comm, &arrival, serial) : MPI_SUCCESS;
  if (rc == MPI_SUCCESS) {
    rc = exchange(gate ? &arrival : nullptr, scratch.data(), n_mine, theirs, n_theirs);
  }
  if (rc == MPI_SUCCESS) {
    const T* other = scratch.data();
#pragma omp simd
    for (int i = 0; i < n_mine; ++i) mine[i] = mine[i] + other[i];
    rc = exchange(nullptr, theirs, n_theirs, mine, n_mine);
  }
  ReleaseIfLarge(&scratch);
  return rc;
}

template int PairAllReduce<float>(MPI_Comm, int, float*, int, MPI_Datatype, bool,
                                  std::chrono::steady_clock::time_point, std::mutex*,
                                  const ArrivalGateOptions&, SumScratch*);
template int PairAllReduce<double>(MPI_Comm, int, double*, int, MPI_Datatype, bool,
                                   std::chrono::steady_clock::time_point, std::mutex*,
                                   const ArrivalGateOptions&, SumScratch*);

}  // namespace zero

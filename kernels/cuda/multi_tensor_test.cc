// Host tests of multi-tensor batching: every chunk of every tensor is owned
// by exactly one block of one launch, batches respect their limits, and a
// host emulation of the copy kernel's block loop flattens buffers exactly.
#include "kernels/cuda/multi_tensor.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace zero {
namespace cuda {
namespace {

struct T {
  int id;
  int64_t n;
};

struct Seen {
  std::vector<std::vector<int>> owner_count;  // [tensor][chunk]
  int launches = 0;
};

template <int kMax>
Seen RunBatches(const std::vector<int64_t>& sizes, int64_t chunk, int64_t max_blocks) {
  std::vector<T> ts;
  for (size_t i = 0; i < sizes.size(); ++i) ts.push_back({(int)i, sizes[i]});
  Seen seen;
  for (int64_t n : sizes) seen.owner_count.emplace_back((n + chunk - 1) / chunk, 0);
  int r = ForEachBatch<T, kMax>(
      ts.data(), (int)ts.size(), chunk, max_blocks,
      [&](const TensorBatch<T, kMax>& b, int32_t blocks) {
        EXPECT_LE(b.count, kMax);
        EXPECT_LE(blocks, max_blocks);
        EXPECT_GT(blocks, 0);
        EXPECT_EQ(b.chunk_start[b.count], blocks);
        for (int32_t blk = 0; blk < blocks; ++blk) {
          int t = FindTensor(b.chunk_start, b.count, blk);
          int64_t c = blk - b.chunk_start[t];
          EXPECT_GE(c, 0);
          EXPECT_LT(c * chunk, b.tensors[t].n);  // block has real work
          seen.owner_count[b.tensors[t].id][c] += 1;
        }
        ++seen.launches;
        return 0;
      });
  EXPECT_EQ(r, 0);
  return seen;
}

void ExpectEachChunkOnce(const Seen& s) {
  for (const auto& t : s.owner_count)
    for (int c : t) EXPECT_EQ(c, 1);
}

TEST(MultiTensor, EveryChunkOwnedByExactlyOneBlock) {
  Seen s = RunBatches<4>({10, 0, 1, 33, 0, 0, 7, 64, 65, 1, 0}, 8, 1 << 20);
  ExpectEachChunkOnce(s);
  EXPECT_EQ(s.launches, 3);  // 11 tensors, 4 per batch
}

TEST(MultiTensor, BatchClosesAtTheBlockLimit) {
  Seen s = RunBatches<48>({40, 40, 40, 8}, 8, 10);  // 5 chunks each, 10 per launch
  ExpectEachChunkOnce(s);
  EXPECT_EQ(s.launches, 2);
}

TEST(MultiTensor, AllEmptyTensorsLaunchNothing) {
  Seen s = RunBatches<4>({0, 0, 0, 0, 0}, 8, 100);
  EXPECT_EQ(s.launches, 0);
}

TEST(MultiTensor, TensorLargerThanOneLaunchIsAnError) {
  std::vector<T> ts = {{0, 1000}};
  int r = ForEachBatch<T, 4>(ts.data(), 1, 8, 10,
                             [](const TensorBatch<T, 4>&, int32_t) { return 0; });
  EXPECT_EQ(r, -1);
}

TEST(MultiTensor, LaunchErrorStopsTheLoop) {
  std::vector<T> ts = {{0, 8}, {1, 8}, {2, 8}};
  int calls = 0;
  int r = ForEachBatch<T, 1>(ts.data(), 3, 8, 10,
                             [&](const TensorBatch<T, 1>&, int32_t) {
                               ++calls;
                               return 77;
                             });
  EXPECT_EQ(r, 77);
  EXPECT_EQ(calls, 1);
}

// The copy kernel's block body, run on the host: flatten then unflatten.
struct Chunk {
  const char* src;
  char* dst;
  int64_t n;
};

void HostCopy(const std::vector<Chunk>& cs, int64_t chunk) {
  ForEachBatch<Chunk, 3>(cs.data(), (int)cs.size(), chunk, 1 << 20,
                         [&](const TensorBatch<Chunk, 3>& b, int32_t blocks) {
                           for (int32_t blk = 0; blk < blocks; ++blk) {
                             int t = FindTensor(b.chunk_start, b.count, blk);
                             const Chunk& c = b.tensors[t];
                             int64_t begin = (blk - b.chunk_start[t]) * chunk;
                             int64_t len = std::min(c.n - begin, chunk);
                             std::memcpy(c.dst + begin, c.src + begin, len);
                           }
                           return 0;
                         });
}

TEST(MultiTensor, FlattenThenUnflattenRestoresEveryBuffer) {
  std::vector<int64_t> sizes = {5, 0, 130, 64, 1, 0, 257, 3};
  std::vector<std::vector<char>> bufs;
  for (size_t i = 0; i < sizes.size(); ++i) {
    bufs.emplace_back(sizes[i]);
    for (int64_t j = 0; j < sizes[i]; ++j) bufs[i][j] = (char)(i * 31 + j);
  }
  int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  std::vector<char> flat(total, 0);
  std::vector<Chunk> in, out;
  int64_t off = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.push_back({bufs[i].data(), flat.data() + off, sizes[i]});
    off += sizes[i];
  }
  HostCopy(in, 64);
  off = 0;
  std::vector<std::vector<char>> back;
  for (int64_t n : sizes) back.emplace_back(n, 0);
  for (size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(0, std::memcmp(flat.data() + off, bufs[i].data(), sizes[i]));
    out.push_back({flat.data() + off, back[i].data(), sizes[i]});
    off += sizes[i];
  }
  HostCopy(out, 64);
  EXPECT_EQ(back, bufs);
}

}  // namespace
}  // namespace cuda
}  // namespace zero

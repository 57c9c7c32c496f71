// The shared pool: coverage of the range, concurrent callers, nesting, exceptions.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "npu/kernels/thread_pool.h"

namespace {

namespace nk = npu::kernels;

TEST(ThreadPool, CoversTheRangeExactlyOnceInChunksOfAtLeastGrain) {
  std::vector<std::atomic<int>> hits(100003);
  std::atomic<int> short_chunks{0};
  nk::parallel_for(0, 100003, 1000, [&](int64_t b, int64_t e) {
    if (e - b < 1000 && e != 100003) ++short_chunks;
    for (int64_t i = b; i < e; ++i) hits[i]++;
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  EXPECT_EQ(short_chunks.load(), 0);
  EXPECT_GE(nk::num_threads(), 1);
}

TEST(ThreadPool, EmptyAndTinyRangesRunInline) {
  int calls = 0;
  nk::parallel_for(5, 5, 1, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  nk::parallel_for(0, 10, 100, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
  });
  EXPECT_EQ(calls, 1);
}

// Two "device streams" call parallel_for at once, many times: both finish, both correct.
TEST(ThreadPool, ConcurrentCallersBothFinishCorrectly) {
  constexpr int kIters = 200;
  constexpr int64_t kN = 1 << 16;
  auto caller = [&](int seed, int64_t* sum_out) {
    std::vector<int64_t> data(kN);
    int64_t total = 0;
    for (int it = 0; it < kIters; ++it) {
      nk::parallel_for(0, kN, 512, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) data[i] = i * seed + it;
      });
      int64_t s = 0;
      for (int64_t v : data) s += v;
      total += s;
    }
    *sum_out = total;
  };
  int64_t s1 = 0, s2 = 0;
  std::thread t1(caller, 3, &s1), t2(caller, 5, &s2);
  t1.join();
  t2.join();
  auto expect = [&](int64_t seed) {
    int64_t total = 0;
    for (int it = 0; it < kIters; ++it) total += seed * (kN * (kN - 1) / 2) + int64_t(it) * kN;
    return total;
  };
  EXPECT_EQ(s1, expect(3));
  EXPECT_EQ(s2, expect(5));
}

TEST(ThreadPool, NestedParallelForRunsInline) {
  std::vector<std::atomic<int>> hits(64 * 64);
  std::atomic<int> nested_not_inline{0};
  nk::parallel_for(0, 64, 1, [&](int64_t b, int64_t e) {
    EXPECT_TRUE(nk::in_parallel_region());
    for (int64_t i = b; i < e; ++i) {
      std::thread::id me = std::this_thread::get_id();
      nk::parallel_for(0, 64, 1, [&](int64_t b2, int64_t e2) {
        if (std::this_thread::get_id() != me || b2 != 0 || e2 != 64) ++nested_not_inline;
        for (int64_t j = b2; j < e2; ++j) hits[i * 64 + j]++;
      });
    }
  });
  EXPECT_FALSE(nk::in_parallel_region());
  EXPECT_EQ(nested_not_inline.load(), 0);
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ExceptionIsRethrownToTheCallerAfterAllChunks) {
  std::atomic<int> ran{0};
  EXPECT_THROW(nk::parallel_for(0, 1000, 10,
                                [&](int64_t b, int64_t e) {
                                  ++ran;
                                  if (b <= 500 && 500 < e) throw std::runtime_error("boom");
                                }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  nk::parallel_for(0, 1000, 10, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 999 * 1000 / 2);
  EXPECT_GE(ran.load(), nk::num_threads() > 1 ? 2 : 1);
}

// Many threads hammering the pool at once (more callers than workers): nobody deadlocks.
TEST(ThreadPool, MoreCallersThanWorkersMakeProgress) {
  std::vector<std::thread> threads;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int it = 0; it < 50; ++it) {
        nk::parallel_for(0, 4096, 16, [&](int64_t b, int64_t e) { total += e - b; });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(total.load(), 8 * 50 * 4096);
}

}  // namespace

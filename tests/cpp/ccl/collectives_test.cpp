// Every collective against an exact reference, on 2, 3 and 4 forked ranks: every dtype and
// reduce op, odd sizes, size 0, in place, many small calls in a row, messages larger than the
// staging buffer (HCCL_BUFFSIZE=1).
#include "ccl_test_util.h"

using namespace ccltest;

namespace {

// Runs allreduce for every dtype/op/size in `counts` on one communicator, checking each.
void allReduceCases(Rank& me, const std::vector<uint64_t>& counts,
                    const std::vector<HcclDataType>& dtypes, const std::vector<HcclReduceOp>& ops) {
  uint64_t seed = 1;
  for (HcclDataType t : dtypes) {
    for (HcclReduceOp op : ops) {
      if (!supported(t, op)) continue;
      for (uint64_t count : counts) {
        ++seed;
        const size_t bytes = count * sizeOf(t);
        auto input = makeInput(t, op, seed, me.rank, count);
        DeviceBuffer send(bytes), recv(bytes);
        send.upload(input.data(), bytes);
        // Every other case runs in place.
        const bool inPlace = seed % 2 == 0;
        if (inPlace) recv.upload(input.data(), bytes);
        if (!me.ok(HcclAllReduce(inPlace ? recv.ptr : send.ptr, recv.ptr, count, t, op, me.comm,
                                 me.stream),
                   "HcclAllReduce")) {
          return;
        }
        if (!me.sync(caseName(t, op, count).c_str())) return;
        auto got = recv.download(bytes);
        auto want = reference(t, op, seed, me.n, count);
        std::string diff = compareBytes(got.data(), want.data(), count, sizeOf(t));
        if (!me.check(diff.empty(), "allreduce " + caseName(t, op, count) + ": " + diff)) return;
      }
    }
  }
}

std::vector<HcclDataType> allDtypes() { return {std::begin(kAllDtypes), std::end(kAllDtypes)}; }
std::vector<HcclReduceOp> allOps() { return {std::begin(kAllOps), std::end(kAllOps)}; }

}  // namespace

TEST(CclAllReduce, EveryDtypeAndOpOn2Ranks) {
  EXPECT_RANKS_PASS(runRanks(2, [](Rank& me) {
    allReduceCases(me, {0, 1, 7, 1000, 40000}, allDtypes(), allOps());
  }));
}

TEST(CclAllReduce, EveryDtypeAndOpOn3Ranks) {
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    allReduceCases(me, {1, 7, 1000, 40000}, allDtypes(), allOps());
  }));
}

TEST(CclAllReduce, EveryDtypeAndOpOn4Ranks) {
  EXPECT_RANKS_PASS(runRanks(4, [](Rank& me) {
    allReduceCases(me, {1, 7, 1000, 40000}, allDtypes(), allOps());
  }));
}

TEST(CclAllReduce, LargerThanTheStagingBuffer) {
  RunOptions o;
  o.env = {{"HCCL_BUFFSIZE", "1"}};
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    allReduceCases(me, {1000003}, {HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_BFP16, HCCL_DATA_TYPE_INT64},
                   {HCCL_REDUCE_SUM, HCCL_REDUCE_MAX, HCCL_REDUCE_AVG});
  }, o));
}

// Outputs of 8 MiB and more are written with streaming stores: odd sizes, and outputs that do
// not start on a 64-byte line (the ordinary stores of the head and tail), on 2 and 3 ranks.
TEST(CclAllReduce, LargeOutputsWrittenWithStreamingStores) {
  for (uint32_t ranks : {2u, 3u}) {
    EXPECT_RANKS_PASS(runRanks(ranks, [](Rank& me) {
      uint64_t seed = 100;
      for (HcclDataType t : {HCCL_DATA_TYPE_FP32, HCCL_DATA_TYPE_BFP16}) {
        for (uint64_t count : {uint64_t{(9u << 20) / 4 + 3}, uint64_t{(17u << 20) / 2 + 1}}) {
          for (uint64_t offset : {0u, 3u}) {  // elements: output 12 or 6 bytes past a line
            ++seed;
            const size_t es = sizeOf(t), bytes = count * es;
            auto input = makeInput(t, HCCL_REDUCE_SUM, seed, me.rank, count);
            DeviceBuffer send(bytes), recv(bytes + 64);
            send.upload(input.data(), bytes);
            void* out = static_cast<char*>(recv.ptr) + offset * es;
            if (!me.ok(HcclAllReduce(send.ptr, out, count, t, HCCL_REDUCE_SUM, me.comm,
                                     me.stream), "HcclAllReduce") ||
                !me.sync(caseName(t, HCCL_REDUCE_SUM, count).c_str())) {
              return;
            }
            auto got = recv.download(bytes + 64);
            auto want = reference(t, HCCL_REDUCE_SUM, seed, me.n, count);
            std::string diff = compareBytes(got.data() + offset * es, want.data(), count, es);
            if (!me.check(diff.empty(), "allreduce " + caseName(t, HCCL_REDUCE_SUM, count) +
                                            " at +" + std::to_string(offset) + ": " + diff)) {
              return;
            }
          }
        }
      }
    }));
  }
}

// float16 sums round once: 1024 + 0.5 + 0.5 is 1025 in float32, but 1024 if every partial sum
// were rounded to float16 (1024.5 ties to the even 1024).
TEST(CclAllReduce, Float16RoundsOnce) {
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    const uint16_t in = floatToHalf(me.rank == 0 ? 1024.0f : 0.5f);
    DeviceBuffer buf(2);
    buf.upload(&in, 2);
    me.ok(HcclAllReduce(buf.ptr, buf.ptr, 1, HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, me.comm,
                        me.stream), "HcclAllReduce");
    me.sync("fp16");
    uint16_t out;
    std::memcpy(&out, buf.download(2).data(), 2);
    me.check(halfToFloat(out) == 1025.0f, "got " + std::to_string(halfToFloat(out)));
  }));
}

TEST(CclAllReduce, InPlaceAndManySmallCallsInARow) {
  EXPECT_RANKS_PASS(runRanks(4, [](Rank& me) {
    constexpr int kCalls = 500;
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    for (int k = 0; k < kCalls; ++k) {
      const uint64_t count = 1 + k % 17;
      auto input = makeInput(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, 100 + k, me.rank, count);
      bufs.push_back(std::make_unique<DeviceBuffer>(count * 4));
      bufs.back()->upload(input.data(), count * 4);
      if (!me.ok(HcclAllReduce(bufs.back()->ptr, bufs.back()->ptr, count, HCCL_DATA_TYPE_INT32,
                               HCCL_REDUCE_SUM, me.comm, me.stream), "HcclAllReduce")) return;
    }
    if (!me.sync("500 allreduces")) return;
    for (int k = 0; k < kCalls; ++k) {
      const uint64_t count = 1 + k % 17;
      auto want = reference(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, 100 + k, me.n, count);
      auto got = bufs[k]->download(count * 4);
      std::string diff = compareBytes(got.data(), want.data(), count, 4);
      if (!me.check(diff.empty(), "call " + std::to_string(k) + ": " + diff)) return;
    }
  }));
}

TEST(CclBroadcast, EveryRootAndSize) {
  RunOptions o;
  o.env = {{"HCCL_BUFFSIZE", "1"}};
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    for (uint32_t root = 0; root < me.n; ++root) {
      for (uint64_t count : {0ull, 1ull, 7ull, 1000003ull}) {
        const uint64_t seed = 7 * root + count;
        auto mine = makeInput(HCCL_DATA_TYPE_INT16, HCCL_REDUCE_SUM, seed, me.rank, count);
        auto want = makeInput(HCCL_DATA_TYPE_INT16, HCCL_REDUCE_SUM, seed, root, count);
        DeviceBuffer buf(count * 2);
        buf.upload(mine.data(), count * 2);
        if (!me.ok(HcclBroadcast(buf.ptr, count, HCCL_DATA_TYPE_INT16, root, me.comm, me.stream),
                   "HcclBroadcast") || !me.sync("broadcast")) return;
        auto got = buf.download(count * 2);
        std::string diff = compareBytes(got.data(), want.data(), count, 2);
        if (!me.check(diff.empty(), "root " + std::to_string(root) + " x" +
                                        std::to_string(count) + ": " + diff)) return;
      }
    }
  }, o));
}

TEST(CclReduce, EveryRootDtypeAndOp) {
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    uint64_t seed = 500;
    for (HcclDataType t : kAllDtypes) {
      for (HcclReduceOp op : kAllOps) {
        if (!supported(t, op)) continue;
        for (uint64_t count : {7ull, 30000ull}) {
          const uint32_t root = static_cast<uint32_t>(seed % me.n);
          ++seed;
          const size_t bytes = count * sizeOf(t);
          auto input = makeInput(t, op, seed, me.rank, count);
          DeviceBuffer send(bytes), recv(bytes);
          send.upload(input.data(), bytes);
          std::vector<uint8_t> sentinel(bytes, 0xab);
          recv.upload(sentinel.data(), bytes);
          if (!me.ok(HcclReduce(send.ptr, recv.ptr, count, t, op, root, me.comm, me.stream),
                     "HcclReduce") || !me.sync("reduce")) return;
          auto got = recv.download(bytes);
          auto want = me.rank == root ? reference(t, op, seed, me.n, count) : sentinel;
          std::string diff = compareBytes(got.data(), want.data(), count, sizeOf(t));
          if (!me.check(diff.empty(), "reduce root " + std::to_string(root) + " " +
                                          caseName(t, op, count) + ": " + diff)) return;
        }
      }
    }
  }));
}

TEST(CclAllGather, OddSizesAndInPlace) {
  RunOptions o;
  o.env = {{"HCCL_BUFFSIZE", "1"}};
  EXPECT_RANKS_PASS(runRanks(4, [](Rank& me) {
    for (uint64_t count : {0ull, 1ull, 7ull, 1000003ull}) {
      for (bool inPlace : {false, true}) {
        const uint64_t seed = count * 2 + inPlace;
        const size_t bytes = count * 4;
        auto mine = makeInput(HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, seed, me.rank, count);
        DeviceBuffer send(bytes), recv(bytes * me.n);
        void* src = inPlace ? static_cast<char*>(recv.ptr) + me.rank * bytes : send.ptr;
        if (bytes) npuMemcpy(src, mine.data(), bytes, npuMemcpyHostToDevice);
        if (!me.ok(HcclAllGather(src, recv.ptr, count, HCCL_DATA_TYPE_FP32, me.comm, me.stream),
                   "HcclAllGather") || !me.sync("allgather")) return;
        auto got = recv.download(bytes * me.n);
        for (uint32_t r = 0; r < me.n; ++r) {
          auto want = makeInput(HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, seed, r, count);
          std::string diff = compareBytes(got.data() + r * bytes, want.data(), count, 4);
          if (!me.check(diff.empty(), "block " + std::to_string(r) + " x" +
                                          std::to_string(count) + ": " + diff)) return;
        }
      }
    }
  }, o));
}

TEST(CclReduceScatter, EveryDtypeAndOp) {
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    uint64_t seed = 900;
    for (HcclDataType t : kAllDtypes) {
      for (HcclReduceOp op : kAllOps) {
        if (!supported(t, op)) continue;
        for (uint64_t count : {0ull, 1ull, 7ull, 20000ull}) {
          ++seed;
          const size_t es = sizeOf(t);
          // The send buffer is n blocks; block j of rank r is input "seed, r" at j*count.
          auto input = makeInput(t, op, seed, me.rank, count * me.n);
          DeviceBuffer send(count * me.n * es), recv(count * es);
          send.upload(input.data(), count * me.n * es);
          if (!me.ok(HcclReduceScatter(send.ptr, recv.ptr, count, t, op, me.comm, me.stream),
                     "HcclReduceScatter") || !me.sync("reducescatter")) return;
          auto got = recv.download(count * es);
          auto all = reference(t, op, seed, me.n, count * me.n);
          std::string diff = compareBytes(got.data(), all.data() + me.rank * count * es, count, es);
          if (!me.check(diff.empty(), "reducescatter " + caseName(t, op, count) + ": " + diff)) return;
        }
      }
    }
  }));
}

TEST(CclAlltoAll, EqualBlocks) {
  RunOptions o;
  o.env = {{"HCCL_BUFFSIZE", "1"}};
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    for (uint64_t count : {0ull, 1ull, 7ull, 300001ull}) {
      // Rank r's block for q is input(seed, r) at [q*count, (q+1)*count).
      const uint64_t seed = 3000 + count;
      auto input = makeInput(HCCL_DATA_TYPE_INT64, HCCL_REDUCE_SUM, seed, me.rank, count * me.n);
      DeviceBuffer send(count * me.n * 8), recv(count * me.n * 8);
      send.upload(input.data(), count * me.n * 8);
      if (!me.ok(HcclAlltoAll(send.ptr, count, HCCL_DATA_TYPE_INT64, recv.ptr, count,
                              HCCL_DATA_TYPE_INT64, me.comm, me.stream), "HcclAlltoAll") ||
          !me.sync("alltoall")) return;
      auto got = recv.download(count * me.n * 8);
      for (uint32_t r = 0; r < me.n; ++r) {
        auto theirs = makeInput(HCCL_DATA_TYPE_INT64, HCCL_REDUCE_SUM, seed, r, count * me.n);
        std::string diff = compareBytes(got.data() + r * count * 8,
                                        theirs.data() + me.rank * count * 8, count, 8);
        if (!me.check(diff.empty(), "from rank " + std::to_string(r) + ": " + diff)) return;
      }
    }
  }, o));
}

TEST(CclAlltoAllV, UnequalBlocksWithGaps) {
  RunOptions o;
  o.env = {{"HCCL_BUFFSIZE", "1"}};
  EXPECT_RANKS_PASS(runRanks(4, [](Rank& me) {
    const uint32_t n = me.n;
    // Rank r sends count(r, q) elements to q: some zero, some larger than the staging buffer.
    auto count = [](uint32_t r, uint32_t q) -> uint64_t {
      const uint64_t c[] = {0, 3, 1000, 200001};
      return c[(r * 3 + q) % 4];
    };
    std::vector<uint64_t> sc(n), sd(n), rc(n), rd(n);
    uint64_t st = 0, rt = 0;
    for (uint32_t q = 0; q < n; ++q) {
      sc[q] = count(me.rank, q);
      sd[q] = st + 5;  // gaps between blocks
      st += sc[q] + 5;
      rc[q] = count(q, me.rank);
      rd[q] = rt + 2;
      rt += rc[q] + 2;
    }
    // The element rank r sends to q at position i: a hash of (r, q, i).
    auto value = [](uint32_t r, uint32_t q, uint64_t i) {
      return static_cast<int32_t>(mix(r * 131 + q * 7 + mix(i)));
    };
    std::vector<int32_t> sendHost(st, -1);
    for (uint32_t q = 0; q < n; ++q) {
      for (uint64_t i = 0; i < sc[q]; ++i) sendHost[sd[q] + i] = value(me.rank, q, i);
    }
    DeviceBuffer send(st * 4), recv(rt * 4);
    send.upload(sendHost.data(), st * 4);
    std::vector<int32_t> init(rt, 12345);
    recv.upload(init.data(), rt * 4);
    if (!me.ok(HcclAlltoAllV(send.ptr, sc.data(), sd.data(), HCCL_DATA_TYPE_INT32, recv.ptr,
                             rc.data(), rd.data(), HCCL_DATA_TYPE_INT32, me.comm, me.stream),
               "HcclAlltoAllV") || !me.sync("alltoallv")) return;
    auto got = recv.download(rt * 4);
    const auto* g = reinterpret_cast<const int32_t*>(got.data());
    std::vector<int32_t> want(init);
    for (uint32_t r = 0; r < n; ++r) {
      for (uint64_t i = 0; i < rc[r]; ++i) want[rd[r] + i] = value(r, me.rank, i);
    }
    me.check(compareBytes(g, want.data(), rt, 4).empty(),
             "alltoallv: " + compareBytes(g, want.data(), rt, 4));
  }, o));
}

// Both ranks send before they receive: small messages are buffered, so this cannot deadlock.
TEST(CclSendRecv, BothSendFirstThenReceive) {
  EXPECT_RANKS_PASS(runRanks(2, [](Rank& me) {
    const uint32_t peer = 1 - me.rank;
    for (uint64_t count : {0ull, 1ull, 7ull, 5000ull}) {
      auto mine = makeInput(HCCL_DATA_TYPE_FP64, HCCL_REDUCE_SUM, count, me.rank, count);
      DeviceBuffer send(count * 8), recv(count * 8);
      send.upload(mine.data(), count * 8);
      if (!me.ok(HcclSend(send.ptr, count, HCCL_DATA_TYPE_FP64, peer, me.comm, me.stream), "HcclSend") ||
          !me.ok(HcclRecv(recv.ptr, count, HCCL_DATA_TYPE_FP64, peer, me.comm, me.stream), "HcclRecv") ||
          !me.sync("send/recv")) return;
      auto want = makeInput(HCCL_DATA_TYPE_FP64, HCCL_REDUCE_SUM, count, peer, count);
      auto got = recv.download(count * 8);
      if (!me.check(compareBytes(got.data(), want.data(), count, 8).empty(),
                    "x" + std::to_string(count) + ": " + compareBytes(got.data(), want.data(), count, 8))) return;
    }
  }));
}

// A message many times the ring: the sender waits for the receiver, chunk by chunk.
TEST(CclSendRecv, LargeMessagesAroundARing) {
  RunOptions o;
  o.env = {{"HCCL_BUFFSIZE", "1"}};
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    const uint64_t count = 3000017;
    const uint32_t next = (me.rank + 1) % me.n, prev = (me.rank + me.n - 1) % me.n;
    auto mine = makeInput(HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_SUM, 77, me.rank, count);
    DeviceBuffer send(count), recv(count);
    send.upload(mine.data(), count);
    npuStream_t other;
    npuStreamCreate(&other);
    // Send on one stream, receive on another: a ring of blocking sends needs both to progress.
    if (!me.ok(HcclSend(send.ptr, count, HCCL_DATA_TYPE_UINT8, next, me.comm, me.stream), "HcclSend") ||
        !me.ok(HcclRecv(recv.ptr, count, HCCL_DATA_TYPE_UINT8, prev, me.comm, other), "HcclRecv")) return;
    me.sync("send");
    npuStreamSynchronize(other);
    npuStreamDestroy(other);
    auto want = makeInput(HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_SUM, 77, prev, count);
    auto got = recv.download(count);
    me.check(compareBytes(got.data(), want.data(), count, 1).empty(),
             "ring: " + compareBytes(got.data(), want.data(), count, 1));
  }, o));
}

TEST(CclBarrier, OrdersHostSideEffects) {
  // Each rank writes a file, barriers, then checks that every rank's file exists.
  char dir[] = "/tmp/ccl-barrier-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  EXPECT_RANKS_PASS(runRanks(4, [&](Rank& me) {
    for (int round = 0; round < 5; ++round) {
      if (me.rank == static_cast<uint32_t>(round % 4)) usleep(100000);  // one rank is late
      const std::string mine = d + "/" + std::to_string(round) + "-" + std::to_string(me.rank);
      FILE* f = fopen(mine.c_str(), "w");
      if (f) fclose(f);
      if (!me.ok(HcclBarrier(me.comm, me.stream), "HcclBarrier") || !me.sync("barrier")) return;
      for (uint32_t r = 0; r < me.n; ++r) {
        const std::string theirs = d + "/" + std::to_string(round) + "-" + std::to_string(r);
        me.check(access(theirs.c_str(), F_OK) == 0, "round " + std::to_string(round) +
                                                         ": rank " + std::to_string(r) +
                                                         " had not arrived");
      }
    }
  }));
  std::system(("rm -rf " + d).c_str());
}

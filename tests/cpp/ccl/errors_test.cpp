// Failures: a killed rank, a stuck rank, abort, ranks that never join, bad environment
// values and bad arguments. Each gives its documented code and a message that names what
// went wrong, within the deadline, never a hang.
#include <sys/stat.h>

#include <functional>

#include "ccl_test_util.h"

using namespace ccltest;

namespace {

std::string hexId(const HcclRootInfo& root) {
  // The id sits after the 16-byte magic (see RootInfoData); the segment name carries it.
  static const char* const kHex = "0123456789abcdef";
  std::string s;
  for (int i = 16; i < 32; ++i) {
    const auto b = static_cast<uint8_t>(root.internal[i]);
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// An allreduce that must fail with `code`; checks the stream error, the async error and
// their messages contain every part of `parts`.
void expectAllReduceFails(Rank& me, HcclResult code, const std::vector<std::string>& parts) {
  DeviceBuffer buf(4096 * 4);
  const auto t0 = std::chrono::steady_clock::now();
  if (!me.ok(HcclAllReduce(buf.ptr, buf.ptr, 4096, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM,
                           me.comm, me.stream), "HcclAllReduce")) return;
  const npuError_t e = npuStreamSynchronize(me.stream);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string streamMessage = npuGetLastErrorMessage();
  me.check(e == npuErrorLaunchFailure, std::string("stream error ") + npuGetErrorName(e));
  HcclResult async = HCCL_SUCCESS;
  HcclGetCommAsyncError(me.comm, &async);
  me.check(async == code, std::string("async error ") + HcclGetErrorString(async));
  const std::string message = HcclGetCommErrorMessage(me.comm);
  for (const std::string& part : parts) {
    me.check(contains(message, part), "comm message lacks '" + part + "': " + message);
    me.check(contains(streamMessage, part), "stream message lacks '" + part + "': " + streamMessage);
  }
  me.check(waited < 30, "the failure took " + std::to_string(waited) + " s");
  // The communicator stays broken: the next collective fails at once.
  HcclBarrier(me.comm, me.stream);
  me.check(npuStreamSynchronize(me.stream) == npuErrorLaunchFailure, "barrier after the error ran");
}

}  // namespace

// A killed rank is seen through its liveness lock long before the 60 s deadline.
TEST(CclErrors, KilledRankFailsTheOthersBeforeTheDeadline) {
  RunOptions o;
  o.env = {{"HCCL_EXEC_TIMEOUT", "60"}};
  auto results = runRanks(3, [](Rank& me) {
    if (me.rank == 2) {
      kill(getpid(), SIGKILL);  // dies holding its communicator
    }
    expectAllReduceFails(me, HCCL_E_TIMEOUT,
                         {"HcclAllReduce (sequence 1, 4096 elements float32) on communicator",
                          "rank " + std::to_string(me.rank) + "/3",
                          "rank 2 did not arrive"});
    const std::string m = HcclGetCommErrorMessage(me.comm);
    me.check(m.find("its process has exited") != std::string::npos ||
                 m.find("gave up waiting") != std::string::npos,
             "message: " + m);
  }, o);
  EXPECT_EQ(results[0], "");
  EXPECT_EQ(results[1], "");
  EXPECT_TRUE(contains(results[2], "died (signal 9)")) << results[2];
}

TEST(CclErrors, StuckRankTimesOutOnTheOthers) {
  RunOptions o;
  o.env = {{"HCCL_EXEC_TIMEOUT", "1"}};
  auto results = runRanks(4, [](Rank& me) {
    // One allreduce that everybody joins, then ranks 1 and 3 are stuck in host code.
    DeviceBuffer buf(64);
    me.ok(HcclAllReduce(buf.ptr, buf.ptr, 16, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, me.comm,
                        me.stream), "HcclAllReduce");
    me.sync("first allreduce");
    if (me.rank == 1 || me.rank == 3) {
      sleep(4);
      return;
    }
    expectAllReduceFails(me, HCCL_E_TIMEOUT,
                         {"sequence 2", "ranks 1, 3 did not arrive", "HCCL_EXEC_TIMEOUT"});
  }, o);
  EXPECT_RANKS_PASS(results);
}

TEST(CclErrors, AbortWakesAWaiterWithoutDeadline) {
  RunOptions o;
  o.env = {{"HCCL_EXEC_TIMEOUT", "0"}};  // no deadline: only the abort can end the wait
  EXPECT_RANKS_PASS(runRanks(2, [](Rank& me) {
    if (me.rank == 1) {
      sleep(2);
      return;
    }
    std::thread watchdog([&] {
      usleep(300000);
      HcclCommAbort(me.comm);
    });
    expectAllReduceFails(me, HCCL_E_UNAVAIL, {"aborted (HcclCommAbort)"});
    watchdog.join();
  }, o));
}

TEST(CclErrors, PeerFailureEndsTheWaitOfTheOthers) {
  // Rank 0 has a 1 s deadline, rank 1 none. Rank 0 times out on rank 2, marks itself broken,
  // and rank 1 stops waiting too, naming the same missing rank, instead of hanging.
  RunOptions o;
  o.init = false;
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    HcclCommConfig config;
    HcclCommConfigInit(&config);
    config.execTimeoutSeconds = me.rank == 0 ? 1 : 0;
    if (!me.ok(HcclCommInitRootInfoConfig(3, &me.root, me.rank, &config, &me.comm),
               "HcclCommInitRootInfoConfig")) return;
    if (me.rank == 2) {
      sleep(3);
      return;
    }
    if (me.rank == 0) {
      expectAllReduceFails(me, HCCL_E_TIMEOUT, {"rank 2 did not arrive within 1 s"});
    } else {
      expectAllReduceFails(me, HCCL_E_TIMEOUT,
                           {"rank 2 did not arrive; rank 0 gave up waiting (HCCL_E_TIMEOUT"});
    }
  }, o));
}

// Ranks that call different collectives, or one collective with different arguments, fail on
// every rank at that collective with HCCL_E_PARA, each naming every rank's call; a matching
// collective before it is untouched, and the communicator stays broken after it.
TEST(CclErrors, MismatchedCollectivesFailOnEveryRankNamingEachCall) {
  struct Case {
    const char* name;
    std::function<HcclResult(Rank&, DeviceBuffer&)> call;
    std::vector<std::string> parts;  // in every rank's message
  };
  const std::vector<Case> cases = {
      {"kinds",
       [](Rank& me, DeviceBuffer& b) {
         return me.rank == 1 ? HcclAllGather(b.ptr, b.ptr, 256, HCCL_DATA_TYPE_FP32, me.comm,
                                             me.stream)
                             : HcclAllReduce(b.ptr, b.ptr, 1024, HCCL_DATA_TYPE_FP32,
                                             HCCL_REDUCE_SUM, me.comm, me.stream);
       },
       {"rank 0 called HcclAllReduce (sequence 2, 1024 elements float32, sum)",
        "rank 1 called HcclAllGather (sequence 2, 1024 bytes per rank)",
        "rank 2 called HcclAllReduce (sequence 2, 1024 elements float32, sum)"}},
      {"counts",
       [](Rank& me, DeviceBuffer& b) {
         return HcclAllReduce(b.ptr, b.ptr, me.rank == 2 ? 1000 : 1024, HCCL_DATA_TYPE_FP32,
                              HCCL_REDUCE_SUM, me.comm, me.stream);
       },
       {"rank 2 called HcclAllReduce (sequence 2, 1000 elements float32, sum)"}},
      {"ops",
       [](Rank& me, DeviceBuffer& b) {
         return HcclReduceScatter(b.ptr, b.ptr, 64, HCCL_DATA_TYPE_FP32,
                                  me.rank == 0 ? HCCL_REDUCE_MAX : HCCL_REDUCE_SUM, me.comm,
                                  me.stream);
       },
       {"rank 0 called HcclReduceScatter (sequence 2, 64 elements float32 per rank, max)"}},
      {"roots",
       [](Rank& me, DeviceBuffer& b) {
         return HcclBroadcast(b.ptr, 16, HCCL_DATA_TYPE_FP32, me.rank == 1 ? 1 : 0, me.comm,
                              me.stream);
       },
       {"rank 1 called HcclBroadcast (sequence 2, 64 bytes, root 1)"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EXPECT_RANKS_PASS(runRanks(3, [&c](Rank& me) {
      DeviceBuffer buf(4096 * 4);
      if (!me.ok(HcclBarrier(me.comm, me.stream), "HcclBarrier")) return;  // matches
      if (!me.ok(c.call(me, buf), "the mismatched call")) return;
      me.check(npuStreamSynchronize(me.stream) == npuErrorLaunchFailure, "no stream error");
      HcclResult async = HCCL_SUCCESS;
      HcclGetCommAsyncError(me.comm, &async);
      me.check(async == HCCL_E_PARA, std::string("async error ") + HcclGetErrorString(async));
      const std::string message = HcclGetCommErrorMessage(me.comm);
      me.check(contains(message, "the ranks called different collectives"), message);
      for (const std::string& part : c.parts) {
        me.check(contains(message, part), "message lacks '" + part + "': " + message);
      }
    }));
  }
}

TEST(CclErrors, AbortOnOneRankReleasesThePeers) {
  RunOptions o;
  o.env = {{"HCCL_EXEC_TIMEOUT", "0"}};
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    if (me.rank == 2) {
      usleep(300000);
      HcclCommAbort(me.comm);  // the watchdog of rank 2 gives up
      return;
    }
    expectAllReduceFails(me, HCCL_E_REMOTE, {"rank 2 aborted the communicator"});
  }, o));
}

TEST(CclErrors, RanksThatNeverJoinTimeOutAndLeaveNoSegment) {
  RunOptions o;
  o.init = false;
  o.env = {{"HCCL_CONNECT_TIMEOUT", "1"}};
  EXPECT_RANKS_PASS(runRanks(2, [](Rank& me) {
    if (me.rank == 1) return;  // never joins
    HcclComm comm = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    const HcclResult r = HcclCommInitRootInfo(3, &me.root, 0, &comm);
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    me.check(r == HCCL_E_TIMEOUT, std::string("init returned ") + HcclGetErrorString(r));
    const std::string m = HcclGetLastErrorMessage();
    me.check(contains(m, "ranks 1, 2 did not join within 1 s") &&
                 contains(m, "HCCL_CONNECT_TIMEOUT") && contains(m, "rank 0/3"),
             "message: " + m);
    me.check(waited >= 0.9 && waited < 20, "waited " + std::to_string(waited) + " s");
    me.check(comm == nullptr, "comm was set");
    const std::string segment = "/dev/shm/simnpu-hccl-" + hexId(me.root) + "-node0";
    me.check(access(segment.c_str(), F_OK) != 0, segment + " was left behind");
  }, o));
}

TEST(CclErrors, SegmentIsUnlinkedOnceEveryRankJoined) {
  EXPECT_RANKS_PASS(runRanks(3, [](Rank& me) {
    const std::string segment = "/dev/shm/simnpu-hccl-" + hexId(me.root) + "-node0";
    me.check(access(segment.c_str(), F_OK) != 0, segment + " still exists after init");
  }));
}

TEST(CclErrors, BadEnvironmentValuesNameTheVariable) {
  struct Case {
    const char* name;
    const char* value;
    const char* expect;
  };
  const Case cases[] = {
      {"HCCL_EXEC_TIMEOUT", "abc", "HCCL_EXEC_TIMEOUT='abc' is invalid: expected an integer from 0 to 17340"},
      {"HCCL_EXEC_TIMEOUT", "17341", "from 0 to 17340 (seconds (0 = no deadline))"},
      {"HCCL_CONNECT_TIMEOUT", "0", "HCCL_CONNECT_TIMEOUT='0' is invalid: expected an integer from 1 to 7200"},
      {"HCCL_CONNECT_TIMEOUT", "-5", "HCCL_CONNECT_TIMEOUT='-5'"},
      {"HCCL_BUFFSIZE", "0", "HCCL_BUFFSIZE='0' is invalid: expected an integer from 1 to 65536 (MB)"},
      {"HCCL_BUFFSIZE", "1.5", "HCCL_BUFFSIZE='1.5'"},
      {"HCCL_BUFFSIZE", "", "HCCL_BUFFSIZE=''"},
  };
  for (const Case& c : cases) {
    setenv(c.name, c.value, 1);
    HcclCommConfig config;
    EXPECT_EQ(HcclCommConfigInit(&config), HCCL_E_PARA) << c.name << "=" << c.value;
    EXPECT_TRUE(contains(HcclGetLastErrorMessage(), c.expect)) << HcclGetLastErrorMessage();
    HcclRootInfo root;
    ASSERT_EQ(HcclGetRootInfo(&root), HCCL_SUCCESS);
    HcclComm comm = nullptr;
    EXPECT_EQ(HcclCommInitRootInfo(1, &root, 0, &comm), HCCL_E_PARA);
    EXPECT_TRUE(contains(HcclGetLastErrorMessage(), c.expect)) << HcclGetLastErrorMessage();
    unsetenv(c.name);
  }
  setenv("HCCL_EXEC_TIMEOUT", " 30 ", 1);
  setenv("HCCL_BUFFSIZE", "8", 1);
  HcclCommConfig config;
  ASSERT_EQ(HcclCommConfigInit(&config), HCCL_SUCCESS) << HcclGetLastErrorMessage();
  EXPECT_EQ(config.execTimeoutSeconds, 30u);
  EXPECT_EQ(config.bufferSizeMB, 8u);
  EXPECT_EQ(config.connectTimeoutSeconds, 120u);
  config.bufferSizeMB = 0;
  HcclRootInfo root;
  ASSERT_EQ(HcclGetRootInfo(&root), HCCL_SUCCESS);
  HcclComm comm = nullptr;
  EXPECT_EQ(HcclCommInitRootInfoConfig(1, &root, 0, &config, &comm), HCCL_E_PARA);
  EXPECT_TRUE(contains(HcclGetLastErrorMessage(), "config->bufferSizeMB = 0 is out of range"))
      << HcclGetLastErrorMessage();
}

// Bad arguments are refused at the call with HCCL_E_PARA and a message naming the argument.
// A one-rank communicator needs no peers, so this runs in the test process itself.
TEST(CclErrors, BadArgumentsAreRefusedAtTheCall) {
  HcclRootInfo root;
  ASSERT_EQ(HcclGetRootInfo(&root), HCCL_SUCCESS);
  HcclComm comm = nullptr;
  EXPECT_EQ(HcclCommInitRootInfo(2, &root, 2, &comm), HCCL_E_PARA);
  EXPECT_TRUE(contains(HcclGetLastErrorMessage(), "rank 2 is out of range for nRanks = 2"));
  HcclRootInfo garbage{};
  EXPECT_EQ(HcclCommInitRootInfo(1, &garbage, 0, &comm), HCCL_E_PARA);
  EXPECT_TRUE(contains(HcclGetLastErrorMessage(), "not made by HcclGetRootInfo"));
  ASSERT_EQ(HcclCommInitRootInfo(1, &root, 0, &comm), HCCL_SUCCESS) << HcclGetLastErrorMessage();
  npuStream_t s = nullptr;
  void* buf = nullptr;
  ASSERT_EQ(npuMalloc(&buf, 64), npuSuccess);

  auto expect = [&](HcclResult got, HcclResult want, const char* part) {
    EXPECT_EQ(got, want) << part;
    EXPECT_TRUE(contains(HcclGetLastErrorMessage(), part)) << HcclGetLastErrorMessage();
  };
  expect(HcclAllReduce(nullptr, buf, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, s),
         HCCL_E_PARA, "HcclAllReduce: sendBuf is NULL but the count is 4");
  expect(HcclAllReduce(buf, buf, 4, static_cast<HcclDataType>(42), HCCL_REDUCE_SUM, comm, s),
         HCCL_E_PARA, "dataType = 42 is not an HcclDataType");
  expect(HcclAllReduce(buf, buf, 4, HCCL_DATA_TYPE_FP32, static_cast<HcclReduceOp>(9), comm, s),
         HCCL_E_PARA, "op = 9 is not an HcclReduceOp");
  expect(HcclAllReduce(buf, buf, 4, HCCL_DATA_TYPE_BOOL, HCCL_REDUCE_AVG, comm, s),
         HCCL_E_NOT_SUPPORT, "reduce op avg is not supported for bool");
  expect(HcclAllReduce(buf, buf, UINT64_MAX / 2, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, s),
         HCCL_E_PARA, "overflows the byte count");
  expect(HcclAllReduce(buf, buf, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, nullptr, s),
         HCCL_E_PARA, "HcclAllReduce: comm is NULL");
  expect(HcclBroadcast(buf, 4, HCCL_DATA_TYPE_FP32, 1, comm, s), HCCL_E_PARA,
         "HcclBroadcast: root = 1 is out of range for a communicator of 1 ranks");
  expect(HcclReduce(buf, buf, 4, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, 3, comm, s), HCCL_E_PARA,
         "root = 3 is out of range");
  expect(HcclSend(buf, 4, HCCL_DATA_TYPE_FP32, 1, comm, s), HCCL_E_PARA, "destRank = 1");
  expect(HcclRecv(buf, 4, HCCL_DATA_TYPE_FP32, 5, comm, s), HCCL_E_PARA, "srcRank = 5");
  expect(HcclAllGather(buf, nullptr, 4, HCCL_DATA_TYPE_FP32, comm, s), HCCL_E_PARA,
         "recvBuf is NULL");
  expect(HcclAlltoAll(buf, 4, HCCL_DATA_TYPE_FP32, buf, 4, HCCL_DATA_TYPE_INT32, comm, s),
         HCCL_E_PARA, "the counts and dtypes must be equal");
  expect(HcclAlltoAllV(buf, nullptr, nullptr, HCCL_DATA_TYPE_FP32, buf, nullptr, nullptr,
                       HCCL_DATA_TYPE_FP32, comm, s),
         HCCL_E_PARA, "must not be NULL");
  npuStream_t destroyed;
  ASSERT_EQ(npuStreamCreate(&destroyed), npuSuccess);
  // Zero-size calls with null buffers are fine.
  EXPECT_EQ(HcclAllReduce(nullptr, nullptr, 0, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, s),
            HCCL_SUCCESS);
  EXPECT_EQ(npuStreamSynchronize(s), npuSuccess);
  uint32_t size = 0, rank = 9;
  EXPECT_EQ(HcclGetRankSize(comm, &size), HCCL_SUCCESS);
  EXPECT_EQ(HcclGetRankId(comm, &rank), HCCL_SUCCESS);
  EXPECT_EQ(size, 1u);
  EXPECT_EQ(rank, 0u);
  EXPECT_STREQ(HcclGetCommErrorMessage(comm), "");
  EXPECT_TRUE(contains(HcclGetErrorString(HCCL_E_TIMEOUT), "HCCL_E_TIMEOUT"));
  npuStreamDestroy(destroyed);
  npuFree(buf);
  EXPECT_EQ(HcclCommDestroy(comm), HCCL_SUCCESS);
}

// A one-rank communicator computes the reduction of one input (bool normalised, avg = x / 1).
TEST(CclSingleRank, CollectivesAreLocalCopies) {
  HcclRootInfo root;
  ASSERT_EQ(HcclGetRootInfo(&root), HCCL_SUCCESS);
  HcclComm comm = nullptr;
  ASSERT_EQ(HcclCommInitRootInfo(1, &root, 0, &comm), HCCL_SUCCESS) << HcclGetLastErrorMessage();
  const uint64_t count = 1001;
  auto input = makeInput(HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_AVG, 5, 0, count);
  void *a, *b;
  ASSERT_EQ(npuMalloc(&a, count * 2), npuSuccess);
  ASSERT_EQ(npuMalloc(&b, count * 2), npuSuccess);
  npuMemcpy(a, input.data(), count * 2, npuMemcpyHostToDevice);
  ASSERT_EQ(HcclAllReduce(a, b, count, HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_AVG, comm, nullptr),
            HCCL_SUCCESS);
  ASSERT_EQ(npuStreamSynchronize(nullptr), npuSuccess);
  std::vector<uint8_t> got(count * 2);
  npuMemcpy(got.data(), b, count * 2, npuMemcpyDeviceToHost);
  auto want = reference(HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_AVG, 5, 1, count);
  EXPECT_EQ(compareBytes(got.data(), want.data(), count, 2), "");
  npuFree(a);
  npuFree(b);
  HcclCommDestroy(comm);
}

// Communicators spanning "nodes": each node has its own shared-memory segment, and the hops
// between nodes go through a fake inter-node transport (socketpairs). Ranks of a node may be
// non-contiguous and nodes may differ in size. Inputs are "exact" (every fold order gives
// the same bits), since the inter-node ring does not fold in rank order.
#include "ccl_test_util.h"
#include "fake_inter_node.h"

using namespace ccltest;

namespace {

// Runs fn on n ranks placed on nodes `nodes`, each rank with a multi-node communicator.
std::vector<std::string> runNodes(const std::vector<uint32_t>& nodes,
                                  const std::function<void(Rank&, FakeInterNode&)>& fn,
                                  const RunOptions& base = {}) {
  const auto n = static_cast<uint32_t>(nodes.size());
  FakeInterNode net(n);
  RunOptions o = base;
  o.init = false;
  return runRanks(n, [&](Rank& me) {
    g_exactFloats = true;
    HcclInterNodeOps ops = net.ops(me.rank);
    if (!me.ok(HcclCommInitMultiNode(n, &me.root, me.rank, nodes.data(), &ops, nullptr, &me.comm),
               "HcclCommInitMultiNode")) return;
    fn(me, net);
  }, o);
}

void checkAllReduce(Rank& me, HcclDataType t, HcclReduceOp op, uint64_t count, uint64_t seed) {
  const size_t bytes = count * sizeOf(t);
  auto input = makeInput(t, op, seed, me.rank, count);
  DeviceBuffer send(bytes), recv(bytes);
  send.upload(input.data(), bytes);
  if (!me.ok(HcclAllReduce(send.ptr, recv.ptr, count, t, op, me.comm, me.stream), "HcclAllReduce") ||
      !me.sync(caseName(t, op, count).c_str())) return;
  auto got = recv.download(bytes);
  auto want = reference(t, op, seed, me.n, count);
  std::string diff = compareBytes(got.data(), want.data(), count, sizeOf(t));
  me.check(diff.empty(), "allreduce " + caseName(t, op, count) + ": " + diff);
}

}  // namespace

TEST(CclMultiNode, AllReduceEveryDtypeAndOpOnTwoNodesOfTwo) {
  EXPECT_RANKS_PASS(runNodes({0, 0, 1, 1}, [](Rank& me, FakeInterNode& net) {
    uint64_t seed = 40;
    for (HcclDataType t : kAllDtypes) {
      for (HcclReduceOp op : kAllOps) {
        if (!supported(t, op)) continue;
        for (uint64_t count : {0ull, 1ull, 7ull, 30011ull}) checkAllReduce(me, t, op, count, ++seed);
      }
    }
    // The leaders (ranks 0 and 2) really used the inter-node transport; the others did not.
    if (me.rank == 0 || me.rank == 2) {
      me.check(net.bytesSent() > 0, "no bytes went through the inter-node transport");
    } else {
      me.check(net.bytesSent() == 0, "a non-leader sent through the inter-node transport");
    }
  }));
}

TEST(CclMultiNode, UnevenInterleavedNodesAndLargeMessages) {
  RunOptions o;
  o.env = {{"HCCL_BUFFSIZE", "1"}};
  // Nodes {0, 3}, {1, 4}, {2}: three nodes, interleaved ranks, a node of one rank.
  EXPECT_RANKS_PASS(runNodes({0, 1, 2, 0, 1}, [](Rank& me, FakeInterNode&) {
    checkAllReduce(me, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, 1000003, 1);
    checkAllReduce(me, HCCL_DATA_TYPE_BFP16, HCCL_REDUCE_AVG, 300007, 2);
    checkAllReduce(me, HCCL_DATA_TYPE_INT64, HCCL_REDUCE_MAX, 77, 3);
  }, o));
}

TEST(CclMultiNode, EveryOtherCollective) {
  EXPECT_RANKS_PASS(runNodes({0, 1, 1, 0}, [](Rank& me, FakeInterNode&) {
    const uint32_t n = me.n;
    // broadcast from every root
    for (uint32_t root = 0; root < n; ++root) {
      const uint64_t count = 5003;
      auto mine = makeInput(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, root, me.rank, count);
      auto want = makeInput(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, root, root, count);
      DeviceBuffer buf(count * 4);
      buf.upload(mine.data(), count * 4);
      if (!me.ok(HcclBroadcast(buf.ptr, count, HCCL_DATA_TYPE_INT32, root, me.comm, me.stream), "HcclBroadcast") ||
          !me.sync("broadcast")) return;
      auto got = buf.download(count * 4);
      me.check(compareBytes(got.data(), want.data(), count, 4).empty(), "broadcast root " + std::to_string(root));
    }
    // reduce to every root
    for (uint32_t root = 0; root < n; ++root) {
      const uint64_t count = 999;
      auto input = makeInput(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, 10 + root, me.rank, count);
      DeviceBuffer send(count * 2), recv(count * 2);
      send.upload(input.data(), count * 2);
      std::vector<uint8_t> sentinel(count * 2, 0x5a);
      recv.upload(sentinel.data(), count * 2);
      if (!me.ok(HcclReduce(send.ptr, recv.ptr, count, HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, root, me.comm, me.stream), "HcclReduce") ||
          !me.sync("reduce")) return;
      auto got = recv.download(count * 2);
      auto want = me.rank == root ? reference(HCCL_DATA_TYPE_FP16, HCCL_REDUCE_SUM, 10 + root, n, count) : sentinel;
      me.check(compareBytes(got.data(), want.data(), count, 2).empty(), "reduce root " + std::to_string(root));
    }
    // allgather
    {
      const uint64_t count = 1234;
      auto mine = makeInput(HCCL_DATA_TYPE_UINT16, HCCL_REDUCE_SUM, 20, me.rank, count);
      DeviceBuffer send(count * 2), recv(count * 2 * n);
      send.upload(mine.data(), count * 2);
      if (!me.ok(HcclAllGather(send.ptr, recv.ptr, count, HCCL_DATA_TYPE_UINT16, me.comm, me.stream), "HcclAllGather") ||
          !me.sync("allgather")) return;
      auto got = recv.download(count * 2 * n);
      for (uint32_t r = 0; r < n; ++r) {
        auto want = makeInput(HCCL_DATA_TYPE_UINT16, HCCL_REDUCE_SUM, 20, r, count);
        me.check(compareBytes(got.data() + r * count * 2, want.data(), count, 2).empty(), "allgather block " + std::to_string(r));
      }
    }
    // reduce-scatter
    {
      const uint64_t count = 777;
      auto input = makeInput(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_PROD, 30, me.rank, count * n);
      DeviceBuffer send(count * n * 4), recv(count * 4);
      send.upload(input.data(), count * n * 4);
      if (!me.ok(HcclReduceScatter(send.ptr, recv.ptr, count, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_PROD, me.comm, me.stream), "HcclReduceScatter") ||
          !me.sync("reducescatter")) return;
      auto got = recv.download(count * 4);
      auto all = reference(HCCL_DATA_TYPE_INT32, HCCL_REDUCE_PROD, 30, n, count * n);
      me.check(compareBytes(got.data(), all.data() + me.rank * count * 4, count, 4).empty(), "reducescatter");
    }
    // alltoall with blocks larger than the fake sockets' buffers
    {
      const uint64_t count = 50001;
      auto input = makeInput(HCCL_DATA_TYPE_INT64, HCCL_REDUCE_SUM, 40, me.rank, count * n);
      DeviceBuffer send(count * n * 8), recv(count * n * 8);
      send.upload(input.data(), count * n * 8);
      if (!me.ok(HcclAlltoAll(send.ptr, count, HCCL_DATA_TYPE_INT64, recv.ptr, count, HCCL_DATA_TYPE_INT64, me.comm, me.stream), "HcclAlltoAll") ||
          !me.sync("alltoall")) return;
      auto got = recv.download(count * n * 8);
      for (uint32_t r = 0; r < n; ++r) {
        auto theirs = makeInput(HCCL_DATA_TYPE_INT64, HCCL_REDUCE_SUM, 40, r, count * n);
        me.check(compareBytes(got.data() + r * count * 8, theirs.data() + me.rank * count * 8, count, 8).empty(),
                 "alltoall from rank " + std::to_string(r));
      }
    }
    // send/recv in a ring: to the next rank (on the other node or the same), from the previous
    {
      const uint64_t count = 100003;
      const uint32_t next = (me.rank + 1) % n, prev = (me.rank + n - 1) % n;
      auto mine = makeInput(HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_SUM, 50, me.rank, count);
      DeviceBuffer send(count), recv(count);
      send.upload(mine.data(), count);
      npuStream_t other;
      npuStreamCreate(&other);
      if (!me.ok(HcclSend(send.ptr, count, HCCL_DATA_TYPE_UINT8, next, me.comm, me.stream), "HcclSend") ||
          !me.ok(HcclRecv(recv.ptr, count, HCCL_DATA_TYPE_UINT8, prev, me.comm, other), "HcclRecv")) return;
      me.sync("send");
      npuStreamSynchronize(other);
      npuStreamDestroy(other);
      auto want = makeInput(HCCL_DATA_TYPE_UINT8, HCCL_REDUCE_SUM, 50, prev, count);
      auto got = recv.download(count);
      me.check(compareBytes(got.data(), want.data(), count, 1).empty(), "send/recv ring");
    }
    me.ok(HcclBarrier(me.comm, me.stream), "HcclBarrier");
    me.sync("barrier");
  }));
}

TEST(CclMultiNode, OneNodeNeedsNoInterNodeOps) {
  EXPECT_RANKS_PASS(runRanks(2, [](Rank& me) {
    const uint32_t nodes[2] = {0, 0};
    if (!me.ok(HcclCommInitMultiNode(2, &me.root, me.rank, nodes, nullptr, nullptr, &me.comm),
               "HcclCommInitMultiNode")) return;
    checkAllReduce(me, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_AVG, 4097, 9);
  }, RunOptions{{}, false, 60}));
}

TEST(CclMultiNode, MissingInterNodeOpsAreRefused) {
  HcclRootInfo root;
  ASSERT_EQ(HcclGetRootInfo(&root), HCCL_SUCCESS);
  const uint32_t nodes[2] = {0, 1};
  HcclComm comm = nullptr;
  EXPECT_EQ(HcclCommInitMultiNode(2, &root, 0, nodes, nullptr, nullptr, &comm), HCCL_E_PARA);
  EXPECT_NE(std::string(HcclGetLastErrorMessage()).find("span 2 nodes, so interNode"), std::string::npos)
      << HcclGetLastErrorMessage();
  const uint32_t bad[2] = {0, 7};
  EXPECT_EQ(HcclCommInitMultiNode(2, &root, 0, bad, nullptr, nullptr, &comm), HCCL_E_PARA);
  EXPECT_NE(std::string(HcclGetLastErrorMessage()).find("nodeOfRank[1] = 7"), std::string::npos)
      << HcclGetLastErrorMessage();
}

// Nodes whose ranks call different collectives fail on every rank: the leaders compare their
// calls across nodes and name them; the other ranks stop because their leader gave up.
TEST(CclMultiNode, MismatchedCollectivesAcrossNodesFailEverywhere) {
  EXPECT_RANKS_PASS(runNodes({0, 0, 1, 1}, [](Rank& me, FakeInterNode&) {
    DeviceBuffer buf(4096 * 4);
    if (!me.ok(HcclBarrier(me.comm, me.stream), "HcclBarrier") || !me.sync("barrier")) return;
    // Node 1 (ranks 2 and 3) reduces 1000 elements, node 0 1024: each node agrees within.
    const uint64_t count = me.rank >= 2 ? 1000 : 1024;
    if (!me.ok(HcclAllReduce(buf.ptr, buf.ptr, count, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM,
                             me.comm, me.stream), "HcclAllReduce")) return;
    me.check(npuStreamSynchronize(me.stream) == npuErrorLaunchFailure, "no stream error");
    const std::string message = HcclGetCommErrorMessage(me.comm);
    if (me.rank == 0 || me.rank == 2) {
      me.check(message.find("the nodes called different collectives: rank 0 (node 0) called "
                            "HcclAllReduce (sequence 2, 1024 elements float32, sum); rank 2 "
                            "(node 1) called HcclAllReduce (sequence 2, 1000 elements float32, "
                            "sum)") != std::string::npos, message);
    } else {
      me.check(message.find("gave up") != std::string::npos, message);
    }
  }));
}


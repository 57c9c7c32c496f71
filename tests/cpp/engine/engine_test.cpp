// The offline-model engine: the .om reader refuses damaged files with messages that say what
// is wrong, and a loaded model computes what a naive host MLP computes. The model is
// examples/acl/tiny_mlp.om (atc's output for examples/acl/make_tiny_mlp.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "npu/engine.h"

namespace {

using npu::engine::Model;
using npu::engine::ModelError;

const std::string kModel = std::string(NPU_SOURCE_DIR) + "/examples/acl/tiny_mlp.om";

std::vector<uint8_t> modelBytes() {
  std::ifstream f(kModel, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// make_tiny_mlp.py's model on the host: y = relu(x W1^T + b1) W2 + b2.
std::vector<float> reference(const std::vector<float>& x) {
  std::vector<float> y(2 * 3);
  for (int n = 0; n < 2; ++n) {
    float h[8];
    for (int o = 0; o < 8; ++o) {
      float acc = ((o % 3) - 1) * 0.05f;
      for (int i = 0; i < 4; ++i) acc += x[n * 4 + i] * ((((o * 4 + i) % 7) - 3) * 0.1f);
      h[o] = std::max(acc, 0.0f);
    }
    for (int p = 0; p < 3; ++p) {
      float acc = p * 0.1f;
      for (int k = 0; k < 8; ++k) acc += h[k] * ((((k * 3 + p) % 5) - 2) * 0.1f);
      y[n * 3 + p] = acc;
    }
  }
  return y;
}

std::string parseError(const std::vector<uint8_t>& bytes) {
  try {
    npu::engine::parse_om(bytes.data(), bytes.size(), "m.om");
  } catch (const ModelError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OmReader, ReadsTheGraphAtcWrote) {
  auto def = npu::engine::read_om_file(kModel);
  EXPECT_EQ(def.version, 1u);  // a static model; version 2 adds the gear trailer
  EXPECT_EQ(def.soc_version, "Ascend910B2");
  ASSERT_EQ(def.inputs.size(), 1u);
  ASSERT_EQ(def.outputs.size(), 1u);
  EXPECT_EQ(def.tensors[def.inputs[0]].name, "x");
  EXPECT_EQ(def.tensors[def.inputs[0]].dims, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(def.tensors[def.outputs[0]].dims, (std::vector<int64_t>{2, 3}));
  // Gemm + Relu and MatMul + Add were fused: two nodes remain.
  ASSERT_EQ(def.nodes.size(), 2u);
  EXPECT_EQ(def.nodes[0].op, "MatMul");
  ASSERT_NE(def.nodes[0].attr("activation"), nullptr);
  EXPECT_EQ(def.nodes[0].attr("activation")->s, "Relu");
  EXPECT_EQ(def.nodes[1].op, "MatMul");
  EXPECT_EQ(def.nodes[1].inputs.size(), 3u);  // with the bias
}

TEST(OmReader, RefusesDamagedFiles) {
  auto good = modelBytes();
  ASSERT_GT(good.size(), 64u);
  auto half = std::vector<uint8_t>(good.begin(), good.begin() + good.size() / 2);
  EXPECT_NE(parseError(half).find("truncated"), std::string::npos) << parseError(half);
  auto tiny = std::vector<uint8_t>(good.begin(), good.begin() + 20);
  EXPECT_NE(parseError(tiny).find("shorter than the 64-byte header"), std::string::npos);
  auto foreign = good;
  std::memcpy(foreign.data(), "\x7f" "ELF", 4);
  EXPECT_NE(parseError(foreign).find("not an offline model"), std::string::npos);
  auto flipped = good;
  flipped[good.size() - 5] ^= 0x40;
  EXPECT_NE(parseError(flipped).find("checksum"), std::string::npos);
  auto future = good;
  future[8] = 9;
  EXPECT_NE(parseError(future).find("version 9"), std::string::npos);
  EXPECT_THROW(npu::engine::read_om_file("/nonexistent/m.om"), ModelError);
}

TEST(Engine, RunsTheModelLikeTheHostReference) {
  ASSERT_EQ(npuSetDevice(0), npuSuccess);
  Model model(npu::engine::read_om_file(kModel));
  std::vector<float> x(8);
  for (int i = 0; i < 8; ++i) x[i] = i * 0.25f - 1.0f;
  void *in = nullptr, *out = nullptr;
  ASSERT_EQ(npuMalloc(&in, model.input(0).nbytes), npuSuccess);
  ASSERT_EQ(npuMalloc(&out, model.output(0).nbytes), npuSuccess);
  auto expected = reference(x);
  for (int run = 0; run < 3; ++run) {  // later runs reuse the arena
    for (auto& v : x) v += 0.125f;
    expected = reference(x);
    ASSERT_EQ(npuMemcpy(in, x.data(), 32, npuMemcpyHostToDevice), npuSuccess);
    ASSERT_EQ(model.execute_async(nullptr, {in}, {out}), npuSuccess);
    std::vector<float> y(6);
    ASSERT_EQ(npuMemcpy(y.data(), out, 24, npuMemcpyDeviceToHost), npuSuccess);
    for (int i = 0; i < 6; ++i) EXPECT_NEAR(y[i], expected[i], 1e-6f) << "run " << run;
  }
  npuFree(in);
  npuFree(out);
}

}  // namespace

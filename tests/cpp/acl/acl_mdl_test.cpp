// AscendCL's model API: codes and messages for bad models and bad datasets, and a model
// loaded from memory that computes the same as from its file.
#include <gtest/gtest.h>

#include <acl/acl.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "acl_test_util.h"

namespace {

const std::string kModel = std::string(NPU_SOURCE_DIR) + "/examples/acl/tiny_mlp.om";

bool mentions(const std::string& what) {
  return std::string(aclGetRecentErrMsg()).find(what) != std::string::npos;
}

class AclModel : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_ACL_OK(aclInit(nullptr));
    ASSERT_ACL_OK(aclrtSetDevice(0));
  }
  void TearDown() override { aclFinalize(); }
};

TEST(AclModelInit, NeedsAclInit) {
  uint32_t id = 0;
  EXPECT_EQ(aclmdlLoadFromFile(kModel.c_str(), &id), ACL_ERROR_UNINITIALIZE);
}

TEST_F(AclModel, RefusesBadModels) {
  uint32_t id = 0;
  const char garbage[100] = "this is not a model";
  EXPECT_EQ(aclmdlLoadFromMem(garbage, sizeof(garbage), &id), ACL_ERROR_PARSE_MODEL);
  EXPECT_TRUE(mentions("not an offline model")) << aclGetRecentErrMsg();
  EXPECT_EQ(aclmdlLoadFromFile("/nonexistent/x.om", &id), ACL_ERROR_READ_MODEL_FAILURE);
  EXPECT_TRUE(mentions("/nonexistent/x.om"));
  EXPECT_EQ(aclmdlUnload(12345), ACL_ERROR_INVALID_MODEL_ID);
  EXPECT_EQ(aclmdlLoadFromFile(nullptr, &id), ACL_ERROR_INVALID_PARAM);
}

TEST_F(AclModel, DescribesAndRunsFromMemory) {
  std::ifstream f(kModel, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  uint32_t id = 0;
  ASSERT_ACL_OK(aclmdlLoadFromMem(bytes.data(), bytes.size(), &id));
  aclmdlDesc* desc = aclmdlCreateDesc();
  ASSERT_ACL_OK(aclmdlGetDesc(desc, id));
  EXPECT_STREQ(aclmdlGetInputNameByIndex(desc, 0), "x");
  EXPECT_STREQ(aclmdlGetOutputNameByIndex(desc, 0), "y");
  EXPECT_EQ(aclmdlGetInputNameByIndex(desc, 1), nullptr);
  size_t index = 9;
  ASSERT_ACL_OK(aclmdlGetInputIndexByName(desc, "x", &index));
  EXPECT_EQ(index, 0u);
  aclmdlIODims dims;
  ASSERT_ACL_OK(aclmdlGetOutputDims(desc, 0, &dims));
  EXPECT_EQ(dims.dimCount, 2u);
  EXPECT_EQ(dims.dims[1], 3);
  EXPECT_EQ(aclmdlGetOutputDims(desc, 1, &dims), ACL_ERROR_INVALID_PARAM);
  EXPECT_EQ(aclmdlGetOutputDataType(desc, 0), ACL_FLOAT);
  EXPECT_EQ(aclmdlGetInputFormat(desc, 0), ACL_FORMAT_ND);

  size_t in_size = aclmdlGetInputSizeByIndex(desc, 0);
  size_t out_size = aclmdlGetOutputSizeByIndex(desc, 0);
  ASSERT_EQ(in_size, 32u);
  void *in = nullptr, *out = nullptr;
  ASSERT_ACL_OK(aclrtMalloc(&in, in_size, ACL_MEM_MALLOC_HUGE_FIRST));
  ASSERT_ACL_OK(aclrtMalloc(&out, out_size, ACL_MEM_MALLOC_HUGE_FIRST));
  aclmdlDataset* inputs = aclmdlCreateDataset();
  aclmdlDataset* outputs = aclmdlCreateDataset();
  aclDataBuffer* small = aclCreateDataBuffer(in, in_size - 4);
  ASSERT_ACL_OK(aclmdlAddDatasetBuffer(inputs, small));
  aclDataBuffer* out_buf = aclCreateDataBuffer(out, out_size);
  ASSERT_ACL_OK(aclmdlAddDatasetBuffer(outputs, out_buf));
  // A buffer smaller than the input is refused naming the input and both sizes.
  EXPECT_EQ(aclmdlExecute(id, inputs, outputs), ACL_ERROR_MODEL_INPUT_NOT_MATCH);
  EXPECT_TRUE(mentions("input 0 (x) needs a buffer of 32 bytes; it was given 28"))
      << aclGetRecentErrMsg();
  aclmdlDataset* good = aclmdlCreateDataset();
  aclDataBuffer* in_buf = aclCreateDataBuffer(in, in_size);
  ASSERT_ACL_OK(aclmdlAddDatasetBuffer(good, in_buf));
  aclmdlDataset* empty = aclmdlCreateDataset();
  EXPECT_EQ(aclmdlExecute(id, good, empty), ACL_ERROR_MODEL_OUTPUT_NOT_MATCH);
  EXPECT_TRUE(mentions("the output dataset has 0 buffers; the model has 1 outputs"));
  std::vector<float> x(8, 0.5f), y(6, -1.0f), y_file(6, -2.0f);
  ASSERT_ACL_OK(aclrtMemcpy(in, in_size, x.data(), 32, ACL_MEMCPY_HOST_TO_DEVICE));
  ASSERT_ACL_OK(aclmdlExecute(id, good, outputs));
  ASSERT_ACL_OK(aclrtMemcpy(y.data(), 24, out, out_size, ACL_MEMCPY_DEVICE_TO_HOST));

  uint32_t id_file = 0;  // the same model from its file gives the same bytes
  ASSERT_ACL_OK(aclmdlLoadFromFile(kModel.c_str(), &id_file));
  EXPECT_NE(id_file, id);
  ASSERT_ACL_OK(aclmdlExecuteAsync(id_file, good, outputs, nullptr));
  ASSERT_ACL_OK(aclrtSynchronizeStream(nullptr));
  ASSERT_ACL_OK(aclrtMemcpy(y_file.data(), 24, out, out_size, ACL_MEMCPY_DEVICE_TO_HOST));
  EXPECT_EQ(y, y_file);
  EXPECT_NE(y[0], -1.0f);

  for (aclDataBuffer* b : {small, out_buf, in_buf}) ASSERT_ACL_OK(aclDestroyDataBuffer(b));
  for (aclmdlDataset* d : {inputs, outputs, empty, good}) ASSERT_ACL_OK(aclmdlDestroyDataset(d));
  ASSERT_ACL_OK(aclmdlDestroyDesc(desc));
  ASSERT_ACL_OK(aclmdlUnload(id));
  ASSERT_ACL_OK(aclmdlUnload(id_file));
  EXPECT_EQ(aclmdlUnload(id), ACL_ERROR_INVALID_MODEL_ID);
  aclrtFree(in);
  aclrtFree(out);
}

TEST_F(AclModel, RunsOnTheDeviceItWasLoadedOn) {
  ASSERT_ACL_OK(aclrtSetDevice(1));
  uint32_t id = 0;
  ASSERT_ACL_OK(aclmdlLoadFromFile(kModel.c_str(), &id));
  void *in = nullptr, *out = nullptr;
  ASSERT_ACL_OK(aclrtMalloc(&in, 32, ACL_MEM_MALLOC_HUGE_FIRST));
  ASSERT_ACL_OK(aclrtMalloc(&out, 24, ACL_MEM_MALLOC_HUGE_FIRST));
  ASSERT_ACL_OK(aclrtMemset(in, 32, 0, 32));
  aclmdlDataset* inputs = aclmdlCreateDataset();
  aclmdlDataset* outputs = aclmdlCreateDataset();
  aclDataBuffer* in_buf = aclCreateDataBuffer(in, 32);
  aclDataBuffer* out_buf = aclCreateDataBuffer(out, 24);
  ASSERT_ACL_OK(aclmdlAddDatasetBuffer(inputs, in_buf));
  ASSERT_ACL_OK(aclmdlAddDatasetBuffer(outputs, out_buf));
  ASSERT_ACL_OK(aclrtSetDevice(0));  // another device current: the model still runs on 1
  ASSERT_ACL_OK(aclmdlExecute(id, inputs, outputs));
  float y[6];
  ASSERT_ACL_OK(aclrtMemcpy(y, sizeof(y), out, 24, ACL_MEMCPY_DEVICE_TO_HOST));
  // x = 0: y = relu(b1) W2 + b2, computed as in make_tiny_mlp.py.
  for (int p = 0; p < 3; ++p) {
    float acc = p * 0.1f;
    for (int k = 0; k < 8; ++k) {
      acc += std::max(((k % 3) - 1) * 0.05f, 0.0f) * ((((k * 3 + p) % 5) - 2) * 0.1f);
    }
    EXPECT_NEAR(y[p], acc, 1e-6f);
    EXPECT_NEAR(y[3 + p], acc, 1e-6f);
  }
  ASSERT_ACL_OK(aclmdlUnload(id));  // waits on device 1 although device 0 is current
  int32_t current = -1;
  ASSERT_ACL_OK(aclrtGetDevice(&current));
  EXPECT_EQ(current, 0);
  aclDestroyDataBuffer(in_buf);
  aclDestroyDataBuffer(out_buf);
  aclmdlDestroyDataset(inputs);
  aclmdlDestroyDataset(outputs);
  aclrtFree(in);
  aclrtFree(out);
}

}  // namespace

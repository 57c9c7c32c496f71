/* An AscendCL inference program in C, as a user writes one against CANN: load an offline
 * model (.om, from atc), describe it, copy an input to the device, execute on a stream, copy
 * the output back, unload. It runs tiny_mlp.om (made by make_tiny_mlp.py, whose weights follow
 * the formulas below) and checks the output against a host computation of the same MLP.
 * Usage: mlp_infer path/to/tiny_mlp.om. Exit status 0 when the output matches. */
#include <acl/acl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define CHECK_ACL(call)                                                          \
  do {                                                                           \
    aclError err_ = (call);                                                      \
    if (err_ != ACL_SUCCESS) {                                                   \
      fprintf(stderr, "%s failed: %d %s\n", #call, err_, aclGetRecentErrMsg()); \
      return 1;                                                                  \
    }                                                                            \
  } while (0)

enum { BATCH = 2, IN = 4, HIDDEN = 8, OUT = 3 };

/* y = relu(x W1^T + b1) W2 + b2 with make_tiny_mlp.py's weights. */
static void reference(const float* x, float* y) {
  for (int n = 0; n < BATCH; ++n) {
    float h[HIDDEN];
    for (int o = 0; o < HIDDEN; ++o) {
      float acc = ((o % 3) - 1) * 0.05f;
      for (int i = 0; i < IN; ++i) acc += x[n * IN + i] * ((((o * IN + i) % 7) - 3) * 0.1f);
      h[o] = acc > 0 ? acc : 0;
    }
    for (int p = 0; p < OUT; ++p) {
      float acc = p * 0.1f;
      for (int k = 0; k < HIDDEN; ++k) acc += h[k] * ((((k * OUT + p) % 5) - 2) * 0.1f);
      y[n * OUT + p] = acc;
    }
  }
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s model.om\n", argv[0]);
    return 2;
  }
  CHECK_ACL(aclInit(NULL));
  CHECK_ACL(aclrtSetDevice(0));
  aclrtStream stream = NULL;
  CHECK_ACL(aclrtCreateStream(&stream));

  uint32_t model_id = 0;
  CHECK_ACL(aclmdlLoadFromFile(argv[1], &model_id));
  aclmdlDesc* desc = aclmdlCreateDesc();
  CHECK_ACL(aclmdlGetDesc(desc, model_id));
  aclmdlIODims dims;
  CHECK_ACL(aclmdlGetInputDims(desc, 0, &dims));
  size_t in_size = aclmdlGetInputSizeByIndex(desc, 0);
  size_t out_size = aclmdlGetOutputSizeByIndex(desc, 0);
  if (aclmdlGetNumInputs(desc) != 1 || aclmdlGetNumOutputs(desc) != 1 || dims.dimCount != 2 ||
      dims.dims[0] != BATCH || dims.dims[1] != IN || in_size != sizeof(float) * BATCH * IN ||
      out_size != sizeof(float) * BATCH * OUT ||
      aclmdlGetInputDataType(desc, 0) != ACL_FLOAT || strcmp(dims.name, "x") != 0) {
    fprintf(stderr, "unexpected model description\n");
    return 1;
  }

  float x[BATCH * IN], y[BATCH * OUT], expected[BATCH * OUT];
  for (int i = 0; i < BATCH * IN; ++i) x[i] = i * 0.25f - 1.0f;
  void *dev_in = NULL, *dev_out = NULL;
  CHECK_ACL(aclrtMalloc(&dev_in, in_size, ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK_ACL(aclrtMalloc(&dev_out, out_size, ACL_MEM_MALLOC_HUGE_FIRST));
  aclmdlDataset* inputs = aclmdlCreateDataset();
  aclmdlDataset* outputs = aclmdlCreateDataset();
  aclDataBuffer* in_buf = aclCreateDataBuffer(dev_in, in_size);
  aclDataBuffer* out_buf = aclCreateDataBuffer(dev_out, out_size);
  CHECK_ACL(aclmdlAddDatasetBuffer(inputs, in_buf));
  CHECK_ACL(aclmdlAddDatasetBuffer(outputs, out_buf));

  CHECK_ACL(aclrtMemcpy(dev_in, in_size, x, sizeof(x), ACL_MEMCPY_HOST_TO_DEVICE));
  CHECK_ACL(aclmdlExecuteAsync(model_id, inputs, outputs, stream));
  CHECK_ACL(aclrtSynchronizeStream(stream));
  CHECK_ACL(aclrtMemcpy(y, sizeof(y), dev_out, out_size, ACL_MEMCPY_DEVICE_TO_HOST));

  reference(x, expected);
  float max_diff = 0;
  for (int i = 0; i < BATCH * OUT; ++i) {
    float d = fabsf(y[i] - expected[i]);
    if (d > max_diff) max_diff = d;
  }

  aclDestroyDataBuffer(in_buf);
  aclDestroyDataBuffer(out_buf);
  aclmdlDestroyDataset(inputs);
  aclmdlDestroyDataset(outputs);
  aclrtFree(dev_in);
  aclrtFree(dev_out);
  aclmdlDestroyDesc(desc);
  CHECK_ACL(aclmdlUnload(model_id));
  CHECK_ACL(aclrtDestroyStream(stream));
  CHECK_ACL(aclFinalize());
  if (max_diff > 1e-5f) {
    fprintf(stderr, "output differs from the host reference by %g\n", max_diff);
    return 1;
  }
  printf("%s: %dx%d output matches the host reference (max |diff| = %g)\n", argv[1], BATCH, OUT,
         max_diff);
  return 0;
}

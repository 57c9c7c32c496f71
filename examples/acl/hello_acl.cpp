// The first program of an AscendCL tutorial, unchanged: initialise, pick a device, copy a
// buffer to it and back through a stream, check the bytes, tear down. Exit status 0 on success.
#include <acl/acl.h>

#include <cstdio>
#include <vector>

#define CHECK_ACL(call)                                                              \
  do {                                                                               \
    aclError err_ = (call);                                                          \
    if (err_ != ACL_SUCCESS) {                                                       \
      std::fprintf(stderr, "%s failed: %d %s\n", #call, err_, aclGetRecentErrMsg()); \
      return 1;                                                                      \
    }                                                                                \
  } while (0)

int main() {
  CHECK_ACL(aclInit(nullptr));
  uint32_t count = 0;
  CHECK_ACL(aclrtGetDeviceCount(&count));
  const int32_t device = static_cast<int32_t>(count) - 1;
  CHECK_ACL(aclrtSetDevice(device));
  aclrtStream stream = nullptr;
  CHECK_ACL(aclrtCreateStream(&stream));

  const size_t n = 1 << 20;
  std::vector<float> host(n), back(n, 0.0f);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i) * 0.5f;
  void* dev = nullptr;
  CHECK_ACL(aclrtMalloc(&dev, n * sizeof(float), ACL_MEM_MALLOC_HUGE_FIRST));
  CHECK_ACL(aclrtMemcpyAsync(dev, n * sizeof(float), host.data(), n * sizeof(float),
                             ACL_MEMCPY_HOST_TO_DEVICE, stream));
  CHECK_ACL(aclrtMemcpyAsync(back.data(), n * sizeof(float), dev, n * sizeof(float),
                             ACL_MEMCPY_DEVICE_TO_HOST, stream));
  CHECK_ACL(aclrtSynchronizeStream(stream));
  for (size_t i = 0; i < n; ++i) {
    if (back[i] != host[i]) {
      std::fprintf(stderr, "element %zu: %f != %f\n", i, back[i], host[i]);
      return 1;
    }
  }
  CHECK_ACL(aclrtFree(dev));
  CHECK_ACL(aclrtDestroyStream(stream));
  CHECK_ACL(aclrtResetDevice(device));
  CHECK_ACL(aclFinalize());
  std::printf("hello_acl: %zu floats round-tripped through %s device %d of %u\n", n,
              aclrtGetSocName(), device, count);
  return 0;
}

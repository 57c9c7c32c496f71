// Started by the runtime tests with a chosen environment, in a fresh process.
//   npu_env_probe devices      prints the visible devices and the ASCEND_RT_VISIBLE_DEVICES warning
//   npu_env_probe hold BYTES   allocates BYTES on device 0, touches them, prints "ready", sleeps
//   npu_env_probe alloc BYTES  allocates, touches and frees BYTES on device 0, prints "ok"
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "npu/runtime.h"

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "devices") == 0) {
    int count = -1;
    npuError_t e = npuGetDeviceCount(&count);
    std::printf("count=%d error=%s\n", count, npuGetErrorName(e));
    for (int i = 0; i < count; ++i) {
      npuDeviceProp p;
      npuGetDeviceProperties(&p, i);
      std::printf("device %d physical=%d memory=%zu\n", i, p.physical_id, p.total_memory);
    }
    std::printf("warning=%s\n", npuGetVisibleDevicesWarning());
    std::printf("message=%s\n", e ? npuGetLastErrorMessage() : "");
    return 0;
  }
  if (argc >= 3 && std::strcmp(argv[1], "hold") == 0) {
    size_t bytes = std::strtoull(argv[2], nullptr, 10);
    void* p = nullptr;
    if (npuMalloc(&p, bytes) != npuSuccess) {
      std::printf("error=%s\n", npuGetLastErrorMessage());
      return 1;
    }
    npuMemset(p, 1, bytes);
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  if (argc >= 3 && std::strcmp(argv[1], "alloc") == 0) {
    size_t bytes = std::strtoull(argv[2], nullptr, 10);
    void* p = nullptr;
    if (npuMalloc(&p, bytes) != npuSuccess || npuMemset(p, 1, bytes) != npuSuccess ||
        npuFree(p) != npuSuccess) {
      std::printf("error=%s\n", npuGetLastErrorMessage());
      return 1;
    }
    std::printf("ok\n");
    return 0;
  }
  std::fprintf(stderr, "usage: npu_env_probe devices | hold BYTES | alloc BYTES\n");
  return 2;
}

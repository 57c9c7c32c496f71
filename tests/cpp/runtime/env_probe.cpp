// Started by the runtime tests with a chosen environment, in a fresh process.
//   npu_env_probe devices      prints the visible devices and the ASCEND_RT_VISIBLE_DEVICES warning
//   npu_env_probe hold BYTES   allocates BYTES on device 0, touches them, prints "ready", sleeps
//   npu_env_probe alloc BYTES  allocates, touches and frees BYTES on device 0, prints "ok"
//   npu_env_probe work BYTES   allocates BYTES, sets them to 7 (memset and copy from the host),
//                              runs a kernel and a task over them and reads back the tail (set
//                              by the memset) and the head (4 KiB copied from the host); prints
//                              what ran, what the host read and the process's resident memory
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

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
  if (argc >= 2 && std::strcmp(argv[1], "peek-shadow") == 0) {
    // Before the first device call the peek follows the environment; afterwards it is fixed.
    const int before = npuSimPeekShadow();
    setenv("NPU_SIM_SHADOW", before ? "0" : "1", 1);
    const int changed = npuSimPeekShadow();
    int count = 0;
    npuGetDeviceCount(&count);
    setenv("NPU_SIM_SHADOW", changed ? "0" : "1", 1);
    std::printf("before=%d changed=%d fixed=%d shadow=%d\n", before, changed, npuSimPeekShadow(),
                npuSimShadow());
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
  if (argc >= 3 && std::strcmp(argv[1], "work") == 0) {
    const size_t bytes = std::strtoull(argv[2], nullptr, 10);
    static int kernel_ran = 0, task_ran = 0;
    void* p = nullptr;
    std::vector<unsigned char> host(4096, 7), back(4096, 1), head(4096, 1);
    npuStream_t stream = nullptr;
    const bool ok =
        npuMalloc(&p, bytes) == npuSuccess && npuMemset(p, 7, bytes) == npuSuccess &&
        npuMemcpy(p, host.data(), host.size(), npuMemcpyHostToDevice) == npuSuccess &&
        npuStreamCreate(&stream) == npuSuccess &&
        npuLaunchKernel(stream, "probe_kernel", [](void*) { kernel_ran = 1; }, nullptr, nullptr,
                        0) == npuSuccess &&
        npuLaunchTask(stream, "probe_task", [](void*) { task_ran = 1; }, nullptr) == npuSuccess &&
        npuStreamSynchronize(stream) == npuSuccess &&
        npuMemcpy(back.data(), static_cast<char*>(p) + bytes - back.size(), back.size(),
                  npuMemcpyDeviceToHost) == npuSuccess &&
        npuMemcpy(head.data(), p, head.size(), npuMemcpyDeviceToHost) == npuSuccess;
    if (!ok) {
      std::printf("error=%s\n", npuGetLastErrorMessage());
      return 1;
    }
    long rss_kb = -1;
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, f)) {
        if (std::strncmp(line, "VmRSS:", 6) == 0) rss_kb = std::strtol(line + 6, nullptr, 10);
      }
      std::fclose(f);
    }
    std::printf("shadow=%d kernel_ran=%d task_ran=%d read_back=%d read_head=%d rss_mb=%ld\n",
                npuSimShadow(), kernel_ran, task_ran, back[0] + back[back.size() - 1],
                head[0] + head[head.size() - 1], rss_kb / 1024);
    return 0;
  }
  std::fprintf(stderr, "usage: npu_env_probe devices | hold BYTES | alloc BYTES | work BYTES\n");
  return 2;
}

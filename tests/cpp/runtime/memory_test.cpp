#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

size_t residentBytes() {
  std::ifstream in("/proc/self/statm");
  size_t total = 0, resident = 0;
  in >> total >> resident;
  return resident * 4096;
}

std::string lastMessage() { return npuGetLastErrorMessage(); }

}  // namespace

TEST(Memory, MallocFreeAndInfo) {
  size_t free0 = 0, total = 0;
  ASSERT_NPU_OK(npuMemGetInfo(&free0, &total));
  EXPECT_EQ(total, 64ull << 30);
  void* p = nullptr;
  ASSERT_NPU_OK(npuMalloc(&p, 1000));
  ASSERT_NE(p, nullptr);
  size_t free1 = 0;
  ASSERT_NPU_OK(npuMemGetInfo(&free1, nullptr));
  EXPECT_EQ(free0 - free1, 1000u);  // capacity is accounted exactly
  ASSERT_NPU_OK(npuFree(p));
  ASSERT_NPU_OK(npuMemGetInfo(&free1, nullptr));
  EXPECT_EQ(free1, free0);
}

TEST(Memory, FreeOfNullIsANoOpAndDoubleFreeIsAnError) {
  EXPECT_EQ(npuFree(nullptr), npuSuccess);
  void* p = nullptr;
  ASSERT_NPU_OK(npuMalloc(&p, 64));
  ASSERT_NPU_OK(npuFree(p));
  EXPECT_EQ(npuFree(p), npuErrorInvalidDevicePointer);
  EXPECT_NE(lastMessage().find("already freed"), std::string::npos) << lastMessage();
  int host = 0;
  EXPECT_EQ(npuFree(&host), npuErrorInvalidDevicePointer);
}

TEST(Memory, FreeOfAnInteriorPointerNamesTheBase) {
  void* p = nullptr;
  ASSERT_NPU_OK(npuMalloc(&p, 4096));
  EXPECT_EQ(npuFree(static_cast<char*>(p) + 16), npuErrorInvalidDevicePointer);
  EXPECT_NE(lastMessage().find("points inside an allocation"), std::string::npos);
  ASSERT_NPU_OK(npuFree(p));
}

TEST(Memory, CapacityIsEnforcedExactly) {
  setenv("NPU_SIM_HBM_GB", "1", 1);  // this test runs in its own process
  const size_t capacity = 1ull << 30;
  void* p = nullptr;
  EXPECT_EQ(npuMalloc(&p, capacity + 1), npuErrorMemoryAllocation);
  EXPECT_NE(lastMessage().find("out of memory"), std::string::npos) << lastMessage();
  EXPECT_EQ(p, nullptr);
  ASSERT_NPU_OK(npuMalloc(&p, capacity));  // exactly at capacity fits
  void* q = nullptr;
  EXPECT_EQ(npuMalloc(&q, 1), npuErrorMemoryAllocation);
  ASSERT_NPU_OK(npuFree(p));
  ASSERT_NPU_OK(npuMalloc(&q, 1));
  ASSERT_NPU_OK(npuFree(q));
}

TEST(Memory, PagesAreCommittedOnlyWhenTouchedAndReturnedOnFree) {
  size_t before = residentBytes();
  void* p = nullptr;
  ASSERT_NPU_OK(npuMalloc(&p, 16ull << 30));  // 16 GiB of "HBM"
  EXPECT_LT(residentBytes(), before + (64u << 20));
  const size_t touched = 256u << 20;
  ASSERT_NPU_OK(npuMemset(p, 7, touched));
  EXPECT_GE(residentBytes(), before + touched - (16u << 20));
  ASSERT_NPU_OK(npuFree(p));
  EXPECT_LT(residentBytes(), before + (64u << 20));
}

TEST(Memory, CopiesInEveryDirectionAndAcrossDevices) {
  std::vector<int> src(1024), back(1024, 0);
  for (int i = 0; i < 1024; ++i) src[i] = i * 3 + 1;
  const size_t bytes = src.size() * sizeof(int);
  void* d0 = nullptr;
  void* d1 = nullptr;
  ASSERT_NPU_OK(npuSetDevice(0));
  ASSERT_NPU_OK(npuMalloc(&d0, bytes));
  ASSERT_NPU_OK(npuSetDevice(1));
  ASSERT_NPU_OK(npuMalloc(&d1, bytes));
  ASSERT_NPU_OK(npuMemcpy(d0, src.data(), bytes, npuMemcpyHostToDevice));
  ASSERT_NPU_OK(npuMemcpy(d1, d0, bytes, npuMemcpyDeviceToDevice));  // across devices
  ASSERT_NPU_OK(npuMemcpy(back.data(), d1, bytes, npuMemcpyDeviceToHost));
  EXPECT_EQ(back, src);

  npuStream_t s = nullptr;
  ASSERT_NPU_OK(npuStreamCreate(&s));
  ASSERT_NPU_OK(npuMemsetAsync(d1, 0, bytes, s));
  ASSERT_NPU_OK(npuMemcpyAsync(back.data(), d1, bytes, npuMemcpyDefault, s));
  ASSERT_NPU_OK(npuStreamSynchronize(s));
  EXPECT_EQ(back, std::vector<int>(1024, 0));
  npuPointerAttributes attr;
  ASSERT_NPU_OK(npuPointerGetAttributes(&attr, static_cast<char*>(d1) + 100));
  EXPECT_EQ(attr.type, npuMemoryTypeDevice);
  EXPECT_EQ(attr.device, 1);
  EXPECT_EQ(attr.base, d1);
  EXPECT_EQ(attr.size, bytes);
  ASSERT_NPU_OK(npuPointerGetAttributes(&attr, src.data()));
  EXPECT_EQ(attr.type, npuMemoryTypeUnregistered);
  ASSERT_NPU_OK(npuStreamDestroy(s));
  ASSERT_NPU_OK(npuFree(d0));
  ASSERT_NPU_OK(npuFree(d1));
}

TEST(Memory, BadCopiesAreErrorsNotCrashes) {
  void* d = nullptr;
  ASSERT_NPU_OK(npuMalloc(&d, 100));
  char host[256];
  EXPECT_EQ(npuMemcpy(nullptr, host, 10, npuMemcpyHostToDevice), npuErrorInvalidValue);
  EXPECT_NE(lastMessage().find("dst is NULL"), std::string::npos);
  EXPECT_EQ(npuMemcpy(d, host, 101, npuMemcpyHostToDevice), npuErrorInvalidValue);
  EXPECT_NE(lastMessage().find("runs past the end"), std::string::npos) << lastMessage();
  EXPECT_EQ(npuMemcpy(host, host + 128, 10, npuMemcpyHostToDevice),
            npuErrorInvalidMemcpyDirection);
  EXPECT_NE(lastMessage().find("is host memory but kind is npuMemcpyHostToDevice"),
            std::string::npos)
      << lastMessage();
  EXPECT_EQ(npuMemsetAsync(host, 0, 10, nullptr), npuErrorInvalidDevicePointer);
  EXPECT_EQ(npuMemcpy(d, host, 0, npuMemcpyHostToDevice), npuSuccess);  // empty copy
  ASSERT_NPU_OK(npuFree(d));
  EXPECT_EQ(npuMemcpy(d, host, 10, npuMemcpyHostToDevice), npuErrorInvalidMemcpyDirection);
}

TEST(Memory, PinnedHostMemory) {
  void* h = nullptr;
  ASSERT_NPU_OK(npuMallocHost(&h, 4096));
  npuPointerAttributes attr;
  ASSERT_NPU_OK(npuPointerGetAttributes(&attr, h));
  EXPECT_EQ(attr.type, npuMemoryTypeHost);
  EXPECT_EQ(npuFree(h), npuErrorInvalidDevicePointer);  // wrong free function is named
  EXPECT_NE(lastMessage().find("npuFreeHost"), std::string::npos);
  ASSERT_NPU_OK(npuFreeHost(h));
  EXPECT_EQ(npuFreeHost(h), npuErrorInvalidValue);
}

TEST(Memory, VirtualMemoryMapsAndUnmapsCapacity) {
  const size_t g = npuMemGetGranularity();
  void* base = nullptr;
  ASSERT_NPU_OK(npuMemAddressReserve(&base, 64 * g));
  size_t free0 = 0;
  ASSERT_NPU_OK(npuMemGetInfo(&free0, nullptr));
  char* p = static_cast<char*>(base);
  ASSERT_NPU_OK(npuMemMap(p, 2 * g));
  size_t free1 = 0;
  ASSERT_NPU_OK(npuMemGetInfo(&free1, nullptr));
  EXPECT_EQ(free0 - free1, 2 * g);
  ASSERT_NPU_OK(npuMemset(p, 1, 2 * g));
  EXPECT_EQ(npuMemset(p + 2 * g, 1, 16), npuErrorInvalidDevicePointer);  // not mapped
  EXPECT_EQ(npuMemMap(p + 1, g), npuErrorInvalidValue);                  // misaligned
  EXPECT_EQ(npuMemMap(p, g), npuErrorInvalidValue);                      // already mapped
  ASSERT_NPU_OK(npuMemUnmap(p + g, g));
  ASSERT_NPU_OK(npuMemGetInfo(&free1, nullptr));
  EXPECT_EQ(free0 - free1, g);
  ASSERT_NPU_OK(npuMemAddressFree(base));
  ASSERT_NPU_OK(npuMemGetInfo(&free1, nullptr));
  EXPECT_EQ(free1, free0);
}

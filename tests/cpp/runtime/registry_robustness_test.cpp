// The registry never crashes or hangs its users: readers skip (with a note) whatever is not a
// sound record, and a process whose runtime directory is unusable warns once and runs
// unregistered.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "npu/registry.h"
#include "test_util.h"

namespace {

std::string freshDir() {
  char tmpl[] = "/tmp/npu-registry-robust-XXXXXX";
  std::string dir = mkdtemp(tmpl);
  setenv("NPU_SIM_RUNTIME_DIR", dir.c_str(), 1);
  return dir;
}

// The record layout of runtime/registry.cpp (version 2), for writing hostile files.
struct RecordBytes {
  uint32_t magic = 0x4e505552;
  uint32_t version = 2;
  int32_t pid = 0;
  int32_t device_count = 8;
  uint64_t start_time = 0;
  char name[64] = "forged";
  uint64_t memory[NPU_REGISTRY_MAX_DEVICES] = {};
  uint64_t busy[NPU_REGISTRY_MAX_DEVICES] = {};
  uint64_t health[NPU_REGISTRY_MAX_DEVICES] = {};
};

void writeFile(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
}

// Makes a file look older than the readers' grace period for records being created.
void age(const std::string& path) {
  struct timeval old[2] = {{1000000000, 0}, {1000000000, 0}};
  lutimes(path.c_str(), old);
}

std::string recordPath(const std::string& dir, long pid) {
  return dir + "/proc-" + std::to_string(pid) + ".reg";
}

int listedCount() {
  std::vector<npuProcessInfo> out(16);
  int count = -1;
  EXPECT_EQ(npuRegistryList(out.data(), 16, &count), npuSuccess);
  return count;
}

std::string notes() { return npuRegistryListNotes(); }

}  // namespace

TEST(RegistryRobustness, AFifoNamedLikeARecordDoesNotHangReaders) {
  std::string dir = freshDir();
  ASSERT_EQ(mkfifo(recordPath(dir, 4242).c_str(), 0600), 0);
  EXPECT_EQ(listedCount(), 0);  // returns (a blocking open would hang here forever)
  EXPECT_NE(notes().find("proc-4242.reg: not a regular file"), std::string::npos) << notes();
}

TEST(RegistryRobustness, ALinkNamedLikeARecordIsNotFollowed) {
  std::string dir = freshDir();
  ASSERT_EQ(symlink("/dev/zero", recordPath(dir, 4243).c_str()), 0);
  EXPECT_EQ(listedCount(), 0);
  EXPECT_NE(notes().find("proc-4243.reg: a symbolic link"), std::string::npos) << notes();
}

TEST(RegistryRobustness, ATruncatedRecordIsSkippedWithANote) {
  std::string dir = freshDir();
  const pid_t live = getppid();  // alive: the record cannot be dropped as a dead process's
  RecordBytes rec;
  rec.pid = live;
  writeFile(recordPath(dir, live), &rec, 100);
  age(recordPath(dir, live));
  EXPECT_EQ(listedCount(), 0);
  EXPECT_NE(notes().find("not a complete record (100 bytes, a record is " +
                         std::to_string(sizeof(RecordBytes)) + ")"),
            std::string::npos)
      << notes();
  // A truncated record of a dead process is simply removed.
  const std::string dead = recordPath(dir, 999999);
  writeFile(dead, &rec, 100);
  age(dead);
  listedCount();
  EXPECT_NE(access(dead.c_str(), F_OK), 0);
}

TEST(RegistryRobustness, RecordsWithPidZeroOrNegativeAreNotShownAsLive) {
  std::string dir = freshDir();
  for (int pid : {0, -1}) {
    RecordBytes rec;
    rec.pid = pid;
    writeFile(recordPath(dir, pid), &rec, sizeof(rec));
  }
  EXPECT_EQ(listedCount(), 0);
  EXPECT_NE(notes().find("proc-0.reg: pid 0 (must be positive"), std::string::npos) << notes();
  EXPECT_NE(notes().find("proc--1.reg: pid -1 (must be positive"), std::string::npos) << notes();
}

TEST(RegistryRobustness, SizesOutOfRangeAreRefused) {
  std::string dir = freshDir();
  const pid_t live = getppid();
  RecordBytes rec;
  rec.pid = live;
  rec.memory[3] = uint64_t{1} << 60;
  writeFile(recordPath(dir, live), &rec, sizeof(rec));
  EXPECT_EQ(listedCount(), 0);
  EXPECT_NE(notes().find("memory of device 3 is 1152921504606846976 bytes"), std::string::npos)
      << notes();
  rec.memory[3] = 0;
  rec.device_count = 1000;
  writeFile(recordPath(dir, live), &rec, sizeof(rec));
  EXPECT_EQ(listedCount(), 0);
  EXPECT_NE(notes().find("device count 1000 is outside 1..64"), std::string::npos) << notes();
}

TEST(RegistryRobustness, OwnRecordHasItsBlocksReserved) {
  std::string dir = freshDir();
  void* p = nullptr;
  ASSERT_NPU_OK(npuMalloc(&p, 4096));  // attaches the registry
  struct stat st {};
  ASSERT_EQ(stat(recordPath(dir, getpid()).c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(static_cast<size_t>(st.st_size), sizeof(RecordBytes));
  // Not sparse: a full file system refuses the record up front instead of SIGBUS later.
  EXPECT_GE(static_cast<size_t>(st.st_blocks) * 512, sizeof(RecordBytes));
  EXPECT_EQ(listedCount(), 1);
  EXPECT_EQ(notes(), "");
  ASSERT_NPU_OK(npuFree(p));
}

TEST(RegistryRobustness, AStaleFifoInPlaceOfOurOwnRecordIsReplaced) {
  std::string dir = freshDir();
  ASSERT_EQ(mkfifo(recordPath(dir, getpid()).c_str(), 0600), 0);
  void* p = nullptr;
  ASSERT_NPU_OK(npuMalloc(&p, 4096));
  struct stat st {};
  ASSERT_EQ(lstat(recordPath(dir, getpid()).c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(listedCount(), 1);
  ASSERT_NPU_OK(npuFree(p));
}

TEST(RegistryRobustness, AnUnusableDirectoryWarnsOnceAndTheProcessRunsUnregistered) {
  char tmpl[] = "/tmp/npu-registry-file-XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string file = tmpl;
  struct Case {
    std::string dir;
    std::string why;
  } cases[] = {{file, "it is not a directory"},
               {file + "/sub", "cannot create it: Not a directory"}};
  for (const Case& c : cases) {
    std::string out = runProbe("NPU_SIM_RUNTIME_DIR=" + c.dir, "alloc 1048576");
    EXPECT_NE(out.find("ok\n"), std::string::npos) << "the runtime must work all the same: "
                                                   << out;
    const std::string warning = "SimNPU warning: NPU_SIM_RUNTIME_DIR='" + c.dir +
                                "' is unusable: " + c.why;
    EXPECT_NE(out.find(warning), std::string::npos) << out;
    EXPECT_EQ(out.find("SimNPU warning"), out.rfind("SimNPU warning")) << "warned twice: " << out;
    EXPECT_NE(out.find("runs unregistered"), std::string::npos) << out;
  }
  unlink(file.c_str());
}

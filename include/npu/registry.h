/*
 * The process registry: how tools (npu-smi) see who uses the simulated devices.
 *
 * Each process that initialises a device publishes a small shared file in the runtime
 * directory ($NPU_SIM_RUNTIME_DIR, else /tmp/simnpu-<uid>): its pid, start time, name and,
 * per physical device, the device memory it holds and the time its streams were busy. The
 * runtime updates it in place (plain stores into a shared mapping, no system calls) and
 * removes it at exit. A process killed with SIGKILL leaves its file behind; readers detect
 * that the pid is dead (or was reused by another process) and drop the entry.
 *
 * Robustness: the file's blocks are reserved (posix_fallocate) before it is mapped, so a full
 * file system refuses the record instead of killing the process with SIGBUS later; an
 * unusable directory gives one warning naming NPU_SIM_RUNTIME_DIR and the process runs
 * unregistered. Readers open records non-blocking without following links, copy them with
 * pread (no mapping), and skip (with a note) anything that is not a regular file of the right
 * size with a positive pid matching its name and in-range sizes.
 */
#ifndef NPU_REGISTRY_H_
#define NPU_REGISTRY_H_

#include "npu/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NPU_REGISTRY_MAX_DEVICES NPU_MAX_DEVICES /* records are sized by it: part of the format */

typedef struct npuProcessInfo {
  int pid;
  char name[64];
  int device_count;                              /* physical devices the process knew */
  uint64_t memory_bytes[NPU_REGISTRY_MAX_DEVICES]; /* by physical device id */
  uint64_t busy_ns[NPU_REGISTRY_MAX_DEVICES];      /* stream busy time, monotonic */
  int health[NPU_REGISTRY_MAX_DEVICES];            /* npuDeviceHealth, as this process sees it */
} npuProcessInfo;

/* Directory holding the registry files. */
NPU_API const char* npuRegistryDir(void);
/* Lists live processes into out[0..capacity); *count receives how many exist (may exceed
 * capacity). Files of dead processes are removed. */
NPU_API npuError_t npuRegistryList(npuProcessInfo* out, int capacity, int* count);
/* Records npuRegistryList skipped on this thread's last call, one per line ("skipped PATH:
 * why"): files that are not regular files, truncated or invalid records (pid <= 0, sizes out
 * of range). Tools show them as notes. "" if none. */
NPU_API const char* npuRegistryListNotes(void);
/* Physical device count and capacity as the simulator is configured (ignores
 * ASCEND_RT_VISIBLE_DEVICES, as npu-smi does). */
NPU_API int npuPhysicalDeviceCount(void);
NPU_API size_t npuPhysicalDeviceMemory(void);

#ifdef __cplusplus
}
#endif

#endif /* NPU_REGISTRY_H_ */

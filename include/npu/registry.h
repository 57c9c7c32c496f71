/*
 * The process registry: how tools (npu-smi) see who uses the simulated devices.
 *
 * Each process that initialises a device publishes a small shared file in the runtime
 * directory ($NPU_SIM_RUNTIME_DIR, else /tmp/simnpu-<uid>): its pid, start time, name and,
 * per physical device, the device memory it holds and the time its streams were busy. The
 * runtime updates it in place (plain stores into a shared mapping, no system calls) and
 * removes it at exit. A process killed with SIGKILL leaves its file behind; readers detect
 * that the pid is dead (or was reused by another process) and drop the entry.
 */
#ifndef NPU_REGISTRY_H_
#define NPU_REGISTRY_H_

#include "npu/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NPU_REGISTRY_MAX_DEVICES 64

typedef struct npuProcessInfo {
  int pid;
  char name[64];
  int device_count;                              /* physical devices the process knew */
  uint64_t memory_bytes[NPU_REGISTRY_MAX_DEVICES]; /* by physical device id */
  uint64_t busy_ns[NPU_REGISTRY_MAX_DEVICES];      /* stream busy time, monotonic */
} npuProcessInfo;

/* Directory holding the registry files. */
NPU_API const char* npuRegistryDir(void);
/* Lists live processes into out[0..capacity); *count receives how many exist (may exceed
 * capacity). Files of dead processes are removed. */
NPU_API npuError_t npuRegistryList(npuProcessInfo* out, int capacity, int* count);
/* Physical device count and capacity as the simulator is configured (ignores
 * ASCEND_RT_VISIBLE_DEVICES, as npu-smi does). */
NPU_API int npuPhysicalDeviceCount(void);
NPU_API size_t npuPhysicalDeviceMemory(void);

#ifdef __cplusplus
}
#endif

#endif /* NPU_REGISTRY_H_ */

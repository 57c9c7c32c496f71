/*
 * SimNPU runtime: the simulated counterpart of the CANN runtime (aclrt*).
 *
 * A flat C API whose names mirror CUDA's runtime (cudaMalloc -> npuMalloc, ...), so that
 * anyone who knows one knows the other. No PyTorch in here or below.
 *
 * Model:
 *  - A process sees NPU_SIM_DEVICE_COUNT simulated devices (8 by default), filtered and
 *    renumbered by ASCEND_RT_VISIBLE_DEVICES. The current device is per host thread.
 *  - Device memory lives in the host address space, but it is a separate resource: each
 *    device has an exact HBM capacity (NPU_SIM_HBM_GB, 64 by default) and pages are only
 *    committed when touched, and returned to the OS on free.
 *  - A stream is a FIFO of tasks run by its own worker thread; npuLaunchTask returns at once
 *    (ASCEND_LAUNCH_BLOCKING=1 makes it wait). Events mark points in a stream.
 *  - A stream queues at most NPU_SIM_MAX_PENDING_LAUNCHES tasks (1024 by default); a launch
 *    onto a full stream waits until the stream has worked its queue down (back-pressure, as
 *    CUDA blocks the host at about a thousand pending launches).
 *  - Errors belong to their stream. A task that fails stores its error (with the task name) in
 *    its stream; the stream then skips its remaining work tasks (event records still complete,
 *    so nobody hangs, and carry the error to the event) until the error is cleared. Every
 *    synchronize or query that covers the stream reports the error while it is there:
 *    npuStreamSynchronize / npuStreamQuery / npuMemcpy / npuMemset of the stream report and
 *    clear it; npuDeviceSynchronize reports it and clears it only once each thread that
 *    launched the failed (or a skipped) task has been told, so a thread synchronizing the
 *    device never takes the error away from the thread whose work was lost; npuEventSynchronize
 *    / npuEventQuery of an event recorded after the failure report it without clearing it, and
 *    a stream that waits for such an event fails too. The error is also kept as the process's
 *    pending error, returned (once) by npuGetLastError.
 *
 * Every call returns npuSuccess or an error code; npuGetLastErrorMessage() gives the detailed
 * message of the last error on the calling thread.
 */
#ifndef NPU_RUNTIME_H_
#define NPU_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#if defined(NPU_RUNTIME_BUILD)
#define NPU_API __attribute__((visibility("default")))
#else
#define NPU_API
#endif

/* The most devices a process can see (NPU_SIM_DEVICE_COUNT's upper bound); the allocator, the
 * adapter and the process registry size their per-device tables with it. */
#define NPU_MAX_DEVICES 64

#ifdef __cplusplus
extern "C" {
#endif

typedef enum npuError_t {
  npuSuccess = 0,
  npuErrorInvalidValue = 1,         /* bad argument: null pointer, bad size, bad flag */
  npuErrorMemoryAllocation = 2,     /* device (or host) memory exhausted */
  npuErrorInvalidDevice = 3,        /* device index out of range */
  npuErrorNoDevice = 4,             /* no device visible (ASCEND_RT_VISIBLE_DEVICES) */
  npuErrorInvalidDevicePointer = 5, /* pointer is not (or no longer) device memory */
  npuErrorInvalidMemcpyDirection = 6,
  npuErrorInvalidResourceHandle = 7, /* bad stream or event handle */
  npuErrorNotReady = 8,              /* query: work still pending (not a failure) */
  npuErrorLaunchFailure = 9,         /* a task failed while running on a stream */
  npuErrorNotSupported = 10,
  npuErrorInitialization = 11,
  npuErrorStreamCaptureUnsupported = 12, /* not allowed while a stream captures a graph */
  npuErrorStreamCaptureInvalidated = 13, /* the capture was invalidated by an earlier error */
  npuErrorStreamCaptureUnjoined = 14,    /* a forked stream did not rejoin the origin stream */
  npuErrorDeviceTaskAbort = 15, /* the device was stopped (npuDeviceTaskAbort): CANN's 107022 */
  npuErrorDeviceMemError = 16,  /* an uncorrectable HBM error (UCE): CANN's 507053 */
  npuErrorDeviceLost = 17,      /* the device stopped answering: CANN's 507010 (lost heartbeat) */
  npuErrorUnknown = 99
} npuError_t;

typedef struct npuStream_st* npuStream_t; /* NULL means the current device's default stream */
typedef struct npuEvent_st* npuEvent_t;

typedef enum npuMemcpyKind {
  npuMemcpyHostToHost = 0,
  npuMemcpyHostToDevice = 1,
  npuMemcpyDeviceToHost = 2,
  npuMemcpyDeviceToDevice = 3,
  npuMemcpyDefault = 4 /* infer the direction from the pointers */
} npuMemcpyKind;

typedef struct npuDeviceProp {
  char name[64];        /* "Ascend910B2" */
  char soc_version[64]; /* "Ascend910B2" */
  size_t total_memory;  /* bytes of HBM */
  int cube_core_num;    /* AI Cube cores */
  int vector_core_num;  /* AI Vector cores */
  int physical_id;      /* id before ASCEND_RT_VISIBLE_DEVICES renumbering */
  int major;            /* capability, as torch.npu.get_device_capability reports */
  int minor;
} npuDeviceProp;

typedef enum npuMemoryType {
  npuMemoryTypeUnregistered = 0, /* ordinary host memory */
  npuMemoryTypeHost = 1,         /* pinned host memory from npuMallocHost */
  npuMemoryTypeDevice = 2
} npuMemoryType;

typedef struct npuPointerAttributes {
  npuMemoryType type;
  int device;       /* -1 for host memory */
  void* base;       /* start of the allocation holding the pointer (NULL if unregistered) */
  size_t size;      /* size of that allocation */
} npuPointerAttributes;

/* ---- errors ---------------------------------------------------------------------------- */
NPU_API npuError_t npuGetLastError(void);  /* returns and clears the pending error */
NPU_API npuError_t npuPeekAtLastError(void);
NPU_API const char* npuGetErrorName(npuError_t error);   /* "npuErrorInvalidValue" */
NPU_API const char* npuGetErrorString(npuError_t error); /* one-line description */
/* Detailed message of the last error returned on this thread, e.g. naming the argument or
 * the failed task; "" if none. Valid until the next runtime call on this thread. */
NPU_API const char* npuGetLastErrorMessage(void);

/* ---- devices --------------------------------------------------------------------------- */
NPU_API npuError_t npuGetDeviceCount(int* count);
NPU_API npuError_t npuSetDevice(int device);
NPU_API npuError_t npuGetDevice(int* device);
NPU_API npuError_t npuGetDeviceProperties(npuDeviceProp* prop, int device);
NPU_API npuError_t npuDeviceSynchronize(void); /* waits for every stream of the current device */
/* Percentage (0-100) of the wall time since the previous call during which the streams of
 * `device` were running tasks (0 on the first call). */
NPU_API npuError_t npuDeviceGetUtilization(int device, int* percent);
NPU_API npuError_t npuDeviceGetStreamPriorityRange(int* least, int* greatest);
/* Non-zero when ASCEND_RT_VISIBLE_DEVICES was set but invalid; the message names it. */
NPU_API const char* npuGetVisibleDevicesWarning(void);
/* The device count the runtime would have if it started now, without starting it: until the
 * first call that reads the configuration (npuGetDeviceCount, npuSetDevice, ...), the
 * environment (NPU_SIM_DEVICE_COUNT, ASCEND_RT_VISIBLE_DEVICES) is read afresh on each call; after
 * it, the fixed count. When the count is 0 and `why` is not NULL, `why` receives the reason
 * (a rejected variable), or "" if there is none. torch.npu.device_count() before initialisation
 * (torch.cuda's rule: not cached until initialised). */
NPU_API npuError_t npuPeekDeviceCount(int* count, char* why, size_t why_size);

/* ---- memory ---------------------------------------------------------------------------- */
NPU_API npuError_t npuMalloc(void** ptr, size_t size); /* on the current device */
NPU_API npuError_t npuFree(void* ptr);                 /* NULL is a no-op */
NPU_API npuError_t npuMemGetInfo(size_t* free_bytes, size_t* total_bytes);
NPU_API npuError_t npuMallocHost(void** ptr, size_t size); /* pinned host memory */
NPU_API npuError_t npuFreeHost(void* ptr);
NPU_API npuError_t npuPointerGetAttributes(npuPointerAttributes* attr, const void* ptr);

/* Virtual memory, as cuMemAddressReserve / cuMemMap: reserve an address range that costs
 * no capacity, then map (commit capacity for) and unmap pieces of it. Granularity is
 * npuMemGetGranularity() bytes; offsets and sizes must be multiples of it. */
NPU_API size_t npuMemGetGranularity(void);
NPU_API npuError_t npuMemAddressReserve(void** ptr, size_t size); /* current device */
NPU_API npuError_t npuMemAddressFree(void* ptr);  /* unmaps what is still mapped */
NPU_API npuError_t npuMemMap(void* ptr, size_t size);
NPU_API npuError_t npuMemUnmap(void* ptr, size_t size);

NPU_API npuError_t npuMemcpy(void* dst, const void* src, size_t count, npuMemcpyKind kind);
NPU_API npuError_t npuMemcpyAsync(void* dst, const void* src, size_t count, npuMemcpyKind kind,
                                  npuStream_t stream);
NPU_API npuError_t npuMemset(void* ptr, int value, size_t count);
NPU_API npuError_t npuMemsetAsync(void* ptr, int value, size_t count, npuStream_t stream);

/* ---- streams --------------------------------------------------------------------------- */
NPU_API npuError_t npuStreamCreate(npuStream_t* stream);
/* Lower numbers are higher priority, as in CUDA: 0 (normal) or -1 (high). */
NPU_API npuError_t npuStreamCreateWithPriority(npuStream_t* stream, unsigned int flags,
                                               int priority);
NPU_API npuError_t npuStreamDestroy(npuStream_t stream); /* finishes pending work first */
NPU_API npuError_t npuStreamSynchronize(npuStream_t stream);
NPU_API npuError_t npuStreamQuery(npuStream_t stream); /* npuSuccess, npuErrorNotReady, error */
NPU_API npuError_t npuStreamWaitEvent(npuStream_t stream, npuEvent_t event, unsigned int flags);
/* SimNPU: a host run. When `stream` is idle (nothing queued or running), makes the launches the
 * calling thread then makes onto it (tasks, copies, event records and waits) run on the calling
 * thread at once, in order, as the stream's tasks: no hand-off to the stream's worker, whose
 * wake-up costs more than a short task. Returns npuSuccess when the host run began, and
 * npuErrorNotReady (not an error: launches then queue as usual) when the stream is busy or
 * capturing, or NPU_SIM_INLINE_TASKS=0. Launches from other threads meanwhile queue behind and
 * run once the host run ends; a launch by the owner behind such work ends the host run early.
 * End it with npuStreamEndHostRun (harmless if it ended early). */
NPU_API npuError_t npuStreamBeginHostRun(npuStream_t stream);
NPU_API npuError_t npuStreamEndHostRun(npuStream_t stream);
/* Back-pressure counters of a stream. */
typedef struct npuStreamQueueStats {
  size_t pending;        /* tasks queued now (not counting the one running) */
  size_t peak_pending;   /* the most tasks queued at once since the stream was created */
  size_t max_pending;    /* the bound (NPU_SIM_MAX_PENDING_LAUNCHES) */
  uint64_t launch_waits; /* launches that waited for room in the queue */
  uint64_t overflows;    /* launches queued beyond the bound: from a stream worker, or after the
                            stream finished no task for 250 ms (a deadlock guard) */
} npuStreamQueueStats;
NPU_API npuError_t npuStreamGetQueueStats(npuStream_t stream, npuStreamQueueStats* stats);
NPU_API npuError_t npuStreamGetPriority(npuStream_t stream, int* priority);
NPU_API npuError_t npuStreamGetDevice(npuStream_t stream, int* device);
/* A small number naming the stream within its device: 0 for the default stream, then 1, 2, ...
 * in creation order (never reused). Profiler records carry it. */
NPU_API npuError_t npuStreamGetId(npuStream_t stream, int* id);
/* The default stream of `device` (never NULL); lets callers hold a concrete handle. */
NPU_API npuError_t npuGetDefaultStream(int device, npuStream_t* stream);

typedef void (*npuTaskFn)(void* arg);
/* Enqueues fn(arg) on `stream`. `name` is copied and appears in error messages. A task
 * reports failure with npuTaskFail (from inside fn); a C++ exception escaping fn is caught
 * and reported the same way. */
NPU_API npuError_t npuLaunchTask(npuStream_t stream, const char* name, npuTaskFn fn, void* arg);
/* Called from inside a running task: marks it failed with `message`. */
NPU_API void npuTaskFail(const char* message);
/* Like npuLaunchTask, but the runtime owns `arg`: fn(arg) may run several times (when the
 * launch is captured into a graph and the graph is replayed), and release(arg) runs once when
 * no run is left (after the task ran or was skipped, or when its graph is destroyed). The only
 * form a capturing stream accepts. On an error return nothing was queued and the caller still
 * owns arg, except npuErrorLaunchFailure under ASCEND_LAUNCH_BLOCKING=1 (the task ran and was
 * released). release may be NULL. */
typedef void (*npuTaskRelease)(void* arg);
NPU_API npuError_t npuLaunchTaskWithRelease(npuStream_t stream, const char* name, npuTaskFn fn,
                                            npuTaskRelease release, void* arg);
/* Like npuLaunchTaskWithRelease, for a task of a microsecond or so (a kernel on a few thousand
 * elements): when `stream` is idle (nothing queued or running, not capturing) and the caller is
 * not itself a task, fn(arg) and release(arg) run at once on the calling thread, in stream
 * order, instead of being handed to the stream's worker, whose wake-up would cost more than the
 * task. Otherwise the task is queued as usual. Either way the stream counts it, and a failure is
 * reported by the next synchronize or query as for any task. NPU_SIM_INLINE_TASKS=0 queues
 * every task (to compare, or to keep the host thread free of kernel work). */
NPU_API npuError_t npuLaunchShortTaskWithRelease(npuStream_t stream, const char* name,
                                                 npuTaskFn fn, npuTaskRelease release, void* arg);
/* npuLaunchTaskWithRelease then npuStreamSynchronize(stream), whose result it returns; on an
 * idle stream the task runs on the calling thread, which would only wait for the worker
 * otherwise (NPU_SIM_INLINE_TASKS=0: always the worker). Refused while the stream captures.
 * On an error other than npuErrorLaunchFailure the task never ran and the caller owns arg. */
NPU_API npuError_t npuLaunchTaskSync(npuStream_t stream, const char* name, npuTaskFn fn,
                                     npuTaskRelease release, void* arg);

/* A kernel: a task that reads and writes device memory and does nothing else (no host state,
 * no runtime calls). As npuLaunchTaskWithRelease (npuLaunchShortTaskWithRelease with
 * npuKernelShort), except under shadow execution, where the task keeps its place in the stream
 * (ordering, events, graphs, profiler records) but fn is not called; release still runs. */
#define npuKernelShort 0x1u
NPU_API npuError_t npuLaunchKernel(npuStream_t stream, const char* name, npuTaskFn fn,
                                   npuTaskRelease release, void* arg, unsigned int flags);

/* ---- shadow execution (NPU_SIM_SHADOW) -------------------------------------------------- *
 * NPU_SIM_SHADOW=1, read once at start-up, runs a program at its real size without its data:
 *  - device memory is address space only (accounted, mapped, not touched), so a 64 GB device
 *    costs the host nothing;
 *  - kernels (npuLaunchKernel) do not run: a launch makes its checks (stream, device health,
 *    NPU_SIM_FAULTS' launch count) and releases the kernel at once, without a queue slot (its
 *    modeled time reaches the stream as npuSimCharge); under the sanitizer it is queued and
 *    skipped instead;
 *  - copies, memsets and collectives (ccl) of more than NPU_SIM_SHADOW_CARRY_BYTES keep their
 *    place (collectives still meet, compare their calls and keep their deadlines) but move no
 *    bytes, and a large copy to the host writes zeros. Smaller ones carry their bytes: the
 *    program's metadata (sizes, flags, pickled objects, DDP's parameter check) flows as on a
 *    card, while tensor data, which kernels compute, does not exist;
 *  - the caching allocator zeroes a fresh allocation of up to NPU_SIM_SHADOW_CARRY_BYTES (on its
 *    stream), so what a kernel would have computed reads as zero, not as stale bytes.
 * Everything else (streams, events, the allocator's bookkeeping, errors) runs as usual. Tasks
 * launched with npuLaunchTask* are not kernels and still run (the collectives' own tasks). */
#define NPU_SIM_SHADOW_CARRY_BYTES 65536u
NPU_API int npuSimShadow(void); /* 1 under NPU_SIM_SHADOW=1, else 0 (fixes the configuration) */
/* npuSimShadow's answer without starting anything: until the runtime has read its configuration
 * (the first device call), NPU_SIM_SHADOW as the environment holds it now; from then on the fixed
 * value. As npuPeekDeviceCount, it lets `import torch_npu` ask without freezing the environment. */
NPU_API int npuSimPeekShadow(void);
/* Shadow execution only (a no-op otherwise): zeroes [ptr, ptr + count) in `stream`'s order, as
 * part of the simulator's own bookkeeping (the caching allocator scrubs a small fresh block):
 * no simulated time, no profiler record. */
NPU_API npuError_t npuSimScrubAsync(void* ptr, size_t count, npuStream_t stream);

/* ---- faults on demand (NPU_SIM_FAULTS, docs/faults.md) and recovery -------------------------
 * NPU_SIM_FAULTS holds a fault plan, read and validated when the runtime starts (a bad plan fails
 * initialisation naming the bad part, as a bad NPU_SIM_* variable does):
 *
 *   PLAN    := FAULT [';' FAULT]...
 *   FAULT   := KIND '@' TRIGGER [',' OPTION]...
 *   KIND    := device_lost | hbm_uce | link_down | straggler | oom | kill
 *   TRIGGER := launch=N | alloc=N | collective=N | step=N | time=SECONDS
 *   OPTION  := rank=R | device=D | restart=K | factor=F | peer=R | mode=error|hang | target=TARGET
 *
 * Counts are per device and 1-based: launch=N fires at the N-th kernel launched on the device,
 * alloc=N at the caching allocator's N-th allocation, collective=N at the N-th collective run on
 * the device, step=N after the N-th optimizer step (torch_npu counts them), time=S at the first
 * launch S seconds or more after the runtime started. rank= (the RANK variable; default any) and
 * device= (default any) choose where; restart= the torchrun attempt (TORCHELASTIC_RESTART_COUNT,
 * default 0: a restarted job does not meet the fault again). Each fault fires once. The runtime applies device_lost,
 * straggler and kill itself; the others are returned to the component that must act (oom and
 * hbm_uce@alloc to the allocator, link_down to ccl, hbm_uce@step to torch_npu, which finds the
 * TARGET tensor). */
typedef enum npuSimFaultKind {
  npuSimFaultNone = 0,
  npuSimFaultDeviceLost = 1, /* every later call and task on the device fails (lost) */
  npuSimFaultHbmUce = 2,     /* npuSimInjectMemError on the target's (or the allocation's) memory */
  npuSimFaultLinkDown = 3,   /* this collective fails on the link (mode=error) or hangs (hang) */
  npuSimFaultStraggler = 4,  /* the device's kernels take `factor` times as long from now on */
  npuSimFaultOom = 5,        /* this allocation fails as out of memory */
  npuSimFaultKill = 6        /* the process dies (SIGKILL) */
} npuSimFaultKind;
typedef enum npuSimFaultTrigger {
  npuSimOnLaunch = 0,
  npuSimOnAlloc = 1,
  npuSimOnCollective = 2,
  npuSimOnStep = 3,
  npuSimOnTime = 4 /* in a plan only: checked at launches */
} npuSimFaultTrigger;
typedef struct npuSimFault {
  int kind;           /* npuSimFaultKind */
  int device;         /* where it fired */
  int peer;           /* link_down: the rank at the other end (-1: any) */
  int hang;           /* link_down: 1 to hang until the collective's deadline */
  double factor;      /* straggler */
  char target[64];    /* hbm_uce: param[I], grad[I] or state[I].KEY (torch_npu resolves it) */
  char text[160];     /* the fault as the plan wrote it, for messages */
} npuSimFault;
NPU_API int npuSimFaultsArmed(void); /* 1 when NPU_SIM_FAULTS holds a plan for this process */
/* Counts one `trigger` event on `device` and fires the faults due. A fault the caller must apply
 * is returned in *fault (kind npuSimFaultNone when there is none); the runtime has announced it
 * on stderr. Cheap enough for every launch; a no-op without a plan. */
NPU_API npuError_t npuSimFaultTick(npuSimFaultTrigger trigger, int device, npuSimFault* fault);

/* Device health, as npu-smi shows it and the recovery API changes it. */
typedef enum npuDeviceHealth {
  npuDeviceHealthy = 0,
  npuDeviceStopped = 1,  /* npuDeviceTaskAbort: launches fail with FORCE STOP */
  npuDeviceMemError = 2, /* an uncorrectable memory error: launches fail with UCE ERROR */
  npuDeviceLostState = 3 /* lost: nothing on it works again in this process */
} npuDeviceHealth;
NPU_API npuError_t npuDeviceGetHealth(int device, int* health);
/* torch_npu.npu.stop_device: stops the device. Queued tasks and later launches fail with FORCE
 * STOP until npuDeviceRepair. */
NPU_API npuError_t npuDeviceTaskAbort(int device);
/* torch_npu.npu.restart_device: repairs the recorded memory errors, clears the streams' errors and
 * makes the device work again. A lost device cannot be repaired (npuErrorDeviceLost). */
NPU_API npuError_t npuDeviceRepair(int device);
/* An uncorrectable error in [ptr, ptr + bytes) of `device`'s memory: recorded (npuGetMemUceInfo)
 * and the device's later launches fail with UCE ERROR until npuDeviceRepair. */
NPU_API npuError_t npuSimInjectMemError(int device, const void* ptr, size_t bytes);
typedef struct npuMemUceInfo {
  void* addr;
  size_t len;
} npuMemUceInfo;
/* The recorded memory errors of `device`: writes up to `max` into `out`, returns how many there
 * are (aclrtGetMemUceInfo's role). */
NPU_API size_t npuGetMemUceInfo(int device, npuMemUceInfo* out, size_t max);

/* ---- the simulated clock of shadow execution ----------------------------------------------
 * Under shadow execution each stream keeps a simulated device clock, in nanoseconds, that only
 * modeled time moves: npuSimCharge (the adapter charges each op's modeled time after its
 * kernels), copies and memsets (bytes over the model's bandwidths), and collectives (ccl: the
 * ranks' clocks meet, then the transfer's modeled time). An event record takes its stream's
 * clock, a stream waiting for an event moves to at least the event's, and
 * npuEventElapsedTime reports simulated time. So the overlap of compute and communication comes
 * from the program's own stream and event dependencies. Host time is not modeled: a projection
 * assumes the host keeps the device fed. Until npuSimSetCostModel, every clock stays at 0. */
typedef struct npuSimCostModel {
  double hbm_gbps;         /* device memory bandwidth (device-to-device copies, memsets), GB/s */
  double h2d_gbps;         /* host <-> device copies, GB/s */
  double copy_overhead_us; /* per copy or memset */
  double intra_gbps;       /* collectives inside a node (HCCS), per device, GB/s */
  double intra_latency_us; /* per algorithm step inside a node */
  double inter_gbps;       /* collectives between nodes (RoCE), per device, GB/s */
  double inter_latency_us; /* per algorithm step between nodes */
  double host_dispatch_us; /* the host's cost to issue one charged op (eager dispatch); 0: the
                              host is not modeled. The host has a simulated clock of its own:
                              each npuSimCharge moves it on by this much and the op cannot start
                              on the device before it; a host wait (synchronize, a blocking
                              copy, a successful query) moves it to the clock it waited for. So
                              a job of many small ops is host-bound, as eager mode is on a card,
                              and a graph replay (one launch for many ops) is not. */
} npuSimCostModel;
/* Installs the model (copied); npuErrorNotSupported unless shadow execution is on,
 * npuErrorInvalidValue for a bandwidth that is not positive. */
NPU_API npuError_t npuSimSetCostModel(const npuSimCostModel* model);
/* The installed model; npuErrorNotReady when none is. */
NPU_API npuError_t npuSimGetCostModel(npuSimCostModel* model);
/* Queues `ns` of modeled device time on `stream`, named `name` (an op), after its kernels; the
 * op is issued at the host's clock after its dispatch (host_dispatch_us). While a profiling
 * session is open, the charge is the op's device activity, timed on the simulated clock. */
NPU_API npuError_t npuSimCharge(npuStream_t stream, const char* name, uint64_t ns);
/* A stream's clock as of the tasks it has run; a device's is the latest of its streams'. */
NPU_API npuError_t npuSimStreamClock(npuStream_t stream, uint64_t* ns);
NPU_API npuError_t npuSimDeviceClock(int device, uint64_t* ns);
/* 1 on a thread that is running a task (a stream worker, or a launcher running one inline):
 * the ATen calls a host-kernel task makes are the task's own work, not new launches. */
NPU_API int npuSimInTask(void);
/* From inside a running task (a collective): its stream's clock, and moving it forward. */
NPU_API uint64_t npuSimTaskClock(void);
NPU_API void npuSimTaskClockAdvanceTo(uint64_t ns);

/* ---- the schedule (NPU_SIM_SCHEDULE) ---------------------------------------------------- */
/* How the simulator orders the work of its streams, read once from NPU_SIM_SCHEDULE:
 *   unset, "normal"  as fast as it can (short tasks on the caller, hand-offs skipped);
 *   "chaos[:SEED]"   race-exposing: before each task a stream worker, and before each arrival a
 *                    collective, waits a random time drawn from SEED (printed at start-up; a
 *                    random one when none is given), and no task runs on its launching thread,
 *                    so work of different streams interleaves in orders that a normal run rarely
 *                    takes. The same seed draws the same delays for the same program;
 *   "serial"         every task runs on the launching thread at its launch, in launch order (a
 *                    task launched by a running task, or behind another thread's queued work,
 *                    is queued as usual): a reproducible baseline in which tasks do not overlap. */
typedef enum { npuScheduleNormal = 0, npuScheduleChaos = 1, npuScheduleSerial = 2 } npuSchedule;
NPU_API npuSchedule npuSimSchedule(void);
/* A scheduling point of another library (the collectives' arrivals): under chaos, waits the
 * delay that the seed draws for (site, key); returns at once otherwise. */
NPU_API void npuSimSchedulePoint(uint32_t site, uint64_t key);

/* ---- the stream sanitizer's engine (sanitizer.cpp) --------------------------------------
 * A happens-before checker over the order in which work is launched, the engine behind
 * TORCH_NPU_SANITIZER (the adapter feeds it the byte ranges each op reads and writes). The host
 * and every stream carry a vector clock; what orders them is what orders them on a card:
 * a launch comes after everything the host has seen complete, an event record snapshots its
 * stream, npuStreamWaitEvent joins the event's snapshot into the waiting stream, and
 * npuStreamSynchronize / npuEventSynchronize / npuDeviceSynchronize, a successful
 * npuStreamQuery / npuEventQuery and the blocking calls (npuMemcpy, npuLaunchTaskSync) join a
 * stream into the host. An access that meets an earlier access of another stream (or of the
 * host) to the same bytes, one of them a write, with neither ordered before the other, is a race.
 * Ranges are byte-exact: disjoint views of one block never conflict. Off (the default) it costs
 * one relaxed load at each of those calls. Work launched into a capture is not seen (a graph's
 * replay is ordered as a whole by its stream). */
typedef enum {
  npuSanRace = 1,         /* unsynchronized read/write or write/write of the same bytes */
  npuSanFreeInUse = 2,    /* a block freed while another stream, not recorded on it
                             (record_stream), may still use it: its reuse would race */
  npuSanUninitRead = 3    /* a read of allocated bytes that nothing wrote (opt-in) */
} npuSanKind;
/* The stream npuSanAccess calls "the host" (CPU code touching host memory a task also touches). */
#define NPU_SAN_HOST ((npuStream_t)(intptr_t)-1)
typedef struct npuSanSide {
  int device;      /* -1 for the host */
  int stream_id;   /* npuStreamGetId; -1 for the host */
  int write;       /* 1: a write, 0: a read */
  uint64_t tag;    /* the caller's tag of the access (npuSanAccess), 0 when there is none */
} npuSanSide;
typedef struct npuSanReport {
  npuSanKind kind;
  uintptr_t begin, end;    /* the bytes in conflict (the first conflicting segment) */
  npuSanSide previous;     /* the earlier access (npuSanUninitRead: the allocation) */
  npuSanSide current;      /* the access (npuSanFreeInUse: the free) that found it */
} npuSanReport;
/* Turns the engine on or off (off forgets everything it tracked); `uninit` also tracks which
 * allocated bytes were written (npuSanAlloc). */
NPU_API void npuSanEnable(int on, int uninit);
NPU_API int npuSanEnabled(void);
/* The caller's tags (a stack, an op's name): the engine calls retain(tag) for each copy it keeps
 * (a segment split in two keeps two) and release(tag) for each it forgets. */
NPU_API void npuSanSetTagHooks(void (*retain)(uint64_t tag), void (*release)(uint64_t tag));
/* The tag the runtime gives its own accesses on this thread (npuMemcpyAsync and
 * npuMemsetAsync record theirs: the op that launched them sets its tag); returns the previous. */
NPU_API uint64_t npuSanSetCurrentTag(uint64_t tag);
/* Marks this thread as an observer (a watchdog polling for completions): its event queries and
 * synchronizations order nothing the program's own threads do, so they teach the host nothing. */
NPU_API void npuSanSetThreadObserver(int on);
/* An access of [ptr, ptr + bytes) by the next work launched on `stream` (NULL: the current
 * device's default stream; NPU_SAN_HOST: the host, which is checked but only tracked on bytes
 * some stream touched). Returns how many reports it added (npuSanTakeReports). The engine keeps
 * `tag` while the access is the latest of its kind on those bytes. */
NPU_API int npuSanAccess(npuStream_t stream, const void* ptr, size_t bytes, int write,
                         uint64_t tag);
/* The caching allocator's side: bytes handed out (uninit tracking starts them unwritten; a
 * `tag` of 0 names the thread's current tag, npuSanSetCurrentTag), and bytes given back by
 * their allocation stream `stream` with the streams recorded on the block (record_stream),
 * which the allocator itself waits for before reuse. */
NPU_API void npuSanAlloc(const void* ptr, size_t bytes, uint64_t tag);
NPU_API int npuSanFree(const void* ptr, size_t bytes, npuStream_t stream,
                       const npuStream_t* recorded, size_t recorded_count, uint64_t tag);
/* Moves up to `max` of this thread's reports into `out`; returns how many. Each report's
 * non-zero tags were retained for the reader, who releases them when done with the report. */
NPU_API size_t npuSanTakeReports(npuSanReport* out, size_t max);

/* ---- events ---------------------------------------------------------------------------- */
#define npuEventDefault 0x0u
#define npuEventDisableTiming 0x2u
NPU_API npuError_t npuEventCreate(npuEvent_t* event); /* timing enabled */
NPU_API npuError_t npuEventCreateWithFlags(npuEvent_t* event, unsigned int flags);
NPU_API npuError_t npuEventDestroy(npuEvent_t event);
NPU_API npuError_t npuEventRecord(npuEvent_t event, npuStream_t stream);
NPU_API npuError_t npuEventQuery(npuEvent_t event); /* npuSuccess if done or never recorded */
NPU_API npuError_t npuEventSynchronize(npuEvent_t event);
NPU_API npuError_t npuEventElapsedTime(float* ms, npuEvent_t start, npuEvent_t end);

/* ---- graphs: capture a stream's work once, replay it as one submission ------------------
 * npuStreamBeginCapture makes `stream` record instead of run: tasks launched onto it (only
 * npuLaunchTaskWithRelease, async copies and memsets, event records) are appended to a graph.
 * A stream that waits for an event recorded during the capture joins it (fork), and must be
 * joined back (the origin waits for an event recorded on it after its last task) before
 * npuStreamEndCapture, or the end fails with npuErrorStreamCaptureUnjoined. Replay runs the
 * tasks of every captured stream in their launch order on the launching stream, as one queue
 * entry. Synchronizing calls are not allowed during a capture (npuErrorStreamCaptureUnsupported,
 * and the capture is invalidated): synchronizing or querying the capturing stream, always;
 * npuDeviceSynchronize, npuMemcpy and npuMemset on the capturing device in Global mode (any
 * thread) or ThreadLocal mode (the capturing thread); npuEventSynchronize / npuEventQuery of an
 * event recorded in the capture; a capturing stream waiting for an event recorded outside it.
 * The default stream cannot capture. Device memory the graph uses must outlive the graph (the
 * caller's allocator keeps it in a graph-private pool). */
typedef struct npuGraph_st* npuGraph_t;
typedef enum npuStreamCaptureMode {
  npuStreamCaptureModeGlobal = 0,
  npuStreamCaptureModeThreadLocal = 1,
  npuStreamCaptureModeRelaxed = 2
} npuStreamCaptureMode;
typedef enum npuStreamCaptureStatus {
  npuStreamCaptureStatusNone = 0,
  npuStreamCaptureStatusActive = 1,
  npuStreamCaptureStatusInvalidated = 2
} npuStreamCaptureStatus;
NPU_API npuError_t npuStreamBeginCapture(npuStream_t stream, npuStreamCaptureMode mode);
NPU_API npuError_t npuStreamEndCapture(npuStream_t stream, npuGraph_t* graph);
NPU_API npuError_t npuStreamIsCapturing(npuStream_t stream, npuStreamCaptureStatus* status);
NPU_API npuError_t npuGraphLaunch(npuGraph_t graph, npuStream_t stream);
NPU_API npuError_t npuGraphGetTaskCount(npuGraph_t graph, size_t* count);
/* Writes the graph as Graphviz DOT (one node per task, in replay order), as
 * cudaGraphDebugDotPrint does. */
NPU_API npuError_t npuGraphDebugDotPrint(npuGraph_t graph, const char* path);
/* Returns at once; the graph's tasks are released once its queued launches have run. */
NPU_API npuError_t npuGraphDestroy(npuGraph_t graph);

/* ---- versions -------------------------------------------------------------------------- */
NPU_API const char* npuGetRuntimeVersion(void); /* plays the role of the CANN version */
NPU_API const char* npuGetDriverVersion(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NPU_RUNTIME_H_ */

/*
 * SimNPU runtime profiling: the activity records of the device side (the role of CUPTI's
 * activity API, or of msprof's task data on a real Ascend card). No PyTorch in here.
 *
 * Model:
 *  - npuProfilerStart opens a session. From then on every task enqueued on any stream (a work
 *    task from npuLaunchTask, a copy, a memset) is stamped at launch with the session, the
 *    launching thread's correlation id and the launch time; its stream worker then records
 *    when it started and ended. Event records and waits are not recorded.
 *  - The correlation id is per host thread (npuProfilerSetCorrelationId). A host-side tracer
 *    sets it to the id of the operator it is inside, so each record names the host op that
 *    launched it even though it runs later, on another thread.
 *  - npuProfilerStop ends the session for new launches and waits until every stream is idle
 *    (without consuming stream errors), so a drain after it sees every task of the session.
 *    npuProfilerStart of the next session discards what was not drained.
 *  - All times are nanoseconds of one clock, npuProfilerClockNs (CLOCK_MONOTONIC, the clock of
 *    std::chrono::steady_clock), so host and device records can be compared directly.
 *  - Off, the cost is one relaxed atomic load per launch and per task run.
 */
#ifndef NPU_PROFILER_H_
#define NPU_PROFILER_H_

#include <stddef.h>
#include <stdint.h>

#include "npu/runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum npuActivityKind {
  npuActivityKernel = 0, /* a work task (npuLaunchTask) */
  npuActivityMemcpy = 1,
  npuActivityMemset = 2
} npuActivityKind;

typedef struct npuActivityRecord {
  uint64_t correlation_id; /* the launching thread's id at launch time; 0 if none was set */
  uint64_t launch_ns;      /* when the host enqueued it */
  uint64_t start_ns;       /* when the stream worker began running it */
  uint64_t end_ns;         /* when it finished */
  uint64_t bytes;          /* copies and memsets: the byte count; 0 for kernels */
  int32_t kind;            /* npuActivityKind */
  int32_t device;          /* logical device index */
  int32_t stream_id;       /* npuStreamGetId of the stream that ran it */
  int32_t memcpy_kind;     /* copies: the resolved npuMemcpyKind (never npuMemcpyDefault) */
  int32_t launch_thread;   /* system thread id (gettid) of the launching host thread */
  int32_t reserved;
  char name[56];           /* the task name ("memcpy" / "memset" for copies and memsets) */
} npuActivityRecord;

/* Opens a session (discarding undrained records of the previous one); npuErrorNotReady if a
 * session is already open (one consumer at a time). */
NPU_API npuError_t npuProfilerStart(void);
/* Closes the session and waits for the streams; a no-op when no session is open. */
NPU_API npuError_t npuProfilerStop(void);
NPU_API int npuProfilerIsActive(void);
/* Sets the calling thread's correlation id; returns the previous one (to restore it). */
NPU_API uint64_t npuProfilerSetCorrelationId(uint64_t id);
NPU_API uint64_t npuProfilerGetCorrelationId(void);
/* Moves up to `capacity` records, oldest first, into `out`; returns how many. */
NPU_API size_t npuProfilerDrain(npuActivityRecord* out, size_t capacity);
/* COUNT: records lost in this session because the buffer (2^21 records) was full. */
NPU_API uint64_t npuProfilerDroppedRecords(void);
NPU_API uint64_t npuProfilerClockNs(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NPU_PROFILER_H_ */

/* CANN's logging (the role of slog / plog), shared by the runtime, the allocator and the adapter.
 *
 * Configured from the environment once, at the first line, with CANN's variables:
 *   ASCEND_GLOBAL_LOG_LEVEL      0 debug, 1 info, 2 warning, 3 error (default), 4 null (off)
 *   ASCEND_SLOG_PRINT_TO_STDOUT  1: lines go to stdout; 0 (default): to a file of this process,
 *                                <dir>/debug/plog/plog-<pid>_<YYYYMMDDhhmmssmmm>.log
 *   ASCEND_PROCESS_LOG_PATH      <dir> (default $HOME/ascend/log)
 * A bad value is named once on stderr and the default is used (logging must never stop a
 * program). Each line has CANN's layout:
 *   [ERROR] RUNTIME(1234,python):2026-12-03-12:07:39.123.456 [stream.cpp:267]1240 npuFoo: message
 *   level, module(pid,process name), local time to the microsecond, [source:line]thread id,
 *   function, message.
 */
#ifndef NPU_LOG_H_
#define NPU_LOG_H_

#include "npu/runtime.h" /* NPU_API */

#ifdef __cplusplus
extern "C" {
#endif

#define NPU_LOG_DEBUG 0
#define NPU_LOG_INFO 1
#define NPU_LOG_WARNING 2
#define NPU_LOG_ERROR 3
#define NPU_LOG_NULL 4

/* The global level: lines of a lower level are not written. */
NPU_API int npuLogGetLevel(void);
/* Writes one line (printf-style message); a level below npuLogGetLevel() is dropped. */
NPU_API void npuLogWrite(int level, const char* module, const char* file, int line,
                         const char* func, const char* format, ...)
    __attribute__((format(printf, 6, 7)));
/* The plog file this process writes, or "" while none is open (stdout, or nothing written). */
NPU_API const char* npuLogGetFilePath(void);

#ifdef __cplusplus
}
#endif

/* The call sites' form: the arguments are evaluated only when the line will be written. */
#define NPU_LOG(level, module, ...)                                                  \
  do {                                                                               \
    if ((level) >= npuLogGetLevel())                                                 \
      npuLogWrite((level), (module), __FILE__, __LINE__, __func__, __VA_ARGS__);     \
  } while (0)

#endif /* NPU_LOG_H_ */

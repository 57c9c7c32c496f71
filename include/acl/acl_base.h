/*
 * AscendCL base types and error codes (acl_base.h), the subset SimNPU implements.
 *
 * Names and values are AscendCL's, so a program written against CANN compiles here unchanged.
 * Every call returns ACL_SUCCESS or an error code; aclGetRecentErrMsg() gives the detailed
 * message of the calling thread's last failure.
 */
#ifndef SIMNPU_ACL_BASE_H_
#define SIMNPU_ACL_BASE_H_

#include <stddef.h>
#include <stdint.h>

#if defined(SIMNPU_ACL_BUILD)
#define ACL_FUNC_VISIBILITY __attribute__((visibility("default")))
#else
#define ACL_FUNC_VISIBILITY
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef int aclError;
typedef void* aclrtStream;
typedef void* aclrtEvent;
typedef void* aclrtContext;

/* Generic errors. */
static const aclError ACL_SUCCESS = 0;
static const aclError ACL_ERROR_INVALID_PARAM = 100000;
static const aclError ACL_ERROR_UNINITIALIZE = 100001;
static const aclError ACL_ERROR_REPEAT_INITIALIZE = 100002;
static const aclError ACL_ERROR_INVALID_FILE = 100003;
static const aclError ACL_ERROR_PARSE_FILE = 100006;
static const aclError ACL_ERROR_BAD_ALLOC = 200000;
static const aclError ACL_ERROR_API_NOT_SUPPORT = 200001;
static const aclError ACL_ERROR_FEATURE_UNSUPPORTED = 200006;
static const aclError ACL_ERROR_INTERNAL_ERROR = 500000;
static const aclError ACL_ERROR_FAILURE = 500001;

/* Runtime errors (rt_error_codes.h). */
static const aclError ACL_ERROR_RT_PARAM_INVALID = 107000;
static const aclError ACL_ERROR_RT_INVALID_DEVICEID = 107001;
static const aclError ACL_ERROR_RT_CONTEXT_NULL = 107002;
static const aclError ACL_ERROR_RT_INVALID_HANDLE = 107017;
static const aclError ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000;
static const aclError ACL_ERROR_RT_MEMORY_ALLOCATION = 207001;
static const aclError ACL_ERROR_RT_NO_DEVICE = 207004;
static const aclError ACL_ERROR_RT_INTERNAL_ERROR = 507000;
static const aclError ACL_ERROR_RT_STREAM_NOT_COMPLETE = 507004;
static const aclError ACL_ERROR_RT_EVENT_NOT_COMPLETE = 507006;
static const aclError ACL_ERROR_RT_AICORE_EXCEPTION = 507015;

/* The detailed message of the calling thread's last failed call ("" if none). */
ACL_FUNC_VISIBILITY const char* aclGetRecentErrMsg(void);

#ifdef __cplusplus
}
#endif

#endif /* SIMNPU_ACL_BASE_H_ */

/*
 * AscendCL (acl.h) on SimNPU: initialisation, versions, the runtime API (acl_rt.h) and the
 * model API (acl_mdl.h: loading and executing offline .om models written by atc).
 */
#ifndef SIMNPU_ACL_H_
#define SIMNPU_ACL_H_

#include "acl/acl_base.h"
#include "acl/acl_rt.h"
#include "acl/acl_mdl.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ACL_MAJOR_VERSION 8
#define ACL_MINOR_VERSION 0
#define ACL_PATCH_VERSION 0

/* configPath: NULL, "" or a JSON file (dump / profiling settings; read and ignored, but it
 * must exist and parse as a JSON object). A second aclInit is ACL_ERROR_REPEAT_INITIALIZE. */
ACL_FUNC_VISIBILITY aclError aclInit(const char* configPath);
/* Waits for every device's work. Afterwards other calls are ACL_ERROR_UNINITIALIZE until
 * aclInit is called again. */
ACL_FUNC_VISIBILITY aclError aclFinalize(void);
ACL_FUNC_VISIBILITY aclError aclrtGetVersion(int32_t* majorVersion, int32_t* minorVersion,
                                             int32_t* patchVersion);

#ifdef __cplusplus
}
#endif

#endif /* SIMNPU_ACL_H_ */

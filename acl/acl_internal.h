// What acl.cpp shares with acl_mdl.cpp: the thread's error message, the initialised flag, the
// runtime-to-AscendCL error mapping and the argument checks every entry point starts with.
#pragma once

#include <string>

#include "acl/acl_base.h"
#include "npu/runtime.h"

namespace simnpu_acl {
aclError setError(aclError code, std::string message);
bool initialized();
aclError fromRuntimeError(npuError_t error);
}  // namespace simnpu_acl

// `return`s ACL_ERROR_UNINITIALIZE from the calling API before aclInit.
#define ACL_REQUIRE_INIT(api)                                                              \
  do {                                                                                     \
    if (!simnpu_acl::initialized()) {                                                      \
      return simnpu_acl::setError(                                                         \
          ACL_ERROR_UNINITIALIZE,                                                          \
          std::string(api) + ": AscendCL is not initialised; call aclInit first");         \
    }                                                                                      \
  } while (0)

// `return`s ACL_ERROR_INVALID_PARAM naming `what` unless `cond` holds.
#define ACL_REQUIRE_ARG(api, cond, what)                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      return simnpu_acl::setError(ACL_ERROR_INVALID_PARAM, std::string(api) + ": " + what); \
    }                                                                                         \
  } while (0)

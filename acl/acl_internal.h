// What acl.cpp shares with acl_mdl.cpp: the thread's error message, the initialised flag and
// the runtime-to-AscendCL error mapping.
#pragma once

#include <string>

#include "acl/acl_base.h"
#include "npu/runtime.h"

namespace simnpu_acl {
aclError setError(aclError code, std::string message);
bool initialized();
aclError fromRuntimeError(npuError_t error);
}  // namespace simnpu_acl

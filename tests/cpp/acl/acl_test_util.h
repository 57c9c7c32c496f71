// What the AscendCL tests share.
#pragma once

#include <gtest/gtest.h>

#include "acl/acl.h"

// Asserts an AscendCL call succeeded; on failure prints the call and aclGetRecentErrMsg().
#define ASSERT_ACL_OK(expr)                                                    \
  do {                                                                         \
    aclError acl_err_ = (expr);                                                \
    ASSERT_EQ(acl_err_, ACL_SUCCESS) << #expr << ": " << aclGetRecentErrMsg(); \
  } while (0)

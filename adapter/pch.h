// Precompiled for every adapter translation unit: the PyTorch headers they share. Parsing ATen
// costs seconds per file; with this header it is paid once per build.
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

// Dtypes that torch_npu's kernels accept on a 910B and ATen's CPU kernel (the npu kernel of
// path 2, ExecutionPaths.h) does not: the host-kernel path widens them for the ops of one table.
//  - 16-bit floats: the op computes in float32 and its floating results are rounded back to the
//    16-bit dtype once, as the card's float32-accumulating kernels do (cdist, pdist, avg_pool3d,
//    the anti-aliased upsamplings, _add_relu, ...);
//  - int32 indices: widened to int64 before ATen's kernel (put_, multilabel_margin_loss's
//    target, ...).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

namespace torch_npu {

// Runs `op` through `run` (runOnHost) with its arguments widened when the table lists the op and
// the call has an argument to widen; the results are narrowed back (fresh floating results to
// the 16-bit dtype, written arguments by a copy into the caller's tensors). Returns false, with
// the stack untouched, when nothing is to be widened.
bool runWidened(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                void (*run)(const c10::OperatorHandle&, torch::jit::Stack*));

}  // namespace torch_npu

// The kernels' shared CPU thread pool.
//
// One pool per process, of NPU_KERNEL_THREADS threads, else OMP_NUM_THREADS (as ATen's CPU
// kernels; torchrun sets it to 1 per rank), else the CPUs in the process's affinity mask.
// parallel_for never creates threads: the calling thread takes chunks itself, and idle pool
// workers join in. So
//  - two device streams running kernels at once share the workers and never oversubscribe;
//  - a caller that finds every worker busy still finishes alone (no deadlock);
//  - parallel_for called inside a parallel_for body runs inline on the current thread;
//  - a range no longer than one grain is a plain inline call (not a parallel region, so a
//    parallel_for inside it may still use the pool).
#pragma once

#include <cstdint>
#include <functional>

namespace npu::kernels {

// Threads a parallel_for may use, the caller included (>= 1).
int num_threads();

// Calls fn(chunk_begin, chunk_end) over disjoint chunks covering [begin, end), each at least
// `grain` long (except the last). Returns when every chunk is done. If fn throws, the first
// exception is rethrown here after the other chunks finish.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

// True while the current thread runs a parallel_for chunk.
bool in_parallel_region();

}  // namespace npu::kernels

// The shared kernel thread pool.
//
// How it works:
//  - N-1 workers are started once (N = NPU_KERNEL_THREADS, else OMP_NUM_THREADS, else the CPUs
//    the process may run on); the caller of parallel_for is the N-th thread.
//  - A parallel_for publishes a Job (on the caller's stack) in a queue and then takes chunks
//    itself with an atomic counter. Workers attach to the oldest job that still has chunks.
//  - The caller removes its job from the queue once all chunks are claimed (so no new worker
//    can attach), then waits for the workers already inside to finish their chunks. Those are
//    running, so the wait is short and cannot deadlock, even when all workers are busy with
//    other callers' jobs: the caller then simply did every chunk itself.
//  - Workers wait a few tens of microseconds (pausing, then yielding the core) before sleeping,
//    since kernels often come back to back.
#include "npu/kernels/thread_pool.h"

#include "npu/env.h"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <stdexcept>
#include <string>
#include <mutex>
#include <thread>
#include <vector>

namespace npu::kernels {
namespace {

thread_local bool t_in_parallel = false;
constexpr int kMaxThreads = 256;

struct Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t begin, end, chunk;
  int64_t num_chunks;
  std::atomic<int64_t> next{0};      // next chunk to claim
  std::atomic<int64_t> done{0};      // chunks finished
  std::atomic<int> attached{0};      // workers currently holding a pointer to this job
  std::mutex error_mu;
  std::exception_ptr error;

  // Runs chunks until none is left.
  void run_chunks() {
    bool was = t_in_parallel;
    t_in_parallel = true;
    for (;;) {
      int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= num_chunks) break;
      int64_t b = begin + c * chunk;
      int64_t e = std::min(end, b + chunk);
      try {
        (*fn)(b, e);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
      done.fetch_add(1, std::memory_order_acq_rel);
    }
    t_in_parallel = was;
  }
};

class ThreadPool {
 public:
  static ThreadPool& instance() {
    // Leaked on purpose: workers may still be parked at process exit, and destroying the pool
    // from a static destructor while another static destructor runs a kernel would be unsafe.
    static ThreadPool* pool = new ThreadPool(choose_size());
    return *pool;
  }

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  void run(Job& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(&job);
      generation_.fetch_add(1, std::memory_order_relaxed);
    }
    cv_.notify_all();
    job.run_chunks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::find(queue_.begin(), queue_.end(), &job);
      if (it != queue_.end()) queue_.erase(it);
    }
    // Remaining chunks are held by attached workers and are running now.
    while (job.attached.load(std::memory_order_acquire) != 0 ||
           job.done.load(std::memory_order_acquire) != job.num_chunks) {
      _mm_pause();
      std::this_thread::yield();
    }
  }

 private:
  explicit ThreadPool(int n) {
    for (int i = 0; i + 1 < n; ++i) {
      workers_.emplace_back([this] { worker_loop(); });
      // Named by the creator, so the name is there as soon as the pool exists (a worker that
      // has not run yet would still carry the creating thread's name); shown by debuggers,
      // top -H and an abort's diagnostics.
      char name[16];
      // (15 characters at most: the number is bounded to 5 digits, far beyond any core count)
      std::snprintf(name, sizeof(name), "npu_kernel%u", static_cast<unsigned>(i + 1) % 100000u);
      pthread_setname_np(workers_.back().native_handle(), name);
    }
    for (auto& w : workers_) w.detach();
  }

  // A bad NPU_KERNEL_THREADS fails every kernel with the message (the runtime refuses it at
  // initialisation already; this covers the kernels used on their own). The static above is
  // then retried by the next kernel, which fails the same way.
  static int choose_size() {
    if (const char* env = std::getenv("NPU_KERNEL_THREADS")) {
      long long n = 0;
      if (!npu::env::parseInteger(env, 1, kMaxThreads, &n)) {
        throw std::invalid_argument(npu::env::invalid(
            "NPU_KERNEL_THREADS", env,
            "an integer from 1 to " + std::to_string(kMaxThreads) + " (kernel threads)"));
      }
      return static_cast<int>(n);
    }
    // OMP_NUM_THREADS sizes ATen's CPU kernels; torchrun sets it to 1 for the ranks of a
    // multi-process job so that they share the cores instead of each starting a thread per core.
    // The simulated device follows it. Only its first level counts ("4,2" is 4); a value that is
    // not a positive integer is the OpenMP runtime's to report, and is ignored here.
    if (const char* env = std::getenv("OMP_NUM_THREADS")) {
      const std::string first(env, std::strcspn(env, ","));
      long long n = 0;
      if (npu::env::parseInteger(first.c_str(), 1, 1ll << 30, &n)) {
        return static_cast<int>(std::min<long long>(n, kMaxThreads));
      }
    }
    return std::min(usable_cpus(), kMaxThreads);
  }

  // The CPUs this process may run on (its affinity mask: taskset, cpusets, a container's CPU
  // list), not the machine's: a pool wider than that only adds threads competing for them.
  static int usable_cpus() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
      const int n = CPU_COUNT(&set);
      if (n > 0) return n;
    }
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }

  // Takes the oldest job with unclaimed chunks, marking this worker attached (under the lock,
  // so the owner cannot return between our pick and our attach).
  Job* try_attach() {
    for (Job* j : queue_) {
      if (j->next.load(std::memory_order_relaxed) < j->num_chunks) {
        j->attached.fetch_add(1, std::memory_order_acq_rel);
        return j;
      }
    }
    return nullptr;
  }

  void worker_loop() {
    using Clock = std::chrono::steady_clock;
    for (;;) {
      Job* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        job = try_attach();
        if (!job) {
          // Wait briefly (without the lock) for the next kernel, then sleep: a few pauses, then
          // yields until 50 us have passed. Yielding, not pausing, hands the core to a runnable
          // thread (the launching host thread, a stream worker, another rank) when threads
          // outnumber cores, as they do on a small host; on an idle core a yield returns at once.
          uint64_t seen = generation_.load(std::memory_order_relaxed);
          lock.unlock();
          for (int i = 0; i < 64 && generation_.load(std::memory_order_relaxed) == seen; ++i) {
            _mm_pause();
          }
          auto until = Clock::now() + std::chrono::microseconds(50);
          while (generation_.load(std::memory_order_relaxed) == seen && Clock::now() < until) {
            std::this_thread::yield();
          }
          lock.lock();
          // Sleep until a job with unclaimed chunks exists (attaching to it under the lock).
          cv_.wait(lock, [&] { return (job = try_attach()) != nullptr; });
        }
      }
      job->run_chunks();
      job->attached.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;
  std::atomic<uint64_t> generation_{0};  // bumped on every new job; lets spinners notice
  std::vector<std::thread> workers_;
};

}  // namespace

int num_threads() { return ThreadPool::instance().size(); }

bool in_parallel_region() { return t_in_parallel; }

void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t n = end - begin;
  ThreadPool& pool = ThreadPool::instance();
  int threads = pool.size();
  if (t_in_parallel || n <= grain) {  // nested, or a single chunk: a plain call
    fn(begin, end);
    return;
  }
  if (threads == 1) {  // one chunk, but still a parallel region (nested calls stay inline)
    t_in_parallel = true;
    try {
      fn(begin, end);
    } catch (...) {
      t_in_parallel = false;
      throw;
    }
    t_in_parallel = false;
    return;
  }
  // A few chunks per thread so that a thread slowed down by another job's work (or by the
  // OS) does not hold everyone up; never below the grain.
  int64_t chunk = std::max(grain, (n + 4 * threads - 1) / (4 * threads));
  Job job;
  job.fn = &fn;
  job.begin = begin;
  job.end = end;
  job.chunk = chunk;
  job.num_chunks = (n + chunk - 1) / chunk;
  pool.run(job);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace npu::kernels

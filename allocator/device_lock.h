// The lock of one device's allocator state. Not installed.
//
// A cached allocate or free takes it once and holds it for about a hundred nanoseconds. At
// that scale std::mutex costs most in its unlock: a second atomic read-modify-write, which
// must wait until every store of the critical section has drained. Here unlock is a plain
// release store. Waiters spin briefly, then yield, then nap: the lock is held for long only
// around runtime calls (npuMalloc; npuFree, which waits for the device to go idle), where a
// napping waiter costs nothing and a spinning one would steal a core.
#pragma once

#include <atomic>
#include <chrono>
#include <thread>

namespace npu::alloc {

class DeviceLock {
 public:
  void lock() {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    lockContended();
  }
  bool try_lock() {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  void lockContended() {
    for (unsigned attempt = 0;; ++attempt) {
      if (try_lock()) return;
      if (attempt < 16) {
        relax();
      } else if (attempt < 32) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }
  static void relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  std::atomic<bool> locked_{false};
};

}  // namespace npu::alloc

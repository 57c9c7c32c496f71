// NPU_SIM_SCHEDULE: the race-exposing scheduler (chaos) and the serial baseline.
//
// How it works:
//  - chaos[:SEED]: the delay at a scheduling point is a pure function of (seed, site, key):
//    splitmix64 of the three, so the same program under the same seed draws the same delays
//    (the interleaving itself still depends on the host's scheduler, but delays of this size
//    dominate it). Sites: a stream worker before each task (key: device, stream id and the
//    task's number in the stream, so event records and waits are delayed like kernels) and
//    the collectives before each arrival (key: the communicator rank and its arrival count).
//    Half the points do not wait; the others yield a few times or sleep up to 2 ms. The
//    shortcuts that run a task on its launching thread (short tasks, host runs, a record on an
//    idle stream) are off, so every task goes through its stream's worker and its delay.
//  - serial: the stream's enqueue runs each task on the launching thread when the stream is idle
//    (stream.cpp); behind another thread's queued work it is queued as usual.
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>

#include "npu/env.h"
#include "runtime_internal.h"

namespace npu::rt {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void parseSchedule(Config* cfg) {
  const char* raw = std::getenv("NPU_SIM_SCHEDULE");
  const std::string v = env::trimmed(raw);
  if (v.empty() || v == "normal") return;
  if (v == "serial") {
    cfg->schedule = npuScheduleSerial;
    return;
  }
  if (v == "chaos" || v.rfind("chaos:", 0) == 0) {
    long long seed = 0;
    if (v == "chaos") {
      seed = static_cast<long long>(std::random_device{}() & 0x7fffffff);
    } else if (!env::parseInteger(v.c_str() + 6, 0, (1ll << 62), &seed)) {
      cfg->init_error = env::invalid("NPU_SIM_SCHEDULE", raw,
                                     "normal, serial, chaos or chaos:SEED with SEED a "
                                     "non-negative integer");
      return;
    }
    cfg->schedule = npuScheduleChaos;
    cfg->schedule_seed = static_cast<uint64_t>(seed);
    cfg->inline_tasks = false;  // every task through its worker, and its delay
    return;
  }
  cfg->init_error = env::invalid("NPU_SIM_SCHEDULE", raw,
                                 "normal, serial, chaos or chaos:SEED (the race-exposing "
                                 "scheduler; see docs)");
}

void announceChaos(uint64_t seed) {
  std::fprintf(stderr,
               "[SimNPU] NPU_SIM_SCHEDULE=chaos: stream tasks, event records and collective "
               "arrivals are delayed at random, seed %llu (pid %d); replay the same delays "
               "with NPU_SIM_SCHEDULE=chaos:%llu\n",
               static_cast<unsigned long long>(seed), static_cast<int>(::getpid()),
               static_cast<unsigned long long>(seed));
}

void schedulePoint(uint32_t site, uint64_t key) {
  if (!chaos()) return;
  const uint64_t r = splitmix64(config().schedule_seed ^ splitmix64(key ^ (uint64_t(site) << 56)));
  const uint32_t pick = static_cast<uint32_t>(r & 0xff);
  if (pick < 128) return;  // half the points run at once
  if (pick < 224) {        // a few yields: another runnable thread goes first
    for (uint64_t i = 0, n = 1 + ((r >> 8) & 7); i < n; ++i) sched_yield();
    return;
  }
  // A real stall: 50 us .. 2 ms.
  std::this_thread::sleep_for(std::chrono::microseconds(50 + ((r >> 16) % 1950)));
}

}  // namespace npu::rt

npuSchedule npuSimSchedule(void) { return npu::rt::config().schedule; }

void npuSimSchedulePoint(uint32_t site, uint64_t key) {
  npu::rt::schedulePoint(npu::rt::kSiteCollective + (site << 8), key);
}

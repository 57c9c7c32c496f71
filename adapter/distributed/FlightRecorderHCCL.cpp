// The HCCL flight recorder over c10d's FlightRecorder template (see FlightRecorderHCCL.h).
#include "distributed/FlightRecorderHCCL.h"

#include <torch/csrc/distributed/c10d/FlightRecorderDetail.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include "npu/env.h"

namespace c10d {

// The recorder asks for durations only when told to compute them; the hccl works' events are
// made without timing, and the watchdog retires entries without durations.
template <>
float getDurationFromEvent<torch_npu::FlightRecorderEvent>(torch_npu::FlightRecorderEvent&,
                                                            torch_npu::FlightRecorderEvent&) {
  TORCH_INTERNAL_ASSERT(false, "flight recorder: durations of hccl works are not measured "
                               "(a bug: retire without compute_duration)");
}

}  // namespace c10d

namespace torch_npu {
namespace {

using Recorder = c10d::FlightRecorder<FlightRecorderEvent>;

long long envInteger(const char* name, long long fallback, long long lo, long long hi,
                     const char* meaning) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return fallback;
  long long value = 0;
  TORCH_CHECK_VALUE(npu::env::parseInteger(raw, lo, hi, &value), name, "=", raw,
                    " is not valid: ", meaning, "; expected an integer from ", lo, " to ", hi,
                    ". Fix or unset it.");
  return value;
}

FlightRecorderSettings readSettings() {
  FlightRecorderSettings s;
  s.bufferSize = static_cast<size_t>(envInteger(
      "TORCH_HCCL_TRACE_BUFFER_SIZE", 0, 0, 1 << 24,
      "TORCH_HCCL_TRACE_BUFFER_SIZE is the number of collectives the flight recorder keeps "
      "(0 turns it off)"));
  s.dumpOnTimeout = envInteger("TORCH_HCCL_DUMP_ON_TIMEOUT", 0, 0, 1,
                               "TORCH_HCCL_DUMP_ON_TIMEOUT=1 dumps the flight recorder of "
                               "every rank when a collective times out") == 1;
  if (const char* stem = std::getenv("TORCH_HCCL_DEBUG_INFO_TEMP_FILE"); stem && *stem) {
    s.tempFileStem = stem;
  }
  if (const char* pipe = std::getenv("TORCH_HCCL_DEBUG_INFO_PIPE_FILE"); pipe && *pipe) {
    s.pipeFileStem = pipe;
  }
  return s;
}

Recorder* recorder() {
  static Recorder* r = [] {
    Recorder* fr = Recorder::get();
    // c10d's recorder reads PyTorch's own variables (TORCH_FR_BUFFER_SIZE); hccl groups follow
    // torch_npu's.
    fr->max_entries_ = flightRecorderSettings().bufferSize;
    fr->enabled_ = fr->max_entries_ > 0;
    return fr;
  }();
  return r;
}

}  // namespace

bool FlightRecorderEvent::query() const {
  // A collective that failed (its deadline passed) never completed: only success counts, so
  // the dump shows it as the analyzer expects a stuck collective.
  return event == nullptr || npuEventQuery(event) == npuSuccess;
}

const FlightRecorderSettings& flightRecorderSettings() {
  static const FlightRecorderSettings settings = readSettings();
  return settings;
}

bool flightRecorderEnabled() { return flightRecorderSettings().bufferSize > 0; }

std::optional<size_t> flightRecorderRecord(
    size_t pgId, const std::tuple<std::string, std::string>& pgName, size_t collectiveSeq,
    size_t p2pSeq, size_t opId, std::string profilingName, const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs, FlightRecorderEvent* start, FlightRecorderEvent* end,
    std::chrono::milliseconds timeout, std::shared_ptr<c10d::ProcessGroupStatus> status,
    bool isP2P) {
  if (!flightRecorderEnabled()) return std::nullopt;
  return recorder()->record(pgId, pgName, collectiveSeq, p2pSeq, opId, std::move(profilingName),
                            inputs, outputs, start, end, timeout, std::move(status), isP2P);
}

void flightRecorderRetire(std::optional<size_t> id) {
  if (id.has_value()) recorder()->retire_id(id, /*compute_duration=*/false);
}

void flightRecorderRecordRanks(const std::tuple<std::string, std::string>& pgName,
                               std::vector<uint64_t> ranks) {
  if (flightRecorderEnabled()) recorder()->record_pg_ranks(pgName, std::move(ranks));
}

std::string flightRecorderDump(int rank, std::string* error) {
  if (!flightRecorderEnabled()) {
    *error = "the flight recorder is off (set TORCH_HCCL_TRACE_BUFFER_SIZE)";
    return {};
  }
  // Symbolizing Python frames may need the GIL, which the program may hold while it waits:
  // the helper thread gets a few seconds, then the dump goes without stack traces.
  auto promise = std::make_shared<std::promise<std::string>>();
  std::future<std::string> withStacks = promise->get_future();
  std::thread([promise] {
    try {
      promise->set_value(recorder()->dump(std::nullopt, true, true, false));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }).detach();
  std::string pickled;
  try {
    if (withStacks.wait_for(std::chrono::seconds(5)) == std::future_status::ready) {
      pickled = withStacks.get();
    }
  } catch (const std::exception&) {
    pickled.clear();
  }
  if (pickled.empty()) pickled = recorder()->dump(std::nullopt, true, false, false);

  const std::string path = flightRecorderSettings().tempFileStem + std::to_string(rank);
  const std::string tmp = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(pickled.data(), static_cast<std::streamsize>(pickled.size()));
    if (!out) {
      *error = "cannot write " + tmp + " (TORCH_HCCL_DEBUG_INFO_TEMP_FILE names the stem)";
      return {};
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot rename " + tmp + " to " + path;
    return {};
  }
  return path;
}

}  // namespace torch_npu

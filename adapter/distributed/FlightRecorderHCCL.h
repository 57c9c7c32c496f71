// The HCCL flight recorder: a ring buffer of the recent collectives of every hccl group in the
// process, dumped per rank in PyTorch's flight-recorder pickle format, so that PyTorch's own
// analyzer (`torchfrtrace`, torch.distributed.flight_recorder) reads the dumps of a job.
//
// It is c10d's FlightRecorder template instantiated over the npu runtime's events, configured by
// torch_npu's variables:
//   TORCH_HCCL_TRACE_BUFFER_SIZE      entries kept (default 0: off)
//   TORCH_HCCL_DUMP_ON_TIMEOUT        1: a rank whose collective times out dumps, and asks the
//                                     group's other ranks through the store to dump too
//   TORCH_HCCL_DEBUG_INFO_TEMP_FILE   the dump's path stem; the rank is appended
//                                     (default /tmp/hccl_trace_rank_)
//   TORCH_HCCL_DEBUG_INFO_PIPE_FILE   a stem: each rank makes the named pipe <stem><rank>.pipe,
//                                     and any write to it triggers a dump of that rank
// The watchdog of each group records, retires and dumps; see ProcessGroupHCCL.
#pragma once

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "npu/runtime.h"

namespace c10d {
struct ProcessGroupStatus;
}

namespace torch_npu {

// What c10d's recorder polls for an entry's state: an npu event (not owned).
struct FlightRecorderEvent {
  npuEvent_t event = nullptr;
  bool query() const;
};

struct FlightRecorderSettings {
  size_t bufferSize = 0;
  bool dumpOnTimeout = false;
  std::string tempFileStem = "/tmp/hccl_trace_rank_";
  std::string pipeFileStem;  // empty: no pipe
};

// The settings from the environment (read once).
const FlightRecorderSettings& flightRecorderSettings();
bool flightRecorderEnabled();

// Records a collective as issued; returns its id in the buffer (nullopt when off).
std::optional<size_t> flightRecorderRecord(
    size_t pgId, const std::tuple<std::string, std::string>& pgName, size_t collectiveSeq,
    size_t p2pSeq, size_t opId, std::string profilingName, const std::vector<at::Tensor>& inputs,
    const std::vector<at::Tensor>& outputs, FlightRecorderEvent* start, FlightRecorderEvent* end,
    std::chrono::milliseconds timeout, std::shared_ptr<c10d::ProcessGroupStatus> status,
    bool isP2P);
// The collective has completed, or its work is going away: its events are no longer polled.
void flightRecorderRetire(std::optional<size_t> id);
void flightRecorderRecordRanks(const std::tuple<std::string, std::string>& pgName,
                               std::vector<uint64_t> ranks);
// Writes this process's buffer to <stem><rank> (atomically: a temporary file, then a rename);
// returns the path, or an empty string with the reason in *error. Stack traces are symbolized
// on a helper thread (they may need the GIL); if that takes more than a few seconds the dump is
// written without them.
std::string flightRecorderDump(int rank, std::string* error);

}  // namespace torch_npu

// PYTORCH_NPU_ALLOC_CONF (or PYTORCH_ALLOC_CONF, PyTorch's device-generic name, which torch_npu
// reads the same way; setting both is an error) and PYTORCH_NO_NPU_MEMORY_CACHING.
//
// The grammar is PyTorch's (PYTORCH_CUDA_ALLOC_CONF): comma-separated `key:value` pairs, spaces
// ignored; roundup_power2_divisions also takes a bracketed list `[256:1,512:2,>:8]` whose keys
// are interval starts in MiB (powers of two) or `>` for every interval after the last one.
// Unlike PyTorch, which skips keys it does not know, an unknown key is an error here: a typo in
// an allocator setting otherwise goes unnoticed until a run runs out of memory.
#include <algorithm>
#include <bit>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>

#include "allocator/allocator_internal.h"
#include "npu/caching_allocator.h"
#include "npu/env.h"

namespace npu::alloc {
namespace {

constexpr std::string_view kVariable = "PYTORCH_NPU_ALLOC_CONF";
constexpr std::string_view kGenericVariable = "PYTORCH_ALLOC_CONF";
constexpr std::string_view kKnownKeys =
    "max_split_size_mb, garbage_collection_threshold, expandable_segments, "
    "roundup_power2_divisions, base_addr_aligned_kb, page_size, segment_size_mb, "
    "large_segment_size_mb, per_process_memory_fraction, multi_stream_lazy_reclaim, "
    "pinned_use_background_threads, pin_memory_expandable_segments, pinned_mem_register, "
    "pinned_reserve_segment_size_mb, pinned_max_round_threshold_mb, pinned_max_cached_size_mb";

bool knownKey(std::string_view key) {
  // kKnownKeys is the list, ", "-separated: a key is known when it is one whole entry.
  size_t start = 0;
  while (start < kKnownKeys.size()) {
    size_t end = kKnownKeys.find(", ", start);
    if (end == std::string_view::npos) end = kKnownKeys.size();
    if (kKnownKeys.substr(start, end - start) == key) return true;
    start = end + 2;
  }
  return false;
}

[[noreturn]] void reject(const std::string& what) {
  throw std::invalid_argument(std::string(kVariable) + ": " + what);
}

// Splits into words and the single-character tokens , : [ ] (as PyTorch's lexer does).
std::vector<std::string> tokenize(const std::string& conf) {
  std::vector<std::string> tokens;
  std::string word;
  for (char c : conf) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      if (!word.empty()) tokens.push_back(std::move(word));
      word.clear();
      tokens.emplace_back(1, c);
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      word.push_back(c);
    }
  }
  if (!word.empty()) tokens.push_back(std::move(word));
  return tokens;
}

class Parser {
 public:
  explicit Parser(std::vector<std::string> tokens) : tokens_(std::move(tokens)) {}

  bool done() const { return pos_ >= tokens_.size(); }
  const std::string& peek() const {
    static const std::string kEnd;
    return done() ? kEnd : tokens_[pos_];
  }
  std::string next(const std::string& context) {
    if (done()) reject("expected a value after '" + context + "' but the setting ended");
    return tokens_[pos_++];
  }
  void expect(const std::string& token, const std::string& context) {
    std::string got = done() ? std::string("end of setting") : "'" + tokens_[pos_] + "'";
    if (done() || tokens_[pos_] != token) {
      reject("expected '" + token + "' after '" + context + "', got " + got);
    }
    ++pos_;
  }

 private:
  std::vector<std::string> tokens_;
  size_t pos_ = 0;
};

size_t toSize(const std::string& text, const std::string& key, const std::string& accepted) {
  size_t value = 0;
  auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (err != std::errc() || end != text.data() + text.size()) {
    reject("bad value '" + text + "' for " + key + "; expected " + accepted);
  }
  return value;
}

double toDouble(const std::string& text, const std::string& key, const std::string& accepted) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size()) {
    reject("bad value '" + text + "' for " + key + "; expected " + accepted);
  }
  return value;
}

bool isPowerOfTwo(size_t v) { return v != 0 && std::has_single_bit(v); }

void parseMaxSplitSize(Parser& p, AllocatorConfig& c) {
  const std::string key = "max_split_size_mb";
  const std::string accepted = "an integer number of MiB >= " + std::to_string(kLargeBuffer >> 20);
  std::string text = p.next(key);
  size_t mb = toSize(text, key, accepted);
  // Below one large segment the limit would stop 20 MiB segments from being split at all.
  if (mb < (kLargeBuffer >> 20)) {
    reject("bad value '" + text + "' for " + key + "; expected " + accepted);
  }
  mb = std::min(mb, std::numeric_limits<size_t>::max() / kMiB);
  c.max_split_size = mb * kMiB;
}

void parseGarbageCollectionThreshold(Parser& p, AllocatorConfig& c) {
  const std::string key = "garbage_collection_threshold";
  const std::string accepted = "a fraction strictly between 0.0 and 1.0";
  std::string text = p.next(key);
  double v = toDouble(text, key, accepted);
  if (!(v > 0.0 && v < 1.0)) {
    reject("bad value '" + text + "' for " + key + "; expected " + accepted);
  }
  c.garbage_collection_threshold = v;
}

bool parseBool(Parser& p, const std::string& key) {
  std::string text = p.next(key);
  if (text == "True") return true;
  if (text == "False") return false;
  reject("bad value '" + text + "' for " + key + "; expected True or False");
}

void parseExpandableSegments(Parser& p, AllocatorConfig& c) {
  c.expandable_segments = parseBool(p, "expandable_segments");
}

// An integer in [low, high] (high 0: no upper bound).
size_t parseBounded(Parser& p, const std::string& key, size_t low, size_t high,
                    const std::string& accepted) {
  std::string text = p.next(key);
  size_t v = toSize(text, key, accepted);
  if (v < low || (high != 0 && v > high)) {
    reject("bad value '" + text + "' for " + key + "; expected " + accepted);
  }
  return v;
}

void parsePageSize(Parser& p, AllocatorConfig& c) {
  const std::string key = "page_size";
  std::string text = p.next(key);
  if (text != "1g") reject("bad value '" + text + "' for " + key + "; expected 1g (the only size)");
  c.huge_pages = true;
}

void parseMemoryFraction(Parser& p, AllocatorConfig& c) {
  const std::string key = "per_process_memory_fraction";
  const std::string accepted = "a fraction in [0.0, 1.0]";
  std::string text = p.next(key);
  double v = toDouble(text, key, accepted);
  if (!(v >= 0.0 && v <= 1.0)) reject("bad value '" + text + "' for " + key + "; expected " + accepted);
  c.per_process_memory_fraction = v;
}

void parseRoundupPower2Divisions(Parser& p, AllocatorConfig& c) {
  const std::string key = "roundup_power2_divisions";
  const std::string accepted_div = "a power of two (or 0 to disable rounding for the interval)";
  std::vector<size_t> divisions(kRoundupPower2Intervals, 0);
  if (p.peek() != "[") {
    // One value for every interval (PyTorch's original form); 0 is not allowed here.
    std::string text = p.next(key);
    size_t v = toSize(text, key, "a power of two or a list such as [256:1,512:2,>:8]");
    if (!isPowerOfTwo(v)) {
      reject("bad value '" + text + "' for " + key + "; expected a power of two");
    }
    std::fill(divisions.begin(), divisions.end(), v);
    c.roundup_power2_divisions = std::move(divisions);
    return;
  }
  p.expect("[", key);
  bool first = true;
  size_t last_index = 0;
  while (p.peek() != "]") {
    std::string bound = p.next(key + ":[");
    p.expect(":", bound);
    std::string text = p.next(bound);
    size_t v = toSize(text, key, accepted_div);
    if (v != 0 && !isPowerOfTwo(v)) {
      reject("bad division '" + text + "' for " + key + " interval '" + bound + "'; expected " +
             accepted_div);
    }
    if (bound == ">") {
      std::fill(divisions.begin() + static_cast<std::ptrdiff_t>(std::min(
                                        last_index + 1, divisions.size())),
                divisions.end(), v);
    } else {
      size_t mb = toSize(bound, key,
                         "interval starts in MiB that are powers of two, or '>' for the rest");
      if (!isPowerOfTwo(mb)) {
        reject("bad interval '" + bound + "' for " + key +
               "; expected interval starts in MiB that are powers of two, or '>' for the rest");
      }
      size_t index = std::min<size_t>(std::bit_width(mb) - 1, kRoundupPower2Intervals - 1);
      // The first interval named also covers every smaller size.
      if (first) std::fill(divisions.begin(), divisions.begin() + index, v);
      first = false;
      divisions[index] = v;
      last_index = index;
    }
    if (p.peek() == ",") {
      p.expect(",", text);
    } else if (p.peek() != "]") {
      p.expect("]", text);  // throws with the offending token (or the missing bracket)
    }
  }
  p.expect("]", key);
  c.roundup_power2_divisions = std::move(divisions);
}

// PYTORCH_NO_NPU_MEMORY_CACHING: 1 disables the cache, 0 (or unset) keeps it. The spellings
// true/false, yes/no and on/off are taken too, in any case; anything else is refused rather
// than guessed (a value such as "disable" once turned caching off silently).
bool cachingDisabled(const char* value) {
  if (value == nullptr) return false;
  std::string v = env::trimmed(value);
  for (char& ch : v) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (v.empty() || v == "0" || v == "false" || v == "off" || v == "no") return false;
  if (v == "1" || v == "true" || v == "on" || v == "yes") return true;
  throw std::invalid_argument(env::invalid("PYTORCH_NO_NPU_MEMORY_CACHING", value,
                                           "1 (disable the caching allocator) or 0 (keep it)"));
}

}  // namespace

AllocatorConfig AllocatorConfig::parse(const std::string& conf) {
  AllocatorConfig c;
  update(conf, c);
  return c;
}

void AllocatorConfig::update(const std::string& conf, AllocatorConfig& config) {
  AllocatorConfig c = config;  // applied only once the whole setting parsed
  bool large_segment_named = false;
  std::optional<size_t> segment_size;
  Parser p(tokenize(conf));
  while (!p.done()) {
    std::string key = p.next("");
    if (key == ",") continue;  // tolerate empty entries ("a:1,,b:2", a trailing comma)
    if (!knownKey(key)) {
      reject("unknown key '" + key + "'; expected one of " + std::string(kKnownKeys));
    }
    p.expect(":", key);
    if (key == "max_split_size_mb") {
      parseMaxSplitSize(p, c);
    } else if (key == "garbage_collection_threshold") {
      parseGarbageCollectionThreshold(p, c);
    } else if (key == "expandable_segments") {
      parseExpandableSegments(p, c);
    } else if (key == "roundup_power2_divisions") {
      parseRoundupPower2Divisions(p, c);
    } else if (key == "base_addr_aligned_kb") {
      c.base_addr_aligned_kb = parseBounded(p, key, 0, 16, "an integer in [0, 16] (KiB)");
    } else if (key == "page_size") {
      parsePageSize(p, c);
    } else if (key == "segment_size_mb") {
      segment_size = parseBounded(p, key, 20, 512, "an integer number of MiB in [20, 512]");
    } else if (key == "large_segment_size_mb") {
      // torch_npu's bound: greater than 10 (the largest request a large segment is shared by).
      c.large_segment_size =
          parseBounded(p, key, 11, SIZE_MAX / kMiB, "an integer number of MiB greater than 10") *
          kMiB;
      large_segment_named = true;
    } else if (key == "per_process_memory_fraction") {
      parseMemoryFraction(p, c);
    } else if (key == "multi_stream_lazy_reclaim") {
      c.multi_stream_lazy_reclaim = parseBool(p, key);
    } else if (key == "pinned_use_background_threads") {
      c.pinned_use_background_threads = parseBool(p, key);
    } else if (key == "pin_memory_expandable_segments") {
      c.pin_memory_expandable_segments = parseBool(p, key);
    } else if (key == "pinned_mem_register") {
      c.pinned_mem_register = parseBool(p, key);
    } else if (key == "pinned_reserve_segment_size_mb") {
      c.pinned_reserve_segment_size_mb =
          parseBounded(p, key, 0, 0, "a non-negative integer number of MiB");
    } else if (key == "pinned_max_round_threshold_mb") {
      c.pinned_max_round_threshold_mb =
          parseBounded(p, key, 1, 0, "a positive integer number of MiB");
    } else if (key == "pinned_max_cached_size_mb") {
      c.pinned_max_cached_size_mb = parseBounded(p, key, 1, 0, "a positive integer number of MiB");
    } else {
      reject("unknown key '" + key + "'; expected one of " + std::string(kKnownKeys));
    }
    if (!p.done()) p.expect(",", key);
  }
  // segment_size_mb is the deprecated spelling: large_segment_size_mb wins when both are named.
  if (segment_size && !large_segment_named) c.large_segment_size = *segment_size * kMiB;
  if (c.max_split_size != SIZE_MAX && c.max_split_size < c.large_segment_size) {
    reject("max_split_size_mb (" + std::to_string(c.max_split_size / kMiB) +
           ") must be at least large_segment_size_mb (" +
           std::to_string(c.large_segment_size / kMiB) + ")");
  }
  if (c.pin_memory_expandable_segments && c.pinned_mem_register) {
    reject("pinned_mem_register:True cannot be combined with pin_memory_expandable_segments:True");
  }
  config = std::move(c);
}

AllocatorConfig AllocatorConfig::fromEnvironment() {
  const char* npu_conf = std::getenv(kVariable.data());
  const char* generic_conf = std::getenv(kGenericVariable.data());
  if (npu_conf != nullptr && generic_conf != nullptr) {
    // torch_npu refuses the pair too: which one wins would otherwise be a guess.
    throw std::invalid_argument(
        std::string(kVariable) + " and " + std::string(kGenericVariable) +
        " are both set; they take the same settings, so set only one of them (torch_npu "
        "recommends " + std::string(kGenericVariable) + ")");
  }
  AllocatorConfig c;
  if (npu_conf != nullptr) {
    c = parse(npu_conf);
  } else if (generic_conf != nullptr) {
    try {
      c = parse(generic_conf);
    } catch (const std::invalid_argument& e) {  // name the variable the setting came from
      const std::string what = e.what();
      throw std::invalid_argument(std::string(kGenericVariable) +
                                  what.substr(std::min(what.size(), kVariable.size())));
    }
  }
  c.caching_disabled = cachingDisabled(std::getenv("PYTORCH_NO_NPU_MEMORY_CACHING"));
  return c;
}

}  // namespace npu::alloc

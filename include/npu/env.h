/*
 * Parsing of environment variables, shared by the runtime, the allocator and the kernels'
 * thread pool (header-only: kernels/ depends on nothing). Each parser accepts the whole value
 * or nothing, so "12abc", "" and "0x10" are refused, never half-read; the caller turns a
 * refusal into a message that names the variable, the value and the allowed range
 * (npu::env::invalid). C++ only.
 */
#ifndef NPU_ENV_H_
#define NPU_ENV_H_

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace npu::env {

// Blanks around a value are tolerated ("  4 " is 4): shells and .env files add them.
inline std::string trimmed(const char* text) {
  std::string s = text ? text : "";
  const size_t b = s.find_first_not_of(" \t\r\n");
  const size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// A decimal integer in [lo, hi].
inline bool parseInteger(const char* text, long long lo, long long hi, long long* out) {
  const std::string s = trimmed(text);
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (i == 0 && (c == '-' || c == '+')))) return false;
  }
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end == s.c_str() || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// A finite decimal number in [lo, hi] ("64", "0.5", "1e3"; no hex, inf or nan).
inline bool parseNumber(const char* text, double lo, double hi, double* out) {
  const std::string s = trimmed(text);
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' ||
                    c == '+';
    if (!ok) return false;
  }
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) return false;
  *out = v;
  return true;
}

// "0" or "1", as CUDA_LAUNCH_BLOCKING and its Ascend twin take them.
inline bool parseFlag(const char* text, bool* out) {
  const std::string s = trimmed(text);
  if (s != "0" && s != "1") return false;
  *out = s == "1";
  return true;
}

// A device list as ASCEND_RT_VISIBLE_DEVICES takes it: comma-separated ids, ascending, unique
// and below `count`. On refusal, *why says what is wrong with which id.
inline bool parseDeviceList(const char* text, int count, std::vector<int>* ids,
                            std::string* why) {
  const std::string all = text ? text : "";
  ids->clear();
  if (trimmed(all.c_str()).empty()) {
    *why = "it is empty";
    return false;
  }
  size_t start = 0;
  for (;;) {
    const size_t comma = all.find(',', start);
    const std::string token =
        trimmed(all.substr(start, comma == std::string::npos ? std::string::npos
                                                             : comma - start)
                    .c_str());
    long long id = 0;
    if (!parseInteger(token.c_str(), -(1ll << 62), 1ll << 62, &id)) {
      *why = "'" + token.substr(0, 40) + "' is not a device id";
      return false;
    }
    if (id < 0 || id >= count) {
      *why = "device id " + std::to_string(id) + " is out of range [0, " +
             std::to_string(count) + ")";
      return false;
    }
    if (!ids->empty() && id <= ids->back()) {
      *why = "device ids must be ascending and unique (" + std::to_string(id) + " follows " +
             std::to_string(ids->back()) + ")";
      return false;
    }
    ids->push_back(static_cast<int>(id));
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

// "NAME='value'", the value escaped and cut at 80 characters, so that a binary or huge value
// cannot garble a message.
inline std::string quoted(const char* name, const char* value) {
  std::string shown;
  for (const char* p = value ? value : ""; *p != '\0'; ++p) {
    if (shown.size() >= 80) {
      shown += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(*p);
    if (c < 0x20 || c >= 0x7f || c == '\'' || c == '\\') {
      static const char* const kHex = "0123456789abcdef";
      shown += "\\x";
      shown += kHex[c >> 4];
      shown += kHex[c & 15];
    } else {
      shown += static_cast<char>(c);
    }
  }
  return std::string(name) + "='" + shown + "'";
}

// "NAME='value' is invalid: expected <expected>".
inline std::string invalid(const char* name, const char* value, const std::string& expected) {
  return quoted(name, value) + " is invalid: expected " + expected;
}

}  // namespace npu::env

#endif /* NPU_ENV_H_ */

// A brief fuzz of the environment parsers (include/npu/env.h), as a GoogleTest since libFuzzer
// needs clang and this tree builds with GCC: a few thousand random and adversarial strings per
// parser, each checked for no crash and a sane result (a value in range that reads back the
// same, or a refusal). Deterministic (fixed seed), so a failure reproduces.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "npu/env.h"

namespace {

constexpr int kRounds = 4000;

const std::vector<std::string>& adversarial() {
  static const std::vector<std::string> cases = {
      "", " ", "\t", "0", "-0", "+0", "1", "-1", "00", "007", "1 ", " 1", "1 2", "1,", ",1", ",",
      ",,", " , ", "0,1", "1,0", "0,,1", "0, 1", "9223372036854775807", "9223372036854775808",
      "-9223372036854775808", "-9223372036854775809", "99999999999999999999999999999", "1e308",
      "1e309", "-1e308", "1e-400", "4.9e-324", "0x10", "0X1p4", "inf", "-inf", "nan", "NaN",
      "infinity", "1e", "e1", ".", "-", "+", "--1", "+-1", "1.", ".5", "5.", "1e+", "1e-", "1..2",
      "\xff", "\x80\x80", "1\n", "\n1", "abc", "yes", "true", "on", "64GB", "٣", "１",
      std::string(1000, '9'), std::string(5000, ','), std::string("1\0 2", 4)};
  return cases;
}

std::string randomString(std::mt19937& rng) {
  static const std::string alphabet = "0123456789-+.eE ,x\t\n\r\x01\x7f\xff\x80" "abcinfNA'\\";
  std::uniform_int_distribution<int> len(0, 24), pick(0, static_cast<int>(alphabet.size()) - 1),
      mode(0, 9);
  std::string s;
  const int n = len(rng);
  for (int i = 0; i < n; ++i) {
    // Mostly digits and separators, so that many strings come close to being valid.
    s += mode(rng) < 6 ? static_cast<char>('0' + pick(rng) % 10) : alphabet[pick(rng)];
  }
  return s;
}

template <typename F>
void forEachInput(F check) {
  for (const std::string& s : adversarial()) check(s);
  std::mt19937 rng(20261203);
  for (int i = 0; i < kRounds; ++i) check(randomString(rng));
}

}  // namespace

TEST(EnvFuzz, IntegerParserReturnsOnlyValuesInRange) {
  int accepted = 0;
  forEachInput([&](const std::string& s) {
    for (auto [lo, hi] : {std::pair<long long, long long>{1, 256}, {-5, 5}, {LLONG_MIN, LLONG_MAX}}) {
      long long v = 12345;
      if (npu::env::parseInteger(s.c_str(), lo, hi, &v)) {
        ++accepted;
        ASSERT_GE(v, lo) << s;
        ASSERT_LE(v, hi) << s;
        long long again = 0;  // what it printed reads back the same
        ASSERT_TRUE(npu::env::parseInteger(std::to_string(v).c_str(), lo, hi, &again)) << s;
        ASSERT_EQ(again, v);
      } else {
        ASSERT_EQ(v, 12345) << "a refusal must leave the output alone: " << s;
      }
    }
  });
  EXPECT_GT(accepted, 100);  // the generator does reach valid inputs
}

TEST(EnvFuzz, NumberParserReturnsOnlyFiniteValuesInRange) {
  int accepted = 0;
  forEachInput([&](const std::string& s) {
    double v = -7;
    if (npu::env::parseNumber(s.c_str(), 1.0 / 1024, 1 << 20, &v)) {
      ++accepted;
      ASSERT_TRUE(std::isfinite(v)) << s;
      ASSERT_GE(v, 1.0 / 1024) << s;
      ASSERT_LE(v, double(1 << 20)) << s;
    } else {
      ASSERT_EQ(v, -7) << s;
    }
  });
  EXPECT_GT(accepted, 100);
}

TEST(EnvFuzz, FlagParserTakesOnlyZeroAndOne) {
  forEachInput([&](const std::string& s) {
    bool v = false;
    if (npu::env::parseFlag(s.c_str(), &v)) {
      const std::string t = npu::env::trimmed(s.c_str());
      ASSERT_TRUE(t == "0" || t == "1") << s;
      ASSERT_EQ(v, t == "1");
    }
  });
}

TEST(EnvFuzz, DeviceListIsAscendingUniqueInRangeOrRefusedWithAReason) {
  int accepted = 0;
  forEachInput([&](const std::string& s) {
    for (int count : {1, 8, 64}) {
      std::vector<int> ids;
      std::string why;
      if (npu::env::parseDeviceList(s.c_str(), count, &ids, &why)) {
        ++accepted;
        ASSERT_FALSE(ids.empty()) << s;
        for (size_t i = 0; i < ids.size(); ++i) {
          ASSERT_GE(ids[i], 0) << s;
          ASSERT_LT(ids[i], count) << s;
          if (i > 0) {
            ASSERT_GT(ids[i], ids[i - 1]) << s;
          }
        }
      } else {
        ASSERT_FALSE(why.empty()) << s;
        ASSERT_LT(why.size(), 200u) << "the reason quotes at most a piece of the value";
      }
    }
  });
  EXPECT_GT(accepted, 20);
}

TEST(EnvFuzz, QuotedValuesArePrintableAndBounded) {
  forEachInput([&](const std::string& s) {
    const std::string q = npu::env::quoted("NPU_SIM_HBM_GB", s.c_str());
    ASSERT_LE(q.size(), std::string("NPU_SIM_HBM_GB=''").size() + 4 * 80 + 3) << s;
    for (char c : q) ASSERT_TRUE(c >= 0x20 && c < 0x7f) << s;
    ASSERT_EQ(q.rfind("NPU_SIM_HBM_GB='", 0), 0u);
  });
}

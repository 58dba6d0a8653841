#include "modern_fixtures.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

#include "test_support.h"

namespace ucfs::testing {

std::string ModernFixtureDir(const std::string& name) { return TestDataDir() + "/modern/" + name; }

const nlohmann::json& Modern(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, nlohmann::json> parsed;
  std::lock_guard<std::mutex> lock(mu);
  auto it = parsed.find(name);
  if (it == parsed.end()) {
    it =
        parsed
            .emplace(name, nlohmann::json::parse(ReadFile(ModernFixtureDir(name) + "/MODERN.json")))
            .first;
  }
  return it->second;
}

std::string LiveBytes(const nlohmann::json& value) {
  const std::string b64 = value.at("b64").get<std::string>();
  auto digit = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : b64) {
    if (c == '=') break;
    const int d = digit(c);
    EXPECT_GE(d, 0) << "not base64: " << c;
    if (d < 0) return out;
    acc = (acc << 6) | static_cast<uint32_t>(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  return out;
}

std::string LiveState(const std::string& fixture, const std::string& param,
                      const std::string& state) {
  return LiveBytes(Modern(fixture).at("live_state").at("params").at(param).at(state));
}

}  // namespace ucfs::testing

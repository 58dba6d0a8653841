// The fixtures made by DeepSpeed 0.19.8 (tests/data/modern/<name>): where
// they are, and the live values their MODERN.json recorded at save time.
#ifndef UCFS_TESTS_MODERN_FIXTURES_H_
#define UCFS_TESTS_MODERN_FIXTURES_H_

#include <nlohmann/json.hpp>
#include <string>

namespace ucfs::testing {

// tests/data/modern/<name>
std::string ModernFixtureDir(const std::string& name);
// Its MODERN.json, parsed once per process.
const nlohmann::json& Modern(const std::string& name);
// The bytes of a live value of MODERN.json ({"b64": ...}: the tensor's
// little-endian bytes, C order), decoded here rather than by ucfs.
std::string LiveBytes(const nlohmann::json& value);
// live_state.params[param][state]'s bytes ("fp32", "exp_avg", ...).
std::string LiveState(const std::string& fixture, const std::string& param,
                      const std::string& state);

}  // namespace ucfs::testing

#endif  // UCFS_TESTS_MODERN_FIXTURES_H_

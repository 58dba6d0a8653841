#include "ucfs/checkpoint/ds_version.h"

#include <gtest/gtest.h>

namespace ucfs {
namespace {

TEST(VersionAtLeast, ReleasesLocalVersionsAndGarbage) {
  EXPECT_TRUE(VersionAtLeast("0.19.8", {0, 19, 8}));
  EXPECT_FALSE(VersionAtLeast("0.19.7", {0, 19, 8}));
  EXPECT_TRUE(VersionAtLeast("0.20", {0, 19, 8}));
  EXPECT_TRUE(VersionAtLeast("0.16.4+a1b2c3", {0, 15, 3}));
  EXPECT_FALSE(VersionAtLeast("0.15.2", {0, 15, 3}));
  EXPECT_TRUE(VersionAtLeast("1.0.0", {0, 19, 8}));
  EXPECT_FALSE(VersionAtLeast("", {0, 0, 1}));
  EXPECT_FALSE(VersionAtLeast("unknown", {0, 0, 1}));
  EXPECT_TRUE(VersionAtLeast("0.19.10", {0, 19, 8}));
}

}  // namespace
}  // namespace ucfs

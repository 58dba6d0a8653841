#include <gtest/gtest.h>

#include "ucfs/base/env.h"

namespace ucfs {
namespace {

TEST(MemEnv, OpenFilesSeeInPlaceEditsButNotReplacements) {
  MemEnv env;
  env.WriteFile("/c/f", "abc");
  auto file = env.Open("/c/f");
  ASSERT_TRUE(file.ok());
  const FileIdentity opened = (*file)->Stat()->identity;
  env.TouchCtime("/c/f");
  EXPECT_FALSE((*file)->Stat()->identity == opened);
  EXPECT_EQ((*file)->Stat()->identity, env.Stat("/c/f")->identity);
  auto second = env.Open("/c/f");
  const FileIdentity at_second = (*second)->Stat()->identity;
  env.RemoveFile("/c/f");
  env.WriteFile("/c/f", "abd");  // a new file at the path
  EXPECT_EQ((*second)->Stat()->identity, at_second);
  EXPECT_NE(env.Stat("/c/f")->identity.inode, at_second.inode);
  EXPECT_TRUE(env.Stat("/c")->is_dir);
  EXPECT_FALSE(env.Open("/c").ok());
}

// Directories made explicitly list and stat as the implied ones do; the
// paths a mount is planned with resolve and confine as on disk.
TEST(MemEnv, MadeDirectoriesRealPathsAndConfinement) {
  MemEnv env;
  env.WriteFile("/c/tag/f", "x");
  auto made = env.MakeDir("/up", 0750, 42);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(*made);
  EXPECT_FALSE(*env.MakeDir("/up", 0755, 7));  // there already: left as it was
  EXPECT_FALSE(*env.MakeDir("/c", 0755, 7));   // implied by a file below it
  EXPECT_FALSE(env.MakeDir("/none/below", 0755, 7).ok());
  EXPECT_FALSE(env.MakeDir("/c/tag/f", 0755, 7).ok());
  const FileStat up = *env.Stat("/up");
  EXPECT_TRUE(up.is_dir);
  EXPECT_EQ(up.access.mode, 0750u);
  EXPECT_EQ(up.identity.mtime_ns, 42);
  EXPECT_TRUE(env.ListDir("/up")->empty());
  auto root = env.ListDir("/");
  ASSERT_TRUE(root.ok());
  ASSERT_EQ(root->size(), 2u);
  EXPECT_EQ((*root)[0].name, "c");
  EXPECT_EQ((*root)[1].name, "up");
  EXPECT_TRUE((*root)[1].is_dir);
  EXPECT_EQ(*env.RealPath("/c/./tag/../tag/"), "/c/tag");
  EXPECT_FALSE(env.RealPath("/c/nothing").ok());
  auto confined = env.Confine("/c");
  ASSERT_TRUE(confined.ok());
  EXPECT_EQ(*(*confined)->ReadSmallFile("/c/tag/f"), "x");
  EXPECT_EQ((*confined)->Stat("/up").status().posix_errno(), EACCES);
  EXPECT_FALSE((*confined)->ListDir("/").ok());
}

}  // namespace
}  // namespace ucfs

#include "ucfs/base/path.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"

namespace ucfs {
namespace {

struct BelowCase {
  const char* path;
  const char* dir;
  std::optional<const char*> rel;  // nullopt: not at or below
};

// The one rule of every confinement, case by case.
TEST(Path, RelativeBelowTable) {
  const BelowCase cases[] = {
      {"/a/b", "/a/b", ""},
      {"/a/b/c", "/a/b", "c"},
      {"/a/b/c/d", "/a/b", "c/d"},
      {"/a/bc", "/a/b", std::nullopt},  // a component matches whole
      {"/a/b", "/a/bc", std::nullopt},
      {"/a", "/a/b", std::nullopt},  // above is not below
      {"/a/b/", "/a/b", ""},         // trailing slashes do not count
      {"/a/b/c/", "/a/b/", "c"},
      {"/a/b//c", "/a/b", "c"},  // nor doubled ones
      {"/a/b", "/", "a/b"},      // everything is below the root
      {"/", "/", ""},
      {"/a/b/../../etc", "/a/b", std::nullopt},  // climbs out
      {"/a/b/..", "/a/b", std::nullopt},
      {"/a/b/c..", "/a/b", "c.."},  // a name with dots is a name
      {"/a/b/..c/d", "/a/b", "..c/d"},
      {"a/b", "", "a/b"},  // "" tops a relative tree
      {"", "", ""},
      {"a/b", "a", "b"},
      {"ab", "a", std::nullopt},
      {"/a/b", "", std::nullopt},  // absolute against relative
      {"a/b", "/a", std::nullopt},
  };
  for (const BelowCase& c : cases) {
    SCOPED_TRACE(std::string(c.path) + " below " + c.dir);
    const auto rel = RelativeBelow(c.path, c.dir);
    ASSERT_EQ(rel.has_value(), c.rel.has_value());
    if (rel) EXPECT_EQ(*rel, *c.rel);
    EXPECT_EQ(IsAtOrBelow(c.path, c.dir), c.rel.has_value());
  }
}

TEST(Path, JoinPathAndSplitLast) {
  EXPECT_EQ(JoinPath("/a", "b"), "/a/b");
  EXPECT_EQ(JoinPath("/a/", "b"), "/a/b");
  EXPECT_EQ(JoinPath("/", "b"), "/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
  using Split = std::pair<std::string_view, std::string_view>;
  EXPECT_EQ(SplitLast("a/b/c"), Split("a/b", "c"));
  EXPECT_EQ(SplitLast("c"), Split("", "c"));
  EXPECT_EQ(SplitLast("/c"), Split("/", "c"));
  EXPECT_EQ(SplitLast("/a/c/"), Split("/a", "c"));
  EXPECT_EQ(SplitLast(""), Split("", ""));
  EXPECT_EQ(Components("/a//b/"), (std::vector<std::string_view>{"a", "b"}));
  EXPECT_TRUE(Components("/").empty());
  EXPECT_EQ(BaseName("a/b/c.pt"), "c.pt");
  EXPECT_EQ(BaseName("c.pt"), "c.pt");
}

// A symlink's string is only a string here: RealPath is what follows it.
TEST(Path, RealPathFollowsLinksAndNamesWhatIsMissing) {
  namespace fs = std::filesystem;
  const std::string made = testing::FreshTempDir("path_real");
  fs::create_directories(made + "/real/dir");
  const std::string base = RealPath(made).value();
  fs::create_symlink("real/dir", base + "/link");
  auto real = RealPath(base + "/link");
  ASSERT_TRUE(real.ok()) << real.status().ToString();
  EXPECT_EQ(*real, base + "/real/dir");
  // The link's string is below `base/link`; where it leads is not.
  EXPECT_FALSE(IsAtOrBelow(*real, base + "/link"));
  auto missing = RealPath(base + "/nothing");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().posix_errno(), ENOENT);
  EXPECT_NE(missing.status().message().find(base + "/nothing"), std::string::npos);
}

TEST(Path, TimespecRoundTrips) {
  const int64_t ns = 1733300000123456789;
  EXPECT_EQ(NanosOf(TimespecOf(ns)), ns);
  EXPECT_EQ(TimespecOf(ns).tv_nsec, 123456789);
}

}  // namespace
}  // namespace ucfs

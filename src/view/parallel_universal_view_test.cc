#include "ucfs/view/parallel_universal_view.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "test_support.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

// Every file below `dir` of `view`, by relative path, with its bytes.
void Tree(Env& env, View& view, InodeId dir, const std::string& prefix,
          std::map<std::string, std::string>* out) {
  auto listed = view.ReadDir(dir);
  ASSERT_TRUE(listed.ok()) << prefix << ": " << listed.status().ToString();
  for (const auto& [name, attr] : *listed) {
    if (attr.is_dir) {
      Tree(env, view, attr.inode, prefix + name + "/", out);
    } else {
      (*out)[prefix + name] = testing::ReadViewFile(env, view, attr.inode);
    }
  }
}

class ParallelUniversalViewTest : public ::testing::TestWithParam<std::string> {};

// Byte for byte the universal checkpoint the fixture's expected/ holds
// (DeepSpeed 0.14.5's converter's output where it is right, and the
// reference where it is not: ZeRO-3 with TP), with real CRCs.
TEST_P(ParallelUniversalViewTest, TreeIsByteIdenticalToTheReference) {
  const std::string dir = testing::TpFixtureDir(GetParam());
  auto opened = ParallelCheckpoint::Open(*Env::Posix(), dir + "/checkpoint");
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  auto c = std::make_shared<const ParallelCheckpoint>(std::move(opened).value());
  UniversalViewOptions options;
  options.compute_crc = true;
  auto view = BuildParallelUniversalView(*Env::Posix(), c, options);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(testing::ReadViewFile(*Env::Posix(), **view,
                                  testing::ResolvePath(**view, "latest_universal")),
            testing::ReadFile(dir + "/expected/latest_universal"));
  std::map<std::string, std::string> shown;
  Tree(*Env::Posix(), **view, testing::ResolvePath(**view, "global_step4_universal"), "", &shown);
  std::map<std::string, std::string> expected;
  const fs::path ref = dir + "/expected/global_step4_universal";
  for (const auto& e : fs::recursive_directory_iterator(ref)) {
    if (e.is_regular_file()) {
      expected[fs::relative(e.path(), ref).string()] = testing::ReadFile(e.path().string());
    }
  }
  ASSERT_EQ(shown.size(), expected.size());
  for (const auto& [path, bytes] : expected) {
    ASSERT_TRUE(shown.contains(path)) << path;
    EXPECT_TRUE(shown[path] == bytes)
        << path << ": " << shown[path].size() << " bytes shown, " << bytes.size() << " expected";
  }
}

INSTANTIATE_TEST_SUITE_P(TpFixtures, ParallelUniversalViewTest,
                         ::testing::Values("tp_z1_fp32_t2d2", "pp_bf16opt_p2t2d2",
                                           "z3_tp_fp32_t2d2"));

}  // namespace
}  // namespace ucfs

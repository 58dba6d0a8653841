// Every view of DeepSpeed 0.19.8's parameter-aligned ZeRO-1/2 fixtures
// (align_z1_fp32_ws2, align_z2_fp32_ws3): the universal tree byte for byte
// DeepSpeed's own ds_to_universal output (expected/), and the reshard view
// at any N a checkpoint whose every state is the source's.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_support.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;
using testing::ModernDir;

class AlignedViewsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AlignedViewsTest, UniversalTreeIsDeepSpeedsOwn) {
  Env& env = *Env::Posix();
  auto c = Checkpoint::Open(env, ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto ckpt = std::make_shared<const Checkpoint>(std::move(c).value());
  UniversalViewOptions options;
  options.compute_crc = true;
  auto view = BuildUniversalView(env, ckpt, options);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  const std::string ref = ModernDir(GetParam()) + "/expected/global_step4_universal";
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(ref)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), ref).string();
    const InodeId node = testing::ResolvePath(**view, "global_step4_universal/" + rel);
    EXPECT_EQ(testing::ReadViewFile(env, **view, node), testing::ReadFile(e.path().string()))
        << rel;
    ++files;
  }
  EXPECT_GT(files, 12u * 4);
}

// At N below and above W the rank files open as a checkpoint with the
// same paddings and every state equal to the live engine's.
TEST_P(AlignedViewsTest, ReshardAtAnyNHoldsTheSameValues) {
  Env& env = *Env::Posix();
  auto c = Checkpoint::Open(env, ModernDir(GetParam()) + "/checkpoint");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  auto source = std::make_shared<const Checkpoint>(std::move(c).value());
  for (uint32_t n = 1; n <= 5; ++n) {
    SCOPED_TRACE("N=" + std::to_string(n));
    auto view = BuildReshardView(env, source, {n, std::nullopt});
    ASSERT_TRUE(view.ok()) << view.status().ToString();
    MemEnv out;
    testing::CopyViewCheckpoint(env, **view, "global_step4", &out, "/r");
    auto r = Checkpoint::Open(out, "/r");
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->world_size(), n);
    EXPECT_EQ(r->param_alignment(), source->param_alignment());
    EXPECT_GT(r->param_alignment(), 1u);
    ASSERT_EQ(r->params().size(), source->params().size());
    for (size_t p = 0; p < r->params().size(); ++p) {
      const ParamInfo& info = r->params()[p];
      EXPECT_EQ(info.offset, source->params()[p].offset);
      for (size_t s = 0; s < r->states().size(); ++s) {
        EXPECT_EQ(testing::FullState(*r, p, s, &out),
                  testing::LiveState(GetParam(), info.name, r->states()[s].name))
            << info.name;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, AlignedViewsTest,
                         ::testing::Values("align_z1_fp32_ws2", "align_z2_fp32_ws3",
                                           "align_z2_bf16_ws2"));

}  // namespace
}  // namespace ucfs

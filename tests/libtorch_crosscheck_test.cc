// A second, independent reader of the reference files: LibTorch's own
// torch.save reader (torch::jit::pickle_load). It cannot read DeepSpeed's
// rank files (it rejects their globals), but it reads the bare-tensor files
// ds_to_universal writes, which is the job it is good at. Every one of them
// must agree with what ucfs's checkpoint model maps from the rank shards.
#include <gtest/gtest.h>

#include <filesystem>

#include "libtorch_reader.h"
#include "test_support.h"
#include "ucfs/checkpoint/checkpoint.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

TEST(LibTorchCrossCheck, UniversalFilesAgreeWithTheCheckpointModel) {
  size_t files = 0;
  for (const std::string& fixture : testing::FixtureNames()) {
    auto c = Checkpoint::Open(*Env::Posix(), testing::FixtureDir(fixture) + "/checkpoint");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::string zero;
    for (const char* base : {"/checkpoint", "/expected"}) {
      std::string dir = testing::FixtureDir(fixture) + base + "/global_step4_universal/zero";
      if (fs::exists(dir)) zero = dir;
    }
    ASSERT_FALSE(zero.empty()) << fixture;
    for (size_t p = 0; p < c->params().size(); ++p) {
      for (size_t s = 0; s < c->states().size(); ++s) {
        const std::string path =
            zero + "/" + c->params()[p].name + "/" + c->states()[s].name + ".pt";
        testing::LibTorchTensor t;
        std::string error;
        ASSERT_TRUE(testing::LoadWithLibTorch(path, &t, &error)) << path << ": " << error;
        ASSERT_EQ(t.dtype, "float32") << path;
        ASSERT_EQ(t.shape.size(), 1u) << path;
        EXPECT_EQ(t.requires_grad, s == 0) << path;  // fp32.pt keeps the flat's requires_grad
        const uint64_t numel = c->params()[p].numel;
        ASSERT_GE(static_cast<uint64_t>(t.shape[0]), numel) << path;
        std::vector<Extent> extents;
        ASSERT_TRUE(c->MapState(p, s, 0, numel * 4, &extents).ok());
        const std::string ours = testing::ReadExtents(*c, extents);
        EXPECT_EQ(t.bytes.substr(0, numel * 4), ours) << path;
        ++files;
      }
    }
  }
  EXPECT_EQ(files, 6u * 4 * 3 + 12 * 3);
}

}  // namespace
}  // namespace ucfs

#include "ucfs/base/fault_injecting_write_env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "test_support.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;
using Op = FaultInjectingWriteEnv::Op;

class FaultInjectingWriteEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_path_ = testing::FreshTestDir("fault_env_");
    dir_ = UniqueFd(::open(dir_path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(dir_);
  }
  UniqueFd Create(const std::string& name) {
    auto fd = env_.OpenAt(dir_.get(), name, O_RDWR | O_CREAT | O_TRUNC, 0600);
    EXPECT_TRUE(fd.ok()) << fd.status().ToString();
    return fd.ok() ? std::move(fd).value() : UniqueFd();
  }
  FaultInjectingWriteEnv env_;
  std::string dir_path_;
  UniqueFd dir_;
};

TEST_F(FaultInjectingWriteEnvTest, PassesEverythingOnUntilToldOtherwise) {
  UniqueFd fd = Create("a");
  ASSERT_TRUE(env_.WriteAll(fd.get(), "bytes", 0).ok());
  ASSERT_TRUE(env_.Sync(fd.get(), false).ok());
  ASSERT_TRUE(env_.RenameAt(dir_.get(), "a", dir_.get(), "b", 0).ok());
  EXPECT_EQ(testing::ReadFile(dir_path_ + "/b"), "bytes");
  EXPECT_EQ(env_.calls(Op::kOpen), 1u);
  EXPECT_EQ(env_.calls(Op::kWrite), 1u);
  EXPECT_EQ(env_.calls(Op::kRename), 1u);
  EXPECT_EQ(env_.failed(), 0u);
  EXPECT_EQ(env_.bytes_written(), 5u);
}

// A kind of call fails with the errno asked for, and is not made.
TEST_F(FaultInjectingWriteEnvTest, FailsAKindOfCall) {
  UniqueFd fd = Create("a");
  env_.Inject({.op = Op::kSync, .err = EIO});
  Status synced = env_.Sync(fd.get(), true);
  EXPECT_EQ(synced.posix_errno(), EIO);
  EXPECT_NE(synced.message().find("FailsAKindOfCall/a: Input/output error"), std::string::npos)
      << synced.message();
  env_.Inject({.op = Op::kRename, .err = EDQUOT});
  EXPECT_EQ(env_.RenameAt(dir_.get(), "a", dir_.get(), "b", 0).posix_errno(), EDQUOT);
  EXPECT_TRUE(fs::exists(dir_path_ + "/a"));
  EXPECT_FALSE(fs::exists(dir_path_ + "/b"));
  EXPECT_TRUE(env_.WriteAll(fd.get(), "x", 0).ok());  // other kinds go on
  EXPECT_EQ(env_.failed(), 2u);
  env_.Heal();
  EXPECT_TRUE(env_.Sync(fd.get(), false).ok());
}

// The k-th call (of a kind, or of any), a given number of times.
TEST_F(FaultInjectingWriteEnvTest, FailsTheKthCall) {
  env_.Inject({.op = Op::kMakeDir, .after = 2, .times = 1, .err = ENOSPC});
  EXPECT_TRUE(env_.MakeDirAt(dir_.get(), "d1", 0700).ok());
  EXPECT_TRUE(env_.MakeDirAt(dir_.get(), "d2", 0700).ok());
  EXPECT_EQ(env_.MakeDirAt(dir_.get(), "d3", 0700).posix_errno(), ENOSPC);
  EXPECT_TRUE(env_.MakeDirAt(dir_.get(), "d3", 0700).ok());
  env_.Heal();
  env_.Inject({.after = 1, .err = EIO});  // any kind: the second call on
  EXPECT_TRUE(env_.ChmodAt(dir_.get(), "d1", 0755).ok());
  EXPECT_EQ(env_.UnlinkAt(dir_.get(), "d1", AT_REMOVEDIR).posix_errno(), EIO);
  EXPECT_EQ(env_.SymlinkAt("x", dir_.get(), "l").posix_errno(), EIO);
  EXPECT_TRUE(fs::exists(dir_path_ + "/d1"));
  EXPECT_FALSE(fs::exists(dir_path_ + "/l"));
}

// Calls on matching paths only: names in a directory, files open on them,
// either end of a rename or link.
TEST_F(FaultInjectingWriteEnvTest, FailsCallsOnMatchingPaths) {
  UniqueFd kept = Create("kept");
  UniqueFd doomed = Create("doomed.tmp");
  env_.Inject({.path_contains = ".tmp", .err = ENOSPC});
  EXPECT_TRUE(env_.WriteAll(kept.get(), "k", 0).ok());
  EXPECT_EQ(env_.WriteAll(doomed.get(), "d", 0).posix_errno(), ENOSPC);
  EXPECT_EQ(env_.Truncate(doomed.get(), 0).posix_errno(), ENOSPC);
  EXPECT_EQ(env_.OpenAt(dir_.get(), "other.tmp", O_WRONLY | O_CREAT, 0600).status().posix_errno(),
            ENOSPC);
  EXPECT_EQ(env_.RenameAt(dir_.get(), "doomed.tmp", dir_.get(), "final", 0).posix_errno(), ENOSPC);
  EXPECT_EQ(env_.LinkAt(dir_.get(), "kept", dir_.get(), "kept.tmp", 0).posix_errno(), ENOSPC);
  EXPECT_TRUE(env_.LinkAt(dir_.get(), "kept", dir_.get(), "kept2", 0).ok());
  EXPECT_FALSE(fs::exists(dir_path_ + "/other.tmp"));
  EXPECT_FALSE(fs::exists(dir_path_ + "/final"));
}

// Short writes: WriteAll loops over them, and gets everything there.
TEST_F(FaultInjectingWriteEnvTest, ShortWritesAreLoopedOver) {
  UniqueFd fd = Create("a");
  env_.ShortWrites(3);
  auto once = env_.Write(fd.get(), "abcdefgh", 0);
  ASSERT_TRUE(once.ok());
  EXPECT_EQ(*once, 3u);
  ASSERT_TRUE(env_.WriteAll(fd.get(), "0123456789", 0).ok());
  EXPECT_EQ(testing::ReadFile(dir_path_ + "/a"), "0123456789");
  EXPECT_EQ(env_.calls(Op::kWrite), 5u);  // 1 + ceil(10 / 3)
}

// A disk that fills up: the write that reaches the end moves what fits,
// the next fails with ENOSPC; WriteAll reports it, the bytes before it
// written.
TEST_F(FaultInjectingWriteEnvTest, FillsUp) {
  UniqueFd fd = Create("a");
  env_.FillUpAfter(6);
  Status s = env_.WriteAll(fd.get(), "0123456789", 0);
  EXPECT_EQ(s.posix_errno(), ENOSPC);
  EXPECT_NE(s.message().find("No space left on device"), std::string::npos);
  EXPECT_EQ(testing::ReadFile(dir_path_ + "/a"), "012345");
  EXPECT_EQ(env_.bytes_written(), 6u);
  // So does a copy.
  UniqueFd to = Create("b");
  auto copied = env_.CopyRange(fd.get(), 0, to.get(), 0, 6);
  ASSERT_FALSE(copied.ok());
  EXPECT_EQ(copied.status().posix_errno(), ENOSPC);
  env_.Heal();
  copied = env_.CopyRange(fd.get(), 0, to.get(), 0, 6);
  ASSERT_TRUE(copied.ok()) << copied.status().ToString();
  EXPECT_EQ(*copied, 6u);
  EXPECT_EQ(testing::ReadFile(dir_path_ + "/b"), "012345");
}

}  // namespace
}  // namespace ucfs

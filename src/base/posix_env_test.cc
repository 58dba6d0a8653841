#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "test_support.h"
#include "ucfs/base/env.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

class ConfinedEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = testing::FreshTempDir(std::string("confined_") +
                                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
    root_ = base_ + "/ckpt";
    fs::create_directories(root_ + "/tag");
    testing::WriteFile(root_ + "/tag/shard.pt", "shard bytes");
    testing::WriteFile(base_ + "/secret", "the secret");
    auto env = NewConfinedPosixEnv(root_);
    ASSERT_TRUE(env.ok()) << env.status().ToString();
    env_ = std::move(env).value();
  }

  std::string base_, root_;
  std::unique_ptr<Env> env_;
};

TEST_F(ConfinedEnvTest, ReadsFilesBelowTheRoot) {
  auto file = env_->Open(root_ + "/tag/shard.pt");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(*(*file)->ReadString(0, 11), "shard bytes");
  auto st = env_->Stat(root_ + "/tag");
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->is_dir);
  EXPECT_TRUE(env_->IsDirectory(root_));
  auto listed = env_->ListDir(root_);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].name, "tag");
  EXPECT_TRUE((*listed)[0].is_dir);
}

TEST_F(ConfinedEnvTest, FollowsSymlinksThatStayInside) {
  fs::create_symlink("tag/shard.pt", root_ + "/inside");
  auto file = env_->Open(root_ + "/inside");
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_EQ(*(*file)->ReadString(0, 5), "shard");
}

TEST_F(ConfinedEnvTest, RefusesSymlinksLeadingOut) {
  fs::create_symlink("../secret", root_ + "/relative");
  fs::create_symlink(base_ + "/secret", root_ + "/absolute");
  fs::create_symlink("../..", root_ + "/tag/up");  // the checkpoint's parent
  for (const std::string& path :
       {root_ + "/relative", root_ + "/absolute", root_ + "/tag/up/secret"}) {
    auto file = env_->Open(path);
    ASSERT_FALSE(file.ok()) << path;
    EXPECT_EQ(file.status().posix_errno(), EACCES) << file.status().ToString();
    EXPECT_NE(file.status().message().find("out of the checkpoint root"), std::string::npos)
        << file.status().ToString();
    EXPECT_EQ(file.status().message().find("the secret"), std::string::npos);
    EXPECT_FALSE(env_->Stat(path).ok()) << path;
  }
  // A path outside the root is refused without being looked at.
  auto outside = env_->Open(base_ + "/secret");
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("outside the checkpoint root"), std::string::npos);
  EXPECT_FALSE(env_->Open(root_ + "/../secret").ok());
  EXPECT_FALSE(env_->ListDir(root_ + "/tag/up").ok());
}

TEST_F(ConfinedEnvTest, DanglingAndLoopingSymlinksAreErrors) {
  fs::create_symlink("nowhere", root_ + "/dangling");
  fs::create_symlink("loop_b", root_ + "/loop_a");
  fs::create_symlink("loop_a", root_ + "/loop_b");
  auto dangling = env_->Open(root_ + "/dangling");
  ASSERT_FALSE(dangling.ok());
  EXPECT_EQ(dangling.status().posix_errno(), ENOENT);
  auto loop = env_->Open(root_ + "/loop_a");
  ASSERT_FALSE(loop.ok());
  EXPECT_EQ(loop.status().posix_errno(), ELOOP);
  EXPECT_NE(loop.status().message().find("loop_a"), std::string::npos);
}

// Opening a FIFO with no writer would block forever; a device or socket is
// no checkpoint. Each is refused at once, by both Envs.
TEST_F(ConfinedEnvTest, NonRegularFilesAreRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo((root_ + "/fifo").c_str(), 0644), 0);
  const std::string sock_path = root_ + "/sock";
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock_path.c_str());
  ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  fs::create_symlink("/dev/null", root_ + "/devnull");  // absolute: refused anyway
  for (Env* env : {env_.get(), Env::Posix()}) {
    auto fifo = env->Open(root_ + "/fifo");
    ASSERT_FALSE(fifo.ok());
    EXPECT_NE(fifo.status().message().find("a FIFO, not a regular file"), std::string::npos)
        << fifo.status().ToString();
    auto s = env->Open(sock_path);
    ASSERT_FALSE(s.ok());
    auto dir = env->Open(root_ + "/tag");
    ASSERT_FALSE(dir.ok());
    EXPECT_NE(dir.status().message().find("a directory"), std::string::npos);
  }
  auto dev = Env::Posix()->Open("/dev/null");
  ASSERT_FALSE(dev.ok());
  EXPECT_NE(dev.status().message().find("a character device"), std::string::npos);
  ::close(sock);
}

// The identity an open file reports follows in-place edits (a new ctime
// even when size and mtime are put back) but not a replacement by rename,
// as fstat does.
TEST(FileIdentity, InPlaceEditsChangeItAndRestoringMtimeDoesNotHideThem) {
  const std::string dir = testing::FreshTempDir("identity");
  fs::create_directories(dir);
  const std::string path = dir + "/f";
  testing::WriteFile(path, "0123456789");
  auto file = Env::Posix()->Open(path);
  ASSERT_TRUE(file.ok());
  const FileStat before = *(*file)->Stat();
  EXPECT_EQ(before.identity, Env::Posix()->Stat(path)->identity);
  ::usleep(20000);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3);
    f.put('X');
  }
  const struct timespec times[2] = {{static_cast<time_t>(before.identity.mtime_ns / 1000000000),
                                     static_cast<long>(before.identity.mtime_ns % 1000000000)},
                                    {static_cast<time_t>(before.identity.mtime_ns / 1000000000),
                                     static_cast<long>(before.identity.mtime_ns % 1000000000)}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  const FileStat after = *(*file)->Stat();
  EXPECT_EQ(after.identity.size, before.identity.size);
  EXPECT_EQ(after.identity.mtime_ns, before.identity.mtime_ns);
  EXPECT_NE(after.identity.ctime_ns, before.identity.ctime_ns);
  EXPECT_FALSE(after.identity == before.identity);
}

}  // namespace
}  // namespace ucfs

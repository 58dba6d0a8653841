#include "ucfs/base/write_env.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "test_support.h"
#include "ucfs/base/env.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

class WriteEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_path_ = testing::FreshTestDir("write_env_");
    dir_ = UniqueFd(::open(dir_path_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    ASSERT_TRUE(dir_);
  }
  WriteEnv& w_ = *WriteEnv::Posix();
  std::string dir_path_;
  UniqueFd dir_;
};

// Each call is the system call it names, relative to the directory fd.
TEST_F(WriteEnvTest, MakesChangesAndRemovesEntriesRelativeToADirectory) {
  auto fd = w_.OpenAt(dir_.get(), "f.tmp", O_WRONLY | O_CREAT | O_EXCL, 0600);
  ASSERT_TRUE(fd.ok()) << fd.status().ToString();
  ASSERT_TRUE(w_.WriteAll(fd->get(), "hello, world", 0).ok());
  ASSERT_TRUE(w_.Write(fd->get(), "W", 7).ok());
  ASSERT_TRUE(w_.Sync(fd->get(), false).ok());
  ASSERT_TRUE(w_.Sync(fd->get(), true).ok());
  ASSERT_TRUE(w_.Allocate(fd->get(), FALLOC_FL_KEEP_SIZE, 0, 4096).ok());
  ASSERT_TRUE(w_.ChmodAt(fd->get(), "", 0640).ok());
  const timespec times[2] = {{5, 0}, {7, 0}};
  ASSERT_TRUE(w_.SetTimesAt(fd->get(), "", times, 0).ok());
  ASSERT_TRUE(w_.RenameAt(dir_.get(), "f.tmp", dir_.get(), "f", 0).ok());
  EXPECT_EQ(testing::ReadFile(dir_path_ + "/f"), "hello, World");
  struct stat st {};
  ASSERT_EQ(::stat((dir_path_ + "/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  EXPECT_EQ(st.st_mtim.tv_sec, 7);
  ASSERT_TRUE(w_.Truncate(fd->get(), 5).ok());
  EXPECT_EQ(testing::ReadFile(dir_path_ + "/f"), "hello");

  ASSERT_TRUE(w_.MakeDirAt(dir_.get(), "d", 0700).ok());
  ASSERT_TRUE(w_.ChmodAt(dir_.get(), "d", 0751).ok());
  ASSERT_TRUE(w_.SymlinkAt("f", dir_.get(), "l").ok());
  ASSERT_TRUE(w_.SetTimesAt(dir_.get(), "l", times, AT_SYMLINK_NOFOLLOW).ok());
  ASSERT_TRUE(w_.LinkAt(dir_.get(), "f", dir_.get(), "d/g", 0).ok());
  ASSERT_TRUE(w_.MakeNodeAt(dir_.get(), "fifo", S_IFIFO | 0600, 0).ok());
  EXPECT_EQ(testing::ReadFile(dir_path_ + "/d/g"), "hello");
  EXPECT_EQ(fs::status(dir_path_ + "/d").permissions(), static_cast<fs::perms>(0751));
  EXPECT_TRUE(fs::is_symlink(dir_path_ + "/l"));
  EXPECT_TRUE(fs::is_fifo(dir_path_ + "/fifo"));
  // RENAME_NOREPLACE and RENAME_EXCHANGE as renameat2(2) has them.
  Status noreplace = w_.RenameAt(dir_.get(), "l", dir_.get(), "f", RENAME_NOREPLACE);
  EXPECT_EQ(noreplace.posix_errno(), EEXIST);
  ASSERT_TRUE(w_.RenameAt(dir_.get(), "l", dir_.get(), "fifo", RENAME_EXCHANGE).ok());
  EXPECT_TRUE(fs::is_symlink(dir_path_ + "/fifo"));
  ASSERT_TRUE(w_.UnlinkAt(dir_.get(), "d/g", 0).ok());
  ASSERT_TRUE(w_.UnlinkAt(dir_.get(), "d", AT_REMOVEDIR).ok());
  EXPECT_FALSE(fs::exists(dir_path_ + "/d"));
}

// A failure says what failed, with the errno, for the caller to put its
// file in front of.
TEST_F(WriteEnvTest, FailuresCarryTheirErrnoAndWhatFailed) {
  auto missing = w_.OpenAt(dir_.get(), "no/such", O_WRONLY | O_CREAT, 0600);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().posix_errno(), ENOENT);
  EXPECT_EQ(missing.status().message(), "open no/such: No such file or directory");
  Status rename = w_.RenameAt(dir_.get(), "a", dir_.get(), "b", 0);
  EXPECT_EQ(rename.posix_errno(), ENOENT);
  EXPECT_EQ(rename.WithFile("ckpt/a").message(),
            "ckpt/a: rename a to b: No such file or directory");
  auto ro = w_.OpenAt(dir_.get(), "r", O_RDONLY | O_CREAT, 0600);
  ASSERT_TRUE(ro.ok());
  auto written = w_.Write(ro->get(), "x", 0);
  ASSERT_FALSE(written.ok());
  EXPECT_EQ(written.status().posix_errno(), EBADF);
  EXPECT_EQ(written.status().message(), "write of 1 bytes at offset 0: Bad file descriptor");
  EXPECT_EQ(w_.UnlinkAt(dir_.get(), "r", AT_REMOVEDIR).posix_errno(), ENOTDIR);
}

// The Env hands out the writer that writes where it reads; MakeDir goes
// through it.
TEST_F(WriteEnvTest, TheEnvHandsItOut) {
  EXPECT_EQ(Env::Posix()->Writer(), WriteEnv::Posix());
  MemEnv mem;
  EXPECT_EQ(mem.Writer(), WriteEnv::Posix());
  auto made = Env::Posix()->MakeDir(dir_path_ + "/made", 0705, int64_t{9} * 1000000000);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_TRUE(*made);
  struct stat st {};
  ASSERT_EQ(::stat((dir_path_ + "/made").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0705u);
  EXPECT_EQ(st.st_mtim.tv_sec, 9);
  EXPECT_FALSE(*Env::Posix()->MakeDir(dir_path_ + "/made", 0700, 0));
}

}  // namespace
}  // namespace ucfs

#include "ucfs/vfs/source_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "test_support.h"
#include "ucfs/base/counting_env.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

std::vector<ReadPiece> SourcePiece(uint32_t source, uint64_t offset, uint64_t length) {
  ReadPiece p;
  p.kind = ReadPiece::Kind::kSource;
  p.source = source;
  p.offset = offset;
  p.length = length;
  return {p};
}

class SourceFilesTest : public ::testing::Test {
 protected:
  SourceFile Recorded(const std::string& path) {
    auto st = env_.Stat(path);
    EXPECT_TRUE(st.ok());
    return SourceFile{path, st->identity, st->access};
  }
  MemEnv env_;
};

TEST_F(SourceFilesTest, ReadsPiecesOfUnchangedFiles) {
  env_.WriteFile("/c/a", "0123456789");
  const std::vector<SourceFile> sources = {Recorded("/c/a")};
  SourceFiles files(env_, [&](uint32_t i) { return sources[i]; });
  std::string out;
  ASSERT_TRUE(files.Read(SourcePiece(0, 2, 5), &out).ok());
  EXPECT_EQ(out, "23456");
}

// A read of many pieces of few sources checks each source once: on a
// shared file system an fstat may be a round trip.
TEST_F(SourceFilesTest, EachSourceIsCheckedOncePerRead) {
  env_.WriteFile("/c/a", "0123456789");
  env_.WriteFile("/c/b", "abcdefghij");
  const std::vector<SourceFile> sources = {Recorded("/c/a"), Recorded("/c/b")};
  CountingEnv counting(EnvWrapper::NotOwned(&env_));
  SourceFiles files(counting, [&](uint32_t i) { return sources[i]; });
  std::vector<ReadPiece> pieces;
  for (uint64_t at = 0; at < 10; ++at) {
    for (uint32_t source : {0u, 1u}) pieces.push_back(SourcePiece(source, at, 1).front());
  }
  std::string out;
  ASSERT_TRUE(files.Read(pieces, &out).ok());
  EXPECT_EQ(out, "0a1b2c3d4e5f6g7h8i9j");
  EXPECT_EQ(counting.counts().opens, 2u);
  const uint64_t fstats_first = counting.counts().fstats;  // the opens' own, where kept
  out.clear();
  ASSERT_TRUE(files.Read(pieces, &out).ok());
  EXPECT_EQ(counting.counts().opens, 2u);
  EXPECT_EQ(counting.counts().fstats, fstats_first + 2);  // once per source, not per piece
}

// Edited in place after it was opened: the open file's identity moved on.
TEST_F(SourceFilesTest, AFileEditedInPlaceIsAnErrorNotOtherBytes) {
  env_.WriteFile("/c/a", "0123456789");
  const std::vector<SourceFile> sources = {Recorded("/c/a")};
  SourceFiles files(env_, [&](uint32_t i) { return sources[i]; });
  std::string out;
  ASSERT_TRUE(files.Read(SourcePiece(0, 0, 4), &out).ok());
  env_.TouchCtime("/c/a");
  out.clear();
  Status s = files.Read(SourcePiece(0, 0, 4), &out);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.posix_errno(), EIO);
  EXPECT_NE(s.message().find("/c/a: changed since the checkpoint was read (modified in place)"),
            std::string::npos)
      << s.ToString();
  EXPECT_TRUE(out.empty());
}

// Replaced before it was first opened, by a file of the same size.
TEST_F(SourceFilesTest, AFileReplacedBeforeItsFirstReadIsAnError) {
  env_.WriteFile("/c/a", "0123456789");
  const std::vector<SourceFile> sources = {Recorded("/c/a")};
  env_.RemoveFile("/c/a");
  env_.WriteFile("/c/a", "9876543210");
  SourceFiles files(env_, [&](uint32_t i) { return sources[i]; });
  std::string out;
  Status s = files.Read(SourcePiece(0, 0, 4), &out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("(replaced)"), std::string::npos) << s.ToString();
  EXPECT_EQ(files.Get(0).status().posix_errno(), EIO);
}

// A real file `dir`/a, as recorded when it was made.
SourceFile MadeAndRecorded(const std::string& dir) {
  fs::create_directories(dir);
  testing::WriteFile(dir + "/a", "0123456789");
  auto st = Env::Posix()->Stat(dir + "/a");
  EXPECT_TRUE(st.ok());
  return SourceFile{dir + "/a", st.ok() ? st->identity : FileIdentity{},
                    st.ok() ? st->access : FileAccess{}};
}

// `dir`/a replaced by a rename of a file of the same size and mtime.
void ReplaceKeepingSizeAndMtime(const std::string& dir) {
  testing::WriteFile(dir + "/b", "XXXXXXXXXX");
  fs::last_write_time(dir + "/b", fs::last_write_time(dir + "/a"));
  ASSERT_EQ(std::rename((dir + "/b").c_str(), (dir + "/a").c_str()), 0);
}

// On a real file system: replaced by a rename that kept size and mtime,
// which a size-and-mtime check would have served.
TEST(SourceFilesPosix, ARenameKeepingSizeAndMtimeIsCaught) {
  const std::string dir = testing::FreshTempDir("source_files");
  const SourceFile recorded = MadeAndRecorded(dir);
  ReplaceKeepingSizeAndMtime(dir);
  SourceFiles files(*Env::Posix(), [&](uint32_t) { return recorded; });
  auto got = files.Get(0);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().posix_errno(), EIO);
}

// Recorded by a shared index, which keeps no device (each node of a
// parallel file system sees its own st_dev): the same file is served on
// whatever device it is seen, and a replaced one still caught.
TEST(SourceFilesPosix, AnIdentityWithoutADeviceMatchesOnAnyDevice) {
  const std::string dir = testing::FreshTempDir("source_files_device");
  SourceFile recorded = MadeAndRecorded(dir);
  const uint64_t device = recorded.identity.device;
  ASSERT_NE(device, 0u);
  recorded.identity.device = 0;
  {
    SourceFiles files(*Env::Posix(), [&](uint32_t) { return recorded; });
    EXPECT_TRUE(files.Get(0).ok());
  }
  recorded.identity.device = device + 1;  // another file system's
  {
    SourceFiles files(*Env::Posix(), [&](uint32_t) { return recorded; });
    EXPECT_FALSE(files.Get(0).ok());
  }
  recorded.identity.device = 0;
  ReplaceKeepingSizeAndMtime(dir);
  SourceFiles files(*Env::Posix(), [&](uint32_t) { return recorded; });
  auto got = files.Get(0);
  ASSERT_FALSE(got.ok());
  EXPECT_NE(got.status().message().find("replaced"), std::string::npos) << got.status().ToString();
}

}  // namespace
}  // namespace ucfs

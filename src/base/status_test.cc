#include "ucfs/base/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace ucfs {
namespace {

TEST(Status, WithFileKeepsTheFileApartFromWhatIsWrong) {
  const Status s = Status::Corruption("truncated: wanted 8 bytes").WithFile("/c/rank_1.pt");
  EXPECT_EQ(s.message(), "/c/rank_1.pt: truncated: wanted 8 bytes");
  EXPECT_EQ(s.file(), "/c/rank_1.pt");
  EXPECT_EQ(s.what(), "truncated: wanted 8 bytes");
  EXPECT_EQ(s.code(), Status::Code::kCorruption);
}

// A message that already names its file is not named twice.
TEST(Status, WithFileOnAMessageThatNamesTheFile) {
  const Status s = Status::FromErrno("/c/rank_1.pt", ENOENT).WithFile("/c/rank_1.pt");
  EXPECT_EQ(s.message(), "/c/rank_1.pt: No such file or directory");
  EXPECT_EQ(s.what(), "No such file or directory");
  EXPECT_EQ(s.posix_errno(), ENOENT);
  // A file name that is only a prefix of the named one is not taken for it.
  const Status other = Status::Corruption("/c/rank_10.pt: bad").WithFile("/c/rank_1");
  EXPECT_EQ(other.message(), "/c/rank_1: /c/rank_10.pt: bad");
}

// The innermost file is the one at fault: an outer caller's file does not
// replace it, and context added on the way up keeps it.
TEST(Status, TheInnermostFileStays) {
  const Status inner = Status::Corruption("bad zip").WithFile("/c/a.pt");
  const Status outer = inner.Annotate("loading the model").WithFile("/c/b.pt");
  EXPECT_EQ(outer.file(), "/c/a.pt");
  EXPECT_EQ(outer.message(), "loading the model: /c/a.pt: bad zip");
  EXPECT_TRUE(Status::OK().WithFile("/c/a.pt").ok());
  EXPECT_EQ(Status::OK().WithFile("/c/a.pt").file(), "");
  EXPECT_EQ(Status::Corruption("x").file(), "");
  EXPECT_EQ(Status::Corruption("x").what(), "x");
}

TEST(Status, MessageAboutAFile) {
  const Status s = Status::Corruption("bad zip").WithFile("/c/a.pt");
  EXPECT_EQ(s.MessageAbout("/c/a.pt"), "bad zip");
  EXPECT_EQ(s.MessageAbout("/c/b.pt"), "/c/a.pt: bad zip");
  EXPECT_EQ(Status::Corruption("/c/b.pt: short").MessageAbout("/c/b.pt"), "short");
  EXPECT_EQ(Status::Corruption("no file").MessageAbout("/c/b.pt"), "no file");
}

}  // namespace
}  // namespace ucfs

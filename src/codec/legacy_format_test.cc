#include "ucfs/codec/legacy_format.h"

#include <gtest/gtest.h>

#include <cstring>

#include "test_support.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"

namespace ucfs {
namespace {

using testing::ReadFile;
using testing::TestDataDir;

// torch.save(torch.arange(5.), f, _use_new_zipfile_serialization=False),
// written by torch 1.13.
std::string LegacyArange() { return ReadFile(TestDataDir() + "/zip/legacy_format.pt"); }

Result<LegacyArchive> ReadBytes(const std::string& bytes) {
  MemEnv env;
  env.WriteFile("/legacy.pt", bytes);
  auto file = env.Open("/legacy.pt");
  if (!file.ok()) return file.status();
  return ReadLegacyArchive(**file);
}

TEST(LegacyFormat, TorchsOwnFileMapsToOneStorageRecord) {
  const std::string bytes = LegacyArange();
  auto archive = ReadBytes(bytes);
  ASSERT_TRUE(archive.ok()) << archive.status().ToString();
  ASSERT_EQ(archive->records.size(), 1u);
  const ZipRecord& rec = archive->records[0];
  EXPECT_EQ(rec.size, 5u * 4);
  EXPECT_EQ(rec.data_offset + rec.size, bytes.size());  // the storage ends the file
  for (int i = 0; i < 5; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + rec.data_offset + 4 * i, 4);
    EXPECT_EQ(v, static_cast<float>(i));
  }
  auto doc = pickle::Parse(archive->pickle);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  auto t = MatchTensor(*doc, doc->root());
  ASSERT_TRUE(t.ok() && t->has_value()) << t.status().ToString();
  EXPECT_EQ((*t)->shape, std::vector<int64_t>{5});
  EXPECT_EQ(rec.name, std::string(kLegacyPrefix) + "/data/" + (*t)->storage_key);
}

TEST(LegacyFormat, SummaryReadsLegacyFilesLikeZipFiles) {
  MemEnv env;
  env.WriteFile("/legacy.pt", LegacyArange());
  auto summary = SummarizeTorchFile(env, "/legacy.pt");
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_TRUE(summary->legacy);
  ASSERT_EQ(summary->records.size(), 1u);
  auto decoded = DecodeSummary(EncodeSummary(*summary));
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_TRUE(decoded->legacy);
  EXPECT_EQ(decoded->records[0].data_offset, summary->records[0].data_offset);
}

TEST(LegacyFormat, EveryTruncationIsAnErrorNamingTheFile) {
  const std::string bytes = LegacyArange();
  for (size_t n = 2; n < bytes.size(); ++n) {
    auto archive = ReadBytes(bytes.substr(0, n));
    ASSERT_FALSE(archive.ok()) << n;
    EXPECT_NE(archive.status().message().find("/legacy.pt"), std::string::npos)
        << archive.status().ToString();
  }
}

TEST(LegacyFormat, TrailingBytesAndWrongCountsAreErrors) {
  const std::string bytes = LegacyArange();
  auto trailing = ReadBytes(bytes + "x");
  ASSERT_FALSE(trailing.ok());
  EXPECT_NE(trailing.status().message().find("1 bytes after the last storage"), std::string::npos)
      << trailing.status().ToString();

  auto archive = ReadBytes(bytes);
  ASSERT_TRUE(archive.ok());
  std::string wrong = bytes;
  wrong[archive->records[0].data_offset - 8] = 6;  // the count says 6 elements
  auto counted = ReadBytes(wrong);
  ASSERT_FALSE(counted.ok());
  EXPECT_NE(counted.status().message().find("holds 6 elements, the pickle says 5"),
            std::string::npos)
      << counted.status().ToString();
}

TEST(LegacyFormat, OtherPicklesAreNotTorchFiles) {
  // A protocol-2 pickle of the int 7: not torch's magic number.
  auto archive = ReadBytes(std::string("\x80\x02K\x07.", 5));
  ASSERT_FALSE(archive.ok());
  EXPECT_NE(archive.status().message().find("not torch's magic number"), std::string::npos)
      << archive.status().ToString();
}

}  // namespace
}  // namespace ucfs

#include "ucfs/tools/export.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>

#include "test_support.h"
#include "ucfs/base/fault_injecting_write_env.h"
#include "ucfs/views/consolidated_view.h"
#include "ucfs/views/reshard_view.h"
#include "ucfs/views/torch_pickle_builder.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;
using testing::FixtureDir;

std::shared_ptr<const Checkpoint> Open(const std::string& path) {
  auto c = Checkpoint::Open(*Env::Posix(), path);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::make_shared<const Checkpoint>(std::move(c).value());
}

std::string ViewBytes(View& view, InodeId file) {
  std::vector<ReadPiece> pieces;
  EXPECT_TRUE(view.Plan(file, 0, view.GetAttr(file)->size, &pieces).ok());
  SourceFiles reader(*Env::Posix(), [&](uint32_t i) { return view.source(i); });
  std::string bytes;
  EXPECT_TRUE(reader.Read(pieces, &bytes).ok());
  return bytes;
}

// Every exported file holds exactly the bytes the view shows.
void ExpectSameAsView(View& view, const std::vector<ExportFile>& files, const std::string& out) {
  for (const ExportFile& f : files) {
    EXPECT_EQ(testing::ReadFile(out + "/" + f.path), ViewBytes(view, f.inode)) << f.path;
  }
}

std::vector<std::string> Temporaries(const std::string& dir) {
  std::vector<std::string> found;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().ends_with(".ucfs-export")) found.push_back(e.path());
  }
  return found;
}

class ExportTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExportTest, WritesWhatTheViewShows) {
  auto c = Open(FixtureDir(GetParam()) + "/checkpoint");
  const std::string& tag = c->files().tag;
  struct Case {
    std::string name;
    std::unique_ptr<View> view;
    std::vector<std::string> roots;
  };
  std::vector<Case> cases;
  cases.push_back({"universal",
                   std::move(BuildUniversalView(*Env::Posix(), c, {})).value(),
                   {"latest_universal", UniversalTag(tag)}});
  cases.push_back({"reshard3",
                   std::move(BuildReshardView(*Env::Posix(), c, {3, std::nullopt})).value(),
                   {"latest", tag}});
  cases.push_back({"fp32",
                   std::move(BuildUniversalView(*Env::Posix(), c, {})).value(),
                   {ConsolidatedDirName(tag)}});
  for (Case& k : cases) {
    SCOPED_TRACE(k.name);
    const std::string out = testing::FreshTempDir("export_" + GetParam() + "_" + k.name);
    auto files = ListExport(*k.view, k.roots);
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    ASSERT_FALSE(files->empty());
    uint64_t reported = 0;
    ExportOptions options;
    options.threads = 3;
    std::mutex mu;
    options.on_bytes = [&](uint64_t n) {
      std::lock_guard lock(mu);
      reported += n;
    };
    auto stats = Export(*k.view, out, *files, options);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    EXPECT_EQ(stats->files_written, files->size());
    uint64_t total = 0;
    for (const ExportFile& f : *files) total += f.size;
    EXPECT_EQ(reported, total);
    ExpectSameAsView(*k.view, *files, out);
    EXPECT_TRUE(Temporaries(out).empty());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExportTest, ::testing::ValuesIn(testing::FixtureNames()));
// The same export of each view of the ZeRO-1/2 checkpoints.
INSTANTIATE_TEST_SUITE_P(FlatGroupFixtures, ExportTest,
                         ::testing::ValuesIn(testing::FlatGroupFixtureNames()));

// A second run redoes only what is missing or stale.
TEST(Export, ResumesWhereItStopped) {
  auto c = Open(FixtureDir("z3_tricky_fp32_ws4") + "/checkpoint");
  auto view = std::move(BuildUniversalView(*Env::Posix(), c, {})).value();
  auto files = ListExport(*view, {"latest_universal", UniversalTag(c->files().tag)});
  ASSERT_TRUE(files.ok());
  const std::string out = testing::FreshTempDir("export_resume");
  ASSERT_TRUE(Export(*view, out, *files).ok());
  // One file lost, one cut short (a crash between write and rename cannot
  // do that, but a user can), one temporary left by a crash.
  const std::string lost = out + "/" + (*files)[3].path;
  const std::string cut = out + "/" + (*files)[5].path;
  fs::remove(lost);
  fs::resize_file(cut, 10);
  const fs::path lost_path(lost);
  testing::WriteFile(
      lost_path.parent_path() / ("." + lost_path.filename().string() + ".ucfs-export"), "half");
  auto again = Export(*view, out, *files);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->files_written, 2u);
  EXPECT_EQ(again->files_skipped, files->size() - 2);
  ExpectSameAsView(*view, *files, out);
  EXPECT_TRUE(Temporaries(out).empty());
}

// A shard that changes under an export fails it, naming the file, and
// leaves no temporaries; the source is only ever read.
TEST(Export, FailsCleanlyWhenASourceChanges) {
  const std::string src = testing::FreshTempDir("export_src");
  fs::copy(FixtureDir("z3_fp32_ws2") + "/checkpoint", src, fs::copy_options::recursive);
  auto c = Open(src);
  auto view = std::move(BuildReshardView(*Env::Posix(), c, {2, std::nullopt})).value();
  auto files = ListExport(*view, {"latest", c->files().tag});
  ASSERT_TRUE(files.ok());
  const std::string shard = c->sources()[1].path;
  const std::string bytes = testing::ReadFile(shard);
  testing::WriteFile(shard, bytes + "x");  // size and mtime change
  const std::string out = testing::FreshTempDir("export_changed");
  auto stats = Export(*view, out, *files);
  ASSERT_FALSE(stats.ok());
  EXPECT_NE(stats.status().message().find(shard), std::string::npos) << stats.status().ToString();
  EXPECT_TRUE(Temporaries(out).empty());
}

// A full disk, an I/O error or short writes under an export that redoes
// what an earlier run left (a file lost, one cut short): the error names the
// file and what failed, with its errno; every file under its final name is
// as it was or whole, no temporary is left, the source is only read; and
// once the disk is mended the same export finishes the job.
TEST(Export, FailsCleanlyWhenTheDiskDoes) {
  using Op = FaultInjectingWriteEnv::Op;
  const std::string src = testing::FreshTempDir("export_faults_src");
  fs::copy(FixtureDir("z3_fp32_ws2") + "/checkpoint", src, fs::copy_options::recursive);
  const auto source_before = testing::FilesBelow(src);
  auto c = Open(src);
  auto view = std::move(BuildReshardView(*Env::Posix(), c, {2, std::nullopt})).value();
  auto files = ListExport(*view, {"latest", c->files().tag});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  // The two largest files are the ones to redo.
  std::vector<const ExportFile*> by_size;
  for (const ExportFile& f : *files) by_size.push_back(&f);
  std::sort(by_size.begin(), by_size.end(),
            [](const ExportFile* a, const ExportFile* b) { return a->size > b->size; });
  const ExportFile& lost = *by_size[0];
  const ExportFile& cut = *by_size[1];
  ASSERT_GT(cut.size, 1000u);
  struct Failure {
    std::string name;
    std::function<void(FaultInjectingWriteEnv&)> arm;
    int err;  // 0: it does not fail, only writes short
  };
  const std::vector<Failure> failures = {
      {"disk fills up", [&](auto& f) { f.FillUpAfter(lost.size / 2); }, ENOSPC},
      {"quota", [&](auto& f) { f.FillUpAfter(cut.size / 3, EDQUOT); }, EDQUOT},
      {"EIO copying", [](auto& f) { f.Inject({.op = Op::kCopy, .after = 1}); }, EIO},
      {"EIO writing", [](auto& f) { f.Inject({.op = Op::kWrite}); }, EIO},
      {"EIO on fsync", [](auto& f) { f.Inject({.op = Op::kSync}); }, EIO},
      {"ENOSPC on rename", [](auto& f) { f.Inject({.op = Op::kRename, .err = ENOSPC}); }, ENOSPC},
      {"ENOSPC sizing the temporary",
       [](auto& f) { f.Inject({.op = Op::kTruncate, .err = ENOSPC}); }, ENOSPC},
      {"EDQUOT making the temporary",
       [](auto& f) { f.Inject({.op = Op::kOpen, .after = 1, .err = EDQUOT}); }, EDQUOT},
      {"short writes", [](auto& f) { f.ShortWrites(1000); }, 0},
  };
  for (size_t i = 0; i < failures.size(); ++i) {
    const Failure& failure = failures[i];
    SCOPED_TRACE(failure.name);
    const std::string out = testing::FreshTempDir("export_faults_" + std::to_string(i));
    ASSERT_TRUE(Export(*view, out, *files).ok());
    fs::remove(out + "/" + lost.path);
    fs::resize_file(out + "/" + cut.path, 10);
    const auto before = testing::FilesBelow(out);
    FaultInjectingWriteEnv faults;
    failure.arm(faults);
    ExportOptions options;
    options.threads = 3;
    options.writer = &faults;
    auto stats = Export(*view, out, *files, options);
    if (failure.err == 0) {
      ASSERT_TRUE(stats.ok()) << stats.status().ToString();
      EXPECT_EQ(stats->files_written, 2u);
      EXPECT_GT(faults.calls(Op::kWrite) + faults.calls(Op::kCopy), 20u);
      ExpectSameAsView(*view, *files, out);
      continue;
    }
    ASSERT_FALSE(stats.ok());
    const Status& s = stats.status();
    EXPECT_EQ(s.posix_errno(), failure.err) << s.ToString();
    EXPECT_NE(s.message().find(out + "/"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(std::strerror(failure.err)), std::string::npos) << s.ToString();
    EXPECT_TRUE(Temporaries(out).empty());
    // Each file is as the earlier run left it, or whole.
    const auto after = testing::FilesBelow(out);
    for (const auto& [path, state] : before) EXPECT_TRUE(after.count(path)) << path;
    for (const ExportFile& f : *files) {
      auto now = after.find(f.path);
      if (now == after.end()) continue;
      auto was = before.find(f.path);
      if (was == before.end() || !(now->second == was->second)) {
        EXPECT_EQ(now->second.bytes, ViewBytes(*view, f.inode)) << f.path;
      }
    }
    ASSERT_TRUE(Export(*view, out, *files).ok());
    ExpectSameAsView(*view, *files, out);
  }
  EXPECT_EQ(testing::FilesBelow(src), source_before);
}

// A source's symbolic link is exported as a link (Lightning's last.ckpt
// naming a checkpoint beside it: the checkpoint once, not twice).
TEST(Export, WritesLinksAsLinks) {
  const std::string base = testing::FreshTempDir("export_links");
  const std::string src = base + "/run";
  fs::create_directories(src + "/epoch=0-step=4.ckpt");
  testing::WriteFile(src + "/epoch=0-step=4.ckpt/latest", "checkpoint");
  fs::create_symlink("epoch=0-step=4.ckpt", src + "/last.ckpt");
  View view(*Env::Posix(), 0);
  view.BackRootBy(src);
  auto files = ListExport(view, {"epoch=0-step=4.ckpt", "last.ckpt"});
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  ASSERT_EQ(files->size(), 2u);
  EXPECT_EQ((*files)[1].link, "epoch=0-step=4.ckpt");
  const std::string out = base + "/out";
  auto stats = Export(view, out, *files);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->files_written, 2u);
  EXPECT_TRUE(fs::is_symlink(out + "/last.ckpt"));
  EXPECT_EQ(fs::read_symlink(out + "/last.ckpt"), "epoch=0-step=4.ckpt");
  EXPECT_EQ(testing::ReadFile(out + "/last.ckpt/latest"), "checkpoint");
  // Again: the link is there already.
  stats = Export(view, out, *files);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->files_skipped, 2u);
}

}  // namespace
}  // namespace ucfs

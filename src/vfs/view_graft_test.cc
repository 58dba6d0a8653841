#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "test_support.h"
#include "ucfs/vfs/source_files.h"
#include "ucfs/vfs/view.h"

namespace ucfs {
namespace {

constexpr auto Names = testing::EntryNames;

// A view of its own, as a graft's builder makes one: `dir/` holding a
// passed-through source file and a built one, `dir/sub/` below it.
struct Grafted {
  std::shared_ptr<View> view;
  InodeId dir = 0;
};

Grafted MakeGrafted(MemEnv& env) {
  Grafted g;
  g.view = std::make_shared<View>(env, 7);
  g.dir = *g.view->AddDirectory(kRootInode, "dir");
  EXPECT_TRUE(g.view->AddSourceFile(g.dir, "weights.pt", "/run/tag/weights.pt").ok());
  EXPECT_TRUE(g.view->AddFile(g.dir, "built", std::make_shared<InlineContent>("built!")).ok());
  const InodeId sub = *g.view->AddDirectory(g.dir, "sub");
  EXPECT_TRUE(g.view->AddSourceFile(sub, "deep.pt", "/run/tag/deep.pt").ok());
  return g;
}

std::string ReadAll(View& view, InodeId file) {
  std::vector<ReadPiece> pieces;
  EXPECT_TRUE(view.Plan(file, 0, 1 << 20, &pieces).ok());
  SourceFiles reader(view);
  std::string out;
  EXPECT_TRUE(reader.Read(pieces, &out).ok());
  return out;
}

class GraftTest : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.WriteFile("/run/own.txt", "the host's own file");
    env_.WriteFile("/run/tag/weights.pt", "0123456789");
    env_.WriteFile("/run/tag/deep.pt", "deep bytes");
  }
  MemEnv env_;
};

// The parent lists and stats the graft without building it; the first
// lookup into it builds it, once, and its entries are the grafted view's.
TEST_F(GraftTest, IsBuiltOnFirstLookupIntoItNotOnStat) {
  View host(env_, 1);
  ASSERT_TRUE(host.AddSourceFile(kRootInode, "own.txt", "/run/own.txt").ok());
  int builds = 0;
  auto graft = host.AddGraft(
      kRootInode, "tag_universal",
      [&]() -> Result<View::GraftTarget> {
        ++builds;
        Grafted g = MakeGrafted(env_);
        return View::GraftTarget{g.view, g.dir};
      },
      /*mtime_ns=*/42, FileAccess{0750, 10, 20});
  ASSERT_TRUE(graft.ok());
  EXPECT_EQ(Names(host, kRootInode), (std::vector<std::string>{"own.txt", "tag_universal"}));
  auto attr = host.GetAttr(*graft);
  ASSERT_TRUE(attr.ok());
  EXPECT_TRUE(attr->is_dir);
  EXPECT_EQ(attr->mtime_ns, 42);
  EXPECT_EQ(attr->mode, 0750u);
  EXPECT_EQ(attr->uid, 10u);
  EXPECT_EQ(builds, 0);

  EXPECT_EQ(Names(host, *graft), (std::vector<std::string>{"built", "sub", "weights.pt"}));
  EXPECT_EQ(builds, 1);
  auto weights = host.Lookup(*graft, "weights.pt");
  ASSERT_TRUE(weights.ok());
  EXPECT_EQ(builds, 1);
  // The graft's own attributes stay what they were.
  EXPECT_EQ(host.GetAttr(*graft)->mtime_ns, 42);
  EXPECT_EQ(host.GetAttr(*graft)->mode, 0750u);

  // Inodes: the same entry is the same inode however it is reached, and
  // none is one of the host's.
  auto listed = host.ReadDir(*graft);
  ASSERT_TRUE(listed.ok());
  for (const auto& [name, a] : *listed) {
    EXPECT_NE(a.inode, kRootInode) << name;
    EXPECT_EQ(*host.Lookup(*graft, name), a.inode) << name;
    EXPECT_EQ(host.GetAttr(a.inode)->inode, a.inode) << name;
  }
  auto sub = host.Lookup(*graft, "sub");
  ASSERT_TRUE(sub.ok());
  EXPECT_TRUE(host.GetAttr(*sub)->is_dir);
  auto deep = host.Lookup(*sub, "deep.pt");
  ASSERT_TRUE(deep.ok());
  EXPECT_EQ(host.GetAttr(*deep)->size, 10u);
  EXPECT_EQ(builds, 1);
}

// A grafted file's bytes are its source's; its pieces name sources of the
// host, which SourceFiles, the FUSE server and export read.
// A graft's time may be known only by asking (a stat of every rank file
// of another tag): asked when an attribute first shows it, once, and not
// when the graft is added or its directory listed by name.
TEST_F(GraftTest, ALazyTimeIsAskedWhenFirstShownAndOnce) {
  View host(env_, 7);
  int asked = 0;
  auto later = std::make_shared<const View::LazyTime>([&asked] {
    ++asked;
    return int64_t{1234};
  });
  auto graft = host.AddGraft(
      kRootInode, "tag_universal",
      []() -> Result<View::GraftTarget> { return Status::IOError("never built here"); },
      /*mtime_ns=*/0, FileAccess{0750, 10, 20}, later);
  ASSERT_TRUE(graft.ok());
  EXPECT_TRUE(host.Lookup(kRootInode, "tag_universal").ok());
  EXPECT_EQ(asked, 0);
  EXPECT_EQ(host.GetAttr(*graft)->mtime_ns, 1234);
  auto listed = host.ReadDir(kRootInode);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ((*listed)[0].second.mtime_ns, 1234);
  EXPECT_EQ(asked, 1);
}

TEST_F(GraftTest, PiecesNameTheHostsSources) {
  View host(env_, 1);
  const InodeId own = *host.AddSourceFile(kRootInode, "own.txt", "/run/own.txt");
  auto graft = host.AddGraft(
      kRootInode, "g",
      [&]() -> Result<View::GraftTarget> {
        Grafted g = MakeGrafted(env_);
        return View::GraftTarget{g.view, g.dir};
      },
      0, FileAccess{0755, 0, 0});
  ASSERT_TRUE(graft.ok());
  const InodeId weights = *host.Lookup(*graft, "weights.pt");
  const InodeId deep = *host.Lookup(*host.Lookup(*graft, "sub"), "deep.pt");
  const InodeId built = *host.Lookup(*graft, "built");

  std::vector<ReadPiece> pieces;
  ASSERT_TRUE(host.Plan(deep, 2, 100, &pieces).ok());
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].kind, ReadPiece::Kind::kSource);
  EXPECT_EQ(pieces[0].offset, 2u);
  EXPECT_EQ(pieces[0].length, 8u);
  EXPECT_NE(pieces[0].source, 0u);  // source 0 is the host's own.txt
  EXPECT_EQ(host.source(pieces[0].source).path, "/run/tag/deep.pt");
  EXPECT_EQ(host.source(0).path, "/run/own.txt");

  EXPECT_EQ(ReadAll(host, weights), "0123456789");
  EXPECT_EQ(ReadAll(host, deep), "deep bytes");
  EXPECT_EQ(ReadAll(host, built), "built!");
  EXPECT_EQ(ReadAll(host, own), "the host's own file");
  // Planned again, a source keeps its index.
  std::vector<ReadPiece> again;
  ASSERT_TRUE(host.Plan(deep, 0, 100, &again).ok());
  EXPECT_EQ(again[0].source, pieces[0].source);

  // A changed source is refused through the graft as anywhere else.
  env_.WriteFile("/run/tag/weights.pt", "9876543210");
  std::vector<ReadPiece> changed;
  ASSERT_TRUE(host.Plan(weights, 0, 100, &changed).ok());
  SourceFiles reader(host);
  std::string out;
  EXPECT_FALSE(reader.Read(changed, &out).ok());
}

// A builder's error is every lookup's answer into that graft, built once;
// the rest of the view serves on.
TEST_F(GraftTest, ABuildersErrorIsKeptAndTheRestServesOn) {
  View host(env_, 1);
  ASSERT_TRUE(host.AddSourceFile(kRootInode, "own.txt", "/run/own.txt").ok());
  int builds = 0;
  auto broken = host.AddGraft(
      kRootInode, "broken",
      [&]() -> Result<View::GraftTarget> {
        ++builds;
        return Status::Corruption("/run/tag/zero_pp_rank_1_mp_rank_00_optim_states.pt: truncated");
      },
      5, FileAccess{0755, 0, 0});
  ASSERT_TRUE(broken.ok());
  for (int i = 0; i < 3; ++i) {
    auto looked = host.Lookup(*broken, "anything");
    ASSERT_FALSE(looked.ok());
    EXPECT_NE(looked.status().message().find("zero_pp_rank_1"), std::string::npos);
    EXPECT_FALSE(host.ReadDir(*broken).ok());
  }
  EXPECT_EQ(builds, 1);
  EXPECT_TRUE(host.GetAttr(*broken)->is_dir);
  EXPECT_EQ(Names(host, kRootInode), (std::vector<std::string>{"broken", "own.txt"}));
  EXPECT_TRUE(host.Lookup(kRootInode, "own.txt").ok());
}

TEST_F(GraftTest, RefusesWhatCannotBeGrafted) {
  View host(env_, 1);
  auto no_view = host.AddGraft(
      kRootInode, "none", []() -> Result<View::GraftTarget> { return View::GraftTarget{}; }, 0,
      FileAccess{0755, 0, 0});
  EXPECT_FALSE(host.ReadDir(*no_view).ok());
  auto file = host.AddGraft(
      kRootInode, "file",
      [&]() -> Result<View::GraftTarget> {
        Grafted g = MakeGrafted(env_);
        return View::GraftTarget{g.view, *g.view->Lookup(g.dir, "built")};
      },
      0, FileAccess{0755, 0, 0});
  EXPECT_FALSE(host.ReadDir(*file).ok());
  auto nested = host.AddGraft(
      kRootInode, "nested",
      [&]() -> Result<View::GraftTarget> {
        Grafted g = MakeGrafted(env_);
        EXPECT_TRUE(g.view
                        ->AddGraft(
                            g.dir, "inner",
                            []() -> Result<View::GraftTarget> { return Status::NotFound("inner"); },
                            0, FileAccess{0755, 0, 0})
                        .ok());
        return View::GraftTarget{g.view, g.dir};
      },
      0, FileAccess{0755, 0, 0});
  auto listed = host.ReadDir(*nested);
  ASSERT_FALSE(listed.ok());
  EXPECT_NE(listed.status().message().find("grafts of its own"), std::string::npos);
  // Nothing is added under a graft but by its view.
  EXPECT_FALSE(host.AddDirectory(*no_view, "x").ok());
  // An inode of no graft is no inode.
  EXPECT_FALSE(host.GetAttr((InodeId{99} << 40) | 3).ok());
}

// A source directory's extras, decided from its listing when it is first
// listed: grafts and built files beside its entries, shadowing a source
// entry of the same name; each directory is decorated once.
TEST_F(GraftTest, SourceDirectoriesAreDecoratedFromTheirListing) {
  env_.WriteFile("/run/checkpoint-4/latest", "tag");
  env_.WriteFile("/run/checkpoint-4/tag/weights.pt", "w");
  env_.WriteFile("/run/checkpoint-4/shadowed", "source bytes");
  env_.WriteFile("/run/logs/events", "e");
  View host(env_, 1);
  host.BackRootBy("/run");
  std::vector<std::string> decorated;
  int builds = 0;
  host.DecorateSourceDirectories([&](const std::string& dir, const std::vector<DirEntry>& entries) {
    decorated.push_back(dir);
    View::SourceDirExtras extras;
    const bool root = std::any_of(entries.begin(), entries.end(),
                                  [](const DirEntry& e) { return e.name == "latest"; });
    if (!root) return extras;
    extras.grafts.push_back({"tag_universal",
                             [&]() -> Result<View::GraftTarget> {
                               ++builds;
                               Grafted g = MakeGrafted(env_);
                               return View::GraftTarget{g.view, g.dir};
                             },
                             9, FileAccess{0700, 1, 2}, nullptr});
    extras.files.push_back({"shadowed", std::make_shared<InlineContent>("built bytes"), 8,
                            FileAccess{0444, 1, 2}, nullptr});
    return extras;
  });
  EXPECT_EQ(Names(host, kRootInode),
            (std::vector<std::string>{"checkpoint-4", "logs", "own.txt", "tag"}));
  const InodeId root = *host.Lookup(kRootInode, "checkpoint-4");
  EXPECT_EQ(Names(host, root),
            (std::vector<std::string>{"latest", "shadowed", "tag", "tag_universal"}));
  EXPECT_EQ(Names(host, root).size(), 4u);  // listed again: decorated once
  EXPECT_EQ(ReadAll(host, *host.Lookup(root, "shadowed")), "built bytes");
  EXPECT_EQ(host.GetAttr(*host.Lookup(root, "shadowed"))->mtime_ns, 8);
  EXPECT_EQ(builds, 0);
  const InodeId graft = *host.Lookup(root, "tag_universal");
  EXPECT_EQ(host.GetAttr(graft)->mode, 0700u);
  EXPECT_EQ(ReadAll(host, *host.Lookup(graft, "weights.pt")), "0123456789");
  EXPECT_EQ(builds, 1);
  EXPECT_EQ(decorated, (std::vector<std::string>{"/run", "/run/checkpoint-4"}));
}

// Many readers looking into a graft at once build it once, and all see it.
TEST_F(GraftTest, ConcurrentFirstLookupsBuildOnce) {
  View host(env_, 1);
  std::atomic<int> builds{0};
  auto graft = host.AddGraft(
      kRootInode, "g",
      [&]() -> Result<View::GraftTarget> {
        builds.fetch_add(1);
        Grafted g = MakeGrafted(env_);
        return View::GraftTarget{g.view, g.dir};
      },
      0, FileAccess{0755, 0, 0});
  ASSERT_TRUE(graft.ok());
  std::vector<std::thread> threads;
  std::atomic<int> found{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      auto w = host.Lookup(*graft, "weights.pt");
      if (w.ok() && ReadAll(host, *w) == "0123456789") found.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(builds.load(), 1);
  EXPECT_EQ(found.load(), 8);
}

}  // namespace
}  // namespace ucfs

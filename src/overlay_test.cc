#include "ucfs/overlay.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include "test_support.h"
#include "ucfs/torch_pickle_builder.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

using testing::SmallView;

std::string TempUpper(const std::string& name) { return testing::FreshTempDir("overlay_" + name); }

// The mount's whole tree as path -> contents (nullopt for a directory).
using Tree = std::map<std::string, std::optional<std::string>>;

Tree Snapshot(Overlay& o, View& view) {
  Tree tree;
  SourceFiles reader(*Env::Posix(), [&](uint32_t i) { return view.source(i); });
  auto walk = [&](auto&& self, const std::string& dir) -> void {
    auto entries = o.ReadDir(dir);
    EXPECT_TRUE(entries.ok()) << dir << ": " << entries.status().ToString();
    if (!entries.ok()) return;
    for (const auto& [name, e] : *entries) {
      const std::string path = dir.empty() ? name : dir + "/" + name;
      if (e.is_dir) {
        tree[path] = std::nullopt;
        self(self, path);
      } else if (e.in_upper) {
        tree[path] = testing::ReadFile(e.upper_path);
      } else {
        std::vector<ReadPiece> pieces;
        EXPECT_TRUE(view.Plan(e.lower, 0, view.GetAttr(e.lower)->size, &pieces).ok());
        std::string bytes;
        EXPECT_TRUE(reader.Read(pieces, &bytes).ok());
        tree[path] = bytes;
      }
    }
  };
  walk(walk, "");
  return tree;
}

void Write(Overlay& o, const std::string& path, const std::string& text, int flags) {
  auto fd = o.OpenWrite(path, O_WRONLY | flags, 0644);
  ASSERT_TRUE(fd.ok()) << path << ": " << fd.status().ToString();
  if (!(flags & O_TRUNC)) ::lseek(*fd, 0, SEEK_END);
  ASSERT_EQ(::write(*fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(*fd);
}

TEST(Overlay, TrainerLikeSequence) {
  auto view = SmallView();
  const std::string upper = TempUpper("trainer");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  // DeepSpeed saves a new tag, then rewrites `latest` with open(..., 'w').
  ASSERT_TRUE((*o)->MakeDir("t8", 0755).ok());
  Write(**o, "t8/rank0.pt", "new weights", O_CREAT | O_TRUNC);
  Write(**o, "latest", "t8", O_CREAT | O_TRUNC);
  // And a tool writing aside and renaming into place.
  Write(**o, "latest.tmp", "t9", O_CREAT | O_TRUNC);
  ASSERT_TRUE((*o)->Rename("latest.tmp", "latest").ok());
  const Tree tree = Snapshot(**o, *view);
  const Tree expected = {
      {"d", std::nullopt}, {"d/x", "X-view"}, {"latest", "t9"},     {"t", std::nullopt},
      {"t/a", "A-view"},   {"t/b", "B-view"}, {"t8", std::nullopt}, {"t8/rank0.pt", "new weights"}};
  EXPECT_EQ(tree, expected);
  // The upper directory alone holds exactly what was written.
  EXPECT_EQ(testing::ReadFile(upper + "/latest"), "t9");
  EXPECT_EQ(testing::ReadFile(upper + "/t8/rank0.pt"), "new weights");
  EXPECT_FALSE(fs::exists(upper + "/t"));
  // A remount over the same upper directory sees the same tree.
  auto again = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Snapshot(**again, *view), expected);
}

TEST(Overlay, DeletingViewEntriesLeavesWhiteouts) {
  auto view = SmallView();
  const std::string upper = TempUpper("whiteouts");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE((*o)->Unlink("t/a").ok());
  EXPECT_FALSE((*o)->Lookup("t/a").ok());
  EXPECT_TRUE(fs::exists(upper + "/t/.wh.a"));
  ASSERT_TRUE((*o)->Unlink("d/x").ok());
  ASSERT_TRUE((*o)->RemoveDir("d").ok());
  EXPECT_FALSE((*o)->Lookup("d").ok());
  // A directory made where the view's stood starts empty (opaque).
  ASSERT_TRUE((*o)->MakeDir("d", 0755).ok());
  auto listing = (*o)->ReadDir("d");
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->empty());
  // Appending to a view file copies it up first; the view is untouched.
  Write(**o, "t/b", "+more", 0);
  EXPECT_EQ(*Snapshot(**o, *view).at("t/b"), "B-view+more");
  EXPECT_FALSE((*o)->RemoveDir("t").ok());                     // not empty
  EXPECT_FALSE((*o)->OpenWrite("nope", O_WRONLY, 0644).ok());  // no O_CREAT
}

TEST(Overlay, RenamesDirectoriesOfTheUpperDirectoryOnly) {
  auto view = SmallView();
  const std::string upper = TempUpper("dir_rename");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  // A trainer staging a checkpoint in a temporary directory, then moving it.
  ASSERT_TRUE((*o)->MakeDir("tmp-ckpt", 0755).ok());
  Write(**o, "tmp-ckpt/w.pt", "W", O_CREAT | O_TRUNC);
  ASSERT_TRUE((*o)->Rename("tmp-ckpt", "ckpt-1").ok());
  EXPECT_EQ(*Snapshot(**o, *view).at("ckpt-1/w.pt"), "W");
  EXPECT_FALSE((*o)->Lookup("tmp-ckpt").ok());
  // Onto a deleted view directory's name: the view's contents stay hidden.
  ASSERT_TRUE((*o)->Unlink("d/x").ok());
  ASSERT_TRUE((*o)->RemoveDir("d").ok());
  ASSERT_TRUE((*o)->Rename("ckpt-1", "d").ok());
  auto d = (*o)->ReadDir("d");
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].first, "w.pt");
  // View directories are refused with EXDEV (mv copies instead).
  EXPECT_EQ((*o)->Rename("t", "t2").posix_errno(), EXDEV);
  ASSERT_TRUE((*o)->MakeDir("full", 0755).ok());
  Write(**o, "full/f", "F", O_CREAT | O_TRUNC);
  ASSERT_TRUE((*o)->MakeDir("empty", 0755).ok());
  EXPECT_EQ((*o)->Rename("empty", "full").posix_errno(), ENOTEMPTY);
  EXPECT_EQ((*o)->Rename("full", "full/inside").posix_errno(), EINVAL);
  EXPECT_EQ((*o)->Rename("latest", "t/a", /*no_replace=*/true).posix_errno(), EEXIST);
  ASSERT_TRUE((*o)->Rename("full", "empty").ok());  // onto an empty directory
  EXPECT_EQ(*Snapshot(**o, *view).at("empty/f"), "F");
}

TEST(Overlay, AnswersWithTheErrnoAFileSystemWould) {
  auto view = SmallView();
  auto o = Overlay::Open(TempUpper("errno"), view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  EXPECT_EQ((*o)->Lookup("nope").status().posix_errno(), ENOENT);
  EXPECT_EQ((*o)->Lookup("latest/x").status().posix_errno(), ENOTDIR);
  EXPECT_EQ((*o)->MakeDir("t", 0755).posix_errno(), EEXIST);
  EXPECT_EQ((*o)->RemoveDir("t").posix_errno(), ENOTEMPTY);
  EXPECT_EQ((*o)->Unlink("t").posix_errno(), EISDIR);
  EXPECT_EQ((*o)->OpenWrite("t", O_WRONLY, 0).status().posix_errno(), EISDIR);
  EXPECT_EQ((*o)->OpenWrite("latest", O_WRONLY | O_CREAT | O_EXCL, 0644).status().posix_errno(),
            EEXIST);
  // Whiteout names are ucfs's own.
  EXPECT_EQ((*o)->OpenWrite(".wh.x", O_WRONLY | O_CREAT, 0644).status().posix_errno(), EINVAL);
  EXPECT_EQ((*o)->MakeDir("t/.wh..opq", 0755).posix_errno(), EINVAL);
}

TEST(Overlay, RemovesCopyUpsACrashLeftBehind) {
  auto view = SmallView();
  const std::string upper = TempUpper("stale");
  fs::create_directories(upper + "/t");
  const std::string stale = upper + "/t/.wh..wh.copyup.a";
  { std::ofstream(stale) << "half a copy"; }
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  EXPECT_FALSE(fs::exists(stale));
  EXPECT_EQ(*Snapshot(**o, *view).at("t/a"), "A-view");
}

// Random operations against a reference model of the merged tree.
TEST(Overlay, MatchesAReferenceModel) {
  std::mt19937 rng(2026);
  for (int run = 0; run < 20; ++run) {
    auto view = SmallView();
    auto o = Overlay::Open(TempUpper("model" + std::to_string(run)), view, *Env::Posix());
    ASSERT_TRUE(o.ok());
    Tree model = Snapshot(**o, *view);
    const std::vector<std::string> names = {"latest", "t/a", "t/b", "d/x",
                                            "t/c",    "d/y", "e",   "e/z"};
    for (int step = 0; step < 60; ++step) {
      const std::string& path = names[rng() % names.size()];
      const std::string parent =
          path.find('/') == std::string::npos ? "" : path.substr(0, path.find('/'));
      const bool parent_ok = parent.empty() || (model.count(parent) && !model.at(parent));
      const int op = static_cast<int>(rng() % 5);
      const std::string text = "v" + std::to_string(rng() % 100);
      if (op == 0 && parent_ok && (!model.count(path) || model.at(path))) {  // write, truncating
        Write(**o, path, text, O_CREAT | O_TRUNC);
        model[path] = text;
      } else if (op == 1 && model.count(path) && model.at(path)) {  // append
        Write(**o, path, text, 0);
        *model[path] += text;
      } else if (op == 2 && model.count(path) && model.at(path)) {  // unlink
        ASSERT_TRUE((*o)->Unlink(path).ok()) << path;
        model.erase(path);
      } else if (op == 3 && path.find('/') == std::string::npos && !model.count(path)) {
        ASSERT_TRUE((*o)->MakeDir(path, 0755).ok()) << path;
        model[path] = std::nullopt;
      } else if (op == 4 && model.count(path) && model.at(path)) {  // rename to a sibling
        const std::string& to = names[rng() % names.size()];
        const std::string to_parent =
            to.find('/') == std::string::npos ? "" : to.substr(0, to.find('/'));
        const bool to_ok =
            (to_parent.empty() || (model.count(to_parent) && !model.at(to_parent))) &&
            (!model.count(to) || model.at(to)) && to != path;
        if (!to_ok) continue;
        ASSERT_TRUE((*o)->Rename(path, to).ok()) << path << " -> " << to;
        model[to] = model.at(path);
        model.erase(path);
      } else {
        continue;
      }
      ASSERT_EQ(Snapshot(**o, *view), model) << "run " << run << " step " << step;
    }
  }
}

}  // namespace
}  // namespace ucfs

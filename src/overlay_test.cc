#include "ucfs/overlay.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <optional>
#include <random>

#include "test_support.h"
#include "ucfs/torch_writer.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

// A small read-only view: latest, t/{a,b}, d/x.
std::shared_ptr<View> SmallView() {
  auto view = std::make_shared<View>(*Env::Posix(), 0);
  auto add = [&](InodeId dir, const char* name, const char* text) {
    EXPECT_TRUE(view->AddFile(dir, name, std::make_shared<InlineContent>(text)).ok());
  };
  add(kRootInode, "latest", "t");
  InodeId t = *view->AddDirectory(kRootInode, "t");
  add(t, "a", "A-view");
  add(t, "b", "B-view");
  InodeId d = *view->AddDirectory(kRootInode, "d");
  add(d, "x", "X-view");
  return view;
}

std::string TempUpper(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/ucfs_overlay_" + name;
  fs::remove_all(dir);
  return dir;
}

// The mount's whole tree as path -> contents (nullopt for a directory).
using Tree = std::map<std::string, std::optional<std::string>>;

Tree Snapshot(Overlay& o, View& view) {
  Tree tree;
  PieceReader reader(*Env::Posix(), [&](uint32_t i) { return view.source(i); });
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

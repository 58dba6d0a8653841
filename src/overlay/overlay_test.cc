#include "ucfs/overlay/overlay.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>

#include "test_support.h"
#include "ucfs/views/torch_pickle_builder.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;

using testing::SetTimes;
using testing::SmallView;
using testing::Snapshot;
using testing::StatOf;
using testing::Tree;
using testing::Write;

std::string TempUpper(const std::string& name) { return testing::FreshTempDir("overlay_" + name); }

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
  EXPECT_EQ((*o)->Link("t", "t2").posix_errno(), EPERM);
  EXPECT_EQ((*o)->Rename("t", "latest").posix_errno(), EXDEV);  // a view directory
  EXPECT_EQ((*o)->ReadLink("latest").status().posix_errno(), EINVAL);
  EXPECT_EQ((*o)->Rename("nope", "x", RENAME_EXCHANGE).posix_errno(), ENOENT);
  EXPECT_EQ((*o)->Rename("latest", "x", RENAME_EXCHANGE).posix_errno(), ENOENT);
  // NAME_MAX, not ENOENT, for a name too long, looked up or made.
  const std::string long_name(256, 'n');
  EXPECT_EQ((*o)->Lookup(long_name).status().posix_errno(), ENAMETOOLONG);
  EXPECT_EQ((*o)->MakeDir(long_name, 0755).posix_errno(), ENAMETOOLONG);
  EXPECT_TRUE((*o)->MakeDir(std::string(255, 'n'), 0755).ok());
  // An escaped name must fit too.
  EXPECT_EQ((*o)->MakeDir(".wh." + std::string(250, 'n'), 0755).posix_errno(), ENAMETOOLONG);
}

// A view whose entries' names look like ucfs's whiteout bookkeeping.
std::shared_ptr<View> WhiteoutLikeView() {
  auto view = std::make_shared<View>(*Env::Posix(), 0);
  for (const char* name : {".wh.param", ".wh..opq", ".opq", "a"}) {
    EXPECT_TRUE(view->AddFile(kRootInode, name, std::make_shared<InlineContent>(name)).ok());
  }
  return view;
}

TEST(Overlay, NamesLikeWhiteoutsAreOrdinaryNames) {
  auto view = WhiteoutLikeView();
  const std::string upper = TempUpper("wh_names");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  // The view's ".wh.*" entries show, as themselves.
  Tree expected = {
      {".opq", ".opq"}, {".wh..opq", ".wh..opq"}, {".wh.param", ".wh.param"}, {"a", "a"}};
  EXPECT_EQ(Snapshot(**o, *view), expected);
  ASSERT_TRUE((*o)->Lookup(".wh.param").ok());
  // Written, they are copied up under escaped names; deleted, their
  // whiteouts are escaped too, and hide them alone.
  Write(**o, ".wh.param", "+w", 0);
  EXPECT_EQ(testing::ReadFile(upper + "/.wh..wh.e..wh.param"), ".wh.param+w");
  ASSERT_TRUE((*o)->Unlink(".wh..opq").ok());
  ASSERT_TRUE((*o)->Unlink(".opq").ok());
  EXPECT_TRUE(fs::exists(upper + "/.wh..wh.w..wh..opq"));
  EXPECT_TRUE(fs::exists(upper + "/.wh..wh.w..opq"));
  EXPECT_FALSE(fs::exists(upper + "/.wh..opq"));  // the root is not made opaque
  // New ones made through the mount.
  Write(**o, ".wh.new", "N", O_CREAT | O_TRUNC);
  ASSERT_TRUE((*o)->MakeDir(".wh..opq", 0755).ok());
  Write(**o, ".wh..opq/.wh.inner", "I", O_CREAT | O_TRUNC);
  ASSERT_TRUE((*o)->Unlink("a").ok());
  EXPECT_TRUE(fs::exists(upper + "/.wh.a"));
  expected = {{".wh.new", "N"},
              {".wh..opq", std::nullopt},
              {".wh..opq/.wh.inner", "I"},
              {".wh.param", ".wh.param+w"}};
  EXPECT_EQ(Snapshot(**o, *view), expected);
  ASSERT_TRUE((*o)->Rename(".wh.new", ".wh.param").ok());
  expected.erase(".wh.new");
  expected[".wh.param"] = "N";
  EXPECT_EQ(Snapshot(**o, *view), expected);
  auto again = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(Snapshot(**again, *view), expected);
}

TEST(Overlay, ReadOnlyEntriesRefuseEveryChange) {
  auto view = SmallView();
  Overlay::Options options;
  options.read_only = {"d"};
  const std::string upper = TempUpper("read_only");
  auto o = Overlay::Open(upper, view, *Env::Posix(), options);
  ASSERT_TRUE(o.ok());
  Overlay& ov = **o;
  EXPECT_TRUE(ov.IsReadOnly("d"));
  EXPECT_TRUE(ov.IsReadOnly("d/x"));
  EXPECT_FALSE(ov.IsReadOnly("dd"));
  EXPECT_EQ(ov.OpenWrite("d/x", O_WRONLY, 0).status().posix_errno(), EROFS);
  EXPECT_EQ(ov.OpenWrite("d/x", O_WRONLY | O_TRUNC, 0).status().posix_errno(), EROFS);
  EXPECT_EQ(ov.OpenWrite("d/new", O_WRONLY | O_CREAT, 0644).status().posix_errno(), EROFS);
  EXPECT_EQ(ov.MakeDir("d/sub", 0755).posix_errno(), EROFS);
  EXPECT_EQ(ov.MakeNode("d/fifo", S_IFIFO | 0644, 0).posix_errno(), EROFS);
  EXPECT_EQ(ov.Symlink("x", "d/link").posix_errno(), EROFS);
  EXPECT_EQ(ov.Unlink("d/x").posix_errno(), EROFS);
  EXPECT_EQ(ov.RemoveDir("d").posix_errno(), EROFS);
  EXPECT_EQ(ov.Rename("d/x", "moved").posix_errno(), EROFS);
  EXPECT_EQ(ov.Rename("latest", "d/x").posix_errno(), EROFS);
  EXPECT_EQ(ov.Rename("latest", "d/new").posix_errno(), EROFS);
  EXPECT_EQ(ov.Rename("d", "e").posix_errno(), EROFS);
  EXPECT_EQ(ov.Rename("t/a", "d/x", RENAME_EXCHANGE).posix_errno(), EROFS);
  EXPECT_EQ(ov.Link("d/x", "hard").posix_errno(), EROFS);
  EXPECT_EQ(ov.Link("latest", "d/hard").posix_errno(), EROFS);
  EXPECT_EQ(ov.PrepareChange("d").status().posix_errno(), EROFS);
  EXPECT_EQ(ov.PrepareChange("d/x").status().posix_errno(), EROFS);
  // Nothing of it reached the upper directory.
  EXPECT_FALSE(fs::exists(upper + "/d"));
  EXPECT_EQ(*Snapshot(ov, *view).at("d/x"), "X-view");
}

TEST(Overlay, LinksSymlinksAndSpecialFiles) {
  auto view = SmallView();
  const std::string upper = TempUpper("links");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  Overlay& ov = **o;
  // A hard link to a view file copies it up first.
  ASSERT_TRUE(ov.Link("t/a", "a-link").ok());
  auto a = ov.Lookup("t/a");
  auto link = ov.Lookup("a-link");
  ASSERT_TRUE(a.ok() && link.ok());
  EXPECT_TRUE(a->in_upper);
  EXPECT_EQ(a->st.st_ino, link->st.st_ino);
  EXPECT_EQ(link->st.st_nlink, 2u);
  Write(ov, "a-link", "+l", 0);
  EXPECT_EQ(*Snapshot(ov, *view).at("t/a"), "A-view+l");
  EXPECT_EQ(ov.Link("t/b", "a-link").posix_errno(), EEXIST);
  // Symbolic links, as they are.
  ASSERT_TRUE(ov.Symlink("../t/b", "d/sym").ok());
  EXPECT_EQ(*ov.ReadLink("d/sym"), "../t/b");
  auto sym = ov.Lookup("d/sym");
  ASSERT_TRUE(sym.ok());
  EXPECT_TRUE(S_ISLNK(sym->st.st_mode));
  // FIFOs, sockets and regular files by mknod.
  ASSERT_TRUE(ov.MakeNode("fifo", S_IFIFO | 0640, 0).ok());
  ASSERT_TRUE(ov.MakeNode("sock", S_IFSOCK | 0600, 0).ok());
  ASSERT_TRUE(ov.MakeNode("plain", S_IFREG | 0600, 0).ok());
  EXPECT_TRUE(S_ISFIFO(ov.Lookup("fifo")->st.st_mode));
  EXPECT_EQ(ov.Lookup("fifo")->st.st_mode & 07777, 0640u);
  EXPECT_TRUE(S_ISSOCK(ov.Lookup("sock")->st.st_mode));
  EXPECT_TRUE(S_ISREG(ov.Lookup("plain")->st.st_mode));
  EXPECT_EQ(ov.MakeNode("latest", S_IFIFO | 0600, 0).posix_errno(), EEXIST);
  // They are renamed and removed like files; a removed view name stays gone.
  ASSERT_TRUE(ov.Rename("fifo", "latest").ok());
  EXPECT_TRUE(S_ISFIFO(ov.Lookup("latest")->st.st_mode));
  ASSERT_TRUE(ov.Unlink("latest").ok());
  EXPECT_EQ(ov.Lookup("latest").status().posix_errno(), ENOENT);
}

TEST(Overlay, RenameExchangeAndNoReplace) {
  auto view = SmallView();
  const std::string upper = TempUpper("exchange");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  Overlay& ov = **o;
  Write(ov, "latest.new", "t9", O_CREAT | O_TRUNC);
  // Atomic save: the new file swapped with the view's old one.
  ASSERT_TRUE(ov.Rename("latest.new", "latest", RENAME_EXCHANGE).ok());
  Tree tree = Snapshot(ov, *view);
  EXPECT_EQ(*tree.at("latest"), "t9");
  EXPECT_EQ(*tree.at("latest.new"), "t");
  EXPECT_EQ(ov.Rename("latest.new", "latest", RENAME_NOREPLACE).posix_errno(), EEXIST);
  ASSERT_TRUE(ov.Rename("latest.new", "latest.old", RENAME_NOREPLACE).ok());
  // A file and a directory made through the mount swap too; the directory
  // lands on a view name without merging with the view's directory there.
  ASSERT_TRUE(ov.MakeDir("stage", 0755).ok());
  Write(ov, "stage/w", "W", O_CREAT | O_TRUNC);
  ASSERT_TRUE(ov.Unlink("d/x").ok());
  EXPECT_EQ(ov.Rename("stage", "d", RENAME_EXCHANGE).posix_errno(), EXDEV);
  ASSERT_TRUE(ov.Rename("stage", "latest.old", RENAME_EXCHANGE).ok());
  tree = Snapshot(ov, *view);
  EXPECT_EQ(*tree.at("latest.old/w"), "W");
  EXPECT_EQ(*tree.at("stage"), "t");
  EXPECT_EQ(ov.Rename("a", "b", 4 /* RENAME_WHITEOUT */).posix_errno(), EINVAL);
}

TEST(Overlay, CopyUpKeepsTimesAndMode) {
  auto view = std::make_shared<View>(*Env::Posix(), int64_t{1700000000} * 1000000000 + 5);
  ASSERT_TRUE(view->AddFile(kRootInode, "f", std::make_shared<InlineContent>("F")).ok());
  ASSERT_TRUE(view->AddDirectory(kRootInode, "dir").ok());
  const std::string upper = TempUpper("copy_up_times");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  const Attr shown = *view->GetAttr(*view->Lookup(kRootInode, "f"));
  // Opened for writing, nothing written: the copy is the file as shown.
  auto fd = (*o)->OpenWrite("f", O_WRONLY, 0);
  ASSERT_TRUE(fd.ok());
  auto f = (*o)->Lookup("f");
  ASSERT_TRUE(f.ok() && f->in_upper);
  EXPECT_EQ(f->st.st_mtim.tv_sec, 1700000000);
  EXPECT_EQ(f->st.st_mtim.tv_nsec, 5);
  EXPECT_EQ(f->st.st_mode, ViewEntryMode(shown));
  ASSERT_TRUE((*o)->PrepareChange("dir").ok());
  auto dir = (*o)->Lookup("dir");
  ASSERT_TRUE(dir.ok() && dir->in_upper);
  EXPECT_EQ(dir->st.st_mtim.tv_sec, 1700000000);
}

TEST(Overlay, PathsLongerThanPathMax) {
  auto view = SmallView();
  auto o = Overlay::Open(TempUpper("long_paths"), view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  // 30 levels of 200-byte names: 6 KB, past PATH_MAX with the upper's own.
  std::string path = "t";
  for (int i = 0; i < 30; ++i) {
    path += "/" + std::string(200, static_cast<char>('a' + i % 26));
    ASSERT_TRUE((*o)->MakeDir(path, 0755).ok()) << i;
  }
  Write(**o, path + "/f", "deep", O_CREAT | O_TRUNC);
  ASSERT_TRUE((*o)->Symlink("f", path + "/s").ok());
  ASSERT_TRUE((*o)->Rename(path + "/f", path + "/g").ok());
  auto listing = (*o)->ReadDir(path);
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->size(), 2u);
  EXPECT_EQ((*listing)[0].first, "g");
  auto fd = (*o)->OpenRead(path + "/g", O_RDONLY);
  ASSERT_TRUE(fd.ok());
  char buf[8];
  EXPECT_EQ(::read(fd->get(), buf, sizeof buf), 4);
  ASSERT_TRUE((*o)->Unlink(path + "/g").ok());
  ASSERT_TRUE((*o)->Unlink(path + "/s").ok());
  ASSERT_TRUE((*o)->RemoveDir(path).ok());
}

TEST(Overlay, NewEntriesAreTheCallersWithTheirUmaskOnce) {
  auto view = SmallView();
  const std::string upper = TempUpper("caller");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  const bool root = ::geteuid() == 0;
  Overlay::Caller caller;
  caller.uid = root ? 65534 : ::getuid();
  caller.gid = root ? 65534 : ::getgid();
  caller.umask = 002;
  const mode_t old_umask = ::umask(022);  // the daemon's own must not apply
  ASSERT_TRUE((*o)->MakeDir("pub", 0777, &caller).ok());
  auto fd = (*o)->OpenWrite("pub/f", O_WRONLY | O_CREAT, 0666, &caller);
  ASSERT_TRUE(fd.ok());
  ASSERT_TRUE((*o)->MakeNode("pub/p", S_IFIFO | 0666, 0, &caller).ok());
  ASSERT_TRUE((*o)->Symlink("f", "pub/s", &caller).ok());
  ::umask(old_umask);
  for (const char* p : {"pub", "pub/f", "pub/p", "pub/s"}) {
    auto e = (*o)->Lookup(p);
    ASSERT_TRUE(e.ok()) << p;
    EXPECT_EQ(e->st.st_uid, caller.uid) << p;
    EXPECT_EQ(e->st.st_gid, caller.gid) << p;
  }
  EXPECT_EQ((*o)->Lookup("pub")->st.st_mode & 07777, 0775u);
  EXPECT_EQ((*o)->Lookup("pub/f")->st.st_mode & 07777, 0664u);
  EXPECT_EQ((*o)->Lookup("pub/p")->st.st_mode & 07777, 0664u);
  if (!root) return;
  // In a setgid directory: its group, and new directories are setgid too.
  ASSERT_TRUE((*o)->MakeDir("shared", 02775).ok());
  ASSERT_EQ(::chown((upper + "/shared").c_str(), 0, 100), 0);
  ASSERT_EQ(::chmod((upper + "/shared").c_str(), 02775), 0);
  ASSERT_TRUE((*o)->MakeDir("shared/sub", 0755, &caller).ok());
  auto sub = (*o)->Lookup("shared/sub");
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(sub->st.st_uid, caller.uid);
  EXPECT_EQ(sub->st.st_gid, 100u);
  EXPECT_EQ(sub->st.st_mode & 07777, 02755u);
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

namespace ucfs {
namespace {

// Names in the upper directory, recursively (temporaries included).
std::vector<std::string> UpperNames(const std::string& upper) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::recursive_directory_iterator(upper)) {
    names.push_back(std::filesystem::relative(e.path(), upper).string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// A copy-up written apart (as OverlayFs does with its table unlocked) is
// installed by Adopt when the file is still the view's, and dropped —
// leaving no temporary — when it changed meanwhile.
TEST(Overlay, CopiesWrittenApartAreAdoptedOnlyWhereTheyStillApply) {
  auto view = SmallView();
  const std::string upper = TempUpper("copy_aside");
  auto o = Overlay::Open(upper, view, *Env::Posix());
  ASSERT_TRUE(o.ok()) << o.status().ToString();

  auto copy = (*o)->PrepareCopyAside("t/a");
  ASSERT_TRUE(copy.ok() && copy->has_value());
  ASSERT_TRUE((*copy)->Run().ok());
  ASSERT_TRUE((*o)->Adopt("t/a", std::move(**copy)).ok());
  auto e = (*o)->Lookup("t/a");
  ASSERT_TRUE(e.ok() && e->in_upper);
  EXPECT_EQ(testing::ReadFile(e->upper_path), "A-view");
  EXPECT_EQ(UpperNames(upper), (std::vector<std::string>{"t", "t/a"}));

  // Removed while the copy was written: it stays removed.
  auto second = (*o)->PrepareCopyAside("t/b");
  ASSERT_TRUE(second.ok() && second->has_value());
  ASSERT_TRUE((*second)->Run().ok());
  ASSERT_TRUE((*o)->Unlink("t/b").ok());
  ASSERT_TRUE((*o)->Adopt("t/b", std::move(**second)).ok());
  EXPECT_EQ((*o)->Lookup("t/b").status().posix_errno(), ENOENT);
  // Only the whiteout of b: the temporary went with the dropped copy.
  for (const std::string& name : UpperNames(upper)) {
    EXPECT_EQ(name.find("copyup"), std::string::npos) << name;
  }

  // Nothing to copy for an upper file or a directory.
  EXPECT_FALSE((*o)->PrepareCopyAside("t/a")->has_value());
  EXPECT_FALSE((*o)->PrepareCopyAside("d")->has_value());
}

// The view is asked about upper directories as they are listed, and about
// names missed in them; what it then adds shows through, merged.
TEST(Overlay, AsksTheViewAboutUpperDirectoriesAndShowsWhatItAdds) {
  auto view = SmallView();
  std::vector<std::string> asked;
  Overlay::Options options;
  options.might_show = [](std::string_view name) { return name == "made"; };
  options.on_upper_dir = [&](const std::string& path, const std::string& upper_dir) {
    asked.push_back(path);
    EXPECT_TRUE(upper_dir.ends_with(path)) << upper_dir;
    if (path != "ck") return false;
    if (view->Lookup(kRootInode, "ck").ok()) return false;
    auto dir = view->MakeDirectories("ck");
    EXPECT_TRUE(dir.ok());
    View::SourceDirExtras extras;
    extras.files.push_back({"made", std::make_shared<InlineContent>("made by the view"), 0,
                            FileAccess{0444, 0, 0}, nullptr});
    EXPECT_TRUE(view->PutExtras(*dir, std::move(extras)).ok());
    return true;
  };
  auto o = Overlay::Open(TempUpper("asks"), view, *Env::Posix(), std::move(options));
  ASSERT_TRUE(o.ok());
  ASSERT_TRUE((*o)->MakeDir("ck", 0755).ok());
  Write(**o, "ck/saved", "saved", O_CREAT | O_TRUNC);
  // A miss of a name the view could not add asks nothing, and is final.
  EXPECT_FALSE((*o)->Lookup("ck/other").ok());
  EXPECT_TRUE(asked.empty());
  EXPECT_FALSE((*o)->MightAppear("other"));
  // A miss of one it could: asked, and found after.
  EXPECT_TRUE((*o)->MightAppear("made"));
  auto made = (*o)->Lookup("ck/made");
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  EXPECT_FALSE(made->in_upper);
  EXPECT_NE(made->lower, 0u);
  EXPECT_EQ(asked, std::vector<std::string>{"ck"});
  // A listing asks too.
  auto listed = (*o)->ReadDir("ck");
  ASSERT_TRUE(listed.ok());
  std::vector<std::string> names;
  for (const auto& [name, e] : *listed) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"made", "saved"}));
  EXPECT_EQ(asked, (std::vector<std::string>{"ck", "ck"}));
  // A view directory (not in the upper directory) is never asked about.
  ASSERT_TRUE((*o)->ReadDir("t").ok());
  EXPECT_EQ(std::count(asked.begin(), asked.end(), "t"), 0);
  // Removing what the view made leaves a whiteout, as for any view file.
  ASSERT_TRUE((*o)->Unlink("ck/made").ok());
  EXPECT_FALSE((*o)->Lookup("ck/made").ok());
}

// A source's link shows as a link through the overlay too; a change to it
// (a rename, an owner) copies it up as a link, never as what it points to.
TEST(Overlay, SourceLinksShowAndCopyUpAsLinks) {
  const std::string base = testing::FreshTempDir("overlay_links");
  const std::string src = base + "/src";
  fs::create_directories(src + "/epoch=0-step=4.ckpt");
  testing::WriteFile(src + "/epoch=0-step=4.ckpt/latest", "checkpoint");
  fs::create_symlink("epoch=0-step=4.ckpt", src + "/last.ckpt");
  fs::create_symlink("latest", src + "/epoch=0-step=4.ckpt/l");
  auto view = std::make_shared<View>(*Env::Posix(), 0);
  view->BackRootBy(src);
  auto o = Overlay::Open(base + "/upper", view, *Env::Posix());
  ASSERT_TRUE(o.ok());
  auto e = (*o)->Lookup("last.ckpt");
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->in_upper);
  EXPECT_TRUE(S_ISLNK(ViewEntryMode(*view->GetAttr(e->lower))));
  EXPECT_EQ(*(*o)->ReadLink("last.ckpt"), "epoch=0-step=4.ckpt");
  ASSERT_TRUE((*o)->Rename("last.ckpt", "previous.ckpt").ok());
  EXPECT_EQ(fs::read_symlink(base + "/upper/previous.ckpt"), "epoch=0-step=4.ckpt");
  EXPECT_EQ(*(*o)->ReadLink("previous.ckpt"), "epoch=0-step=4.ckpt");
  EXPECT_FALSE((*o)->Lookup("last.ckpt").ok());
  EXPECT_TRUE(fs::is_symlink(src + "/last.ckpt"));  // the source is untouched
  // A link is copied under a temporary name in the upper root: the root's
  // times are put back once it is renamed into place.
  SetTimes(base + "/upper", 1000, 2000);
  ASSERT_TRUE((*o)->PrepareChange("epoch=0-step=4.ckpt/l").ok());
  EXPECT_TRUE(fs::is_symlink(base + "/upper/epoch=0-step=4.ckpt/l"));
  EXPECT_EQ(StatOf(base + "/upper").st_mtim.tv_sec, 2000);
  EXPECT_EQ(StatOf(base + "/upper").st_atim.tv_sec, 1000);
}

}  // namespace
}  // namespace ucfs

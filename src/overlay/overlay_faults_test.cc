// The writable mount on a disk that fails: a full disk, an I/O error, short
// writes, put under every write of a copy-up, a trainer's save, a rename, an
// unlink (FaultInjectingWriteEnv). Each failure must answer with an error
// naming the file, what failed and its errno, and leave the mount showing
// what it showed before: nothing complete lost, no half copy, no temporary
// in sight, the same after a remount, and the source never written.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>

#include "test_support.h"
#include "ucfs/base/fault_injecting_write_env.h"
#include "ucfs/overlay/overlay_fs.h"
#include "ucfs/vfs/source_files.h"

namespace ucfs {
namespace {

namespace fs = std::filesystem;
using Op = FaultInjectingWriteEnv::Op;
using Fault = FaultInjectingWriteEnv::Fault;

// The mount's tree: path -> its contents' digest (nullopt for a directory).
using Tree = std::map<std::string, std::optional<std::string>>;

// A file's size and hash: what a tree holds of it (a failed comparison of
// trees of megabyte files then prints lines, not megabytes).
std::string Digest(const std::string& bytes) {
  return std::to_string(bytes.size()) + " bytes, hash " +
         std::to_string(std::hash<std::string>()(bytes));
}

// A pattern no two offsets of which repeat soon: a misplaced byte shows.
std::string Pattern(size_t n, int seed) {
  std::string out(n, '\0');
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>((i * 131 + i / 251 + seed) & 0xff);
  return out;
}

// The inode of `path` in the mount.
InodeId Find(OverlayFs& fs, const std::string& path) {
  InodeId inode = kRootInode;
  for (std::string_view name : Components(path)) {
    auto st = fs.Lookup(inode, name);
    EXPECT_TRUE(st.ok()) << path << ": " << st.status().ToString();
    if (!st.ok()) return 0;
    inode = st->st_ino;
  }
  return inode;
}

constexpr const char* kShard = "global_step1/mp_rank_00_model_states.pt";

class OverlayFaultsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = testing::FreshTestDir("overlay_faults_");
    src_ = base_ + "/src";
    fs::create_directories(src_ + "/global_step1");
    fs::create_directories(src_ + "/old");
    fs::create_directories(src_ + "/removed");
    testing::WriteFile(src_ + "/removed/g", "a removed file");
    testing::WriteFile(src_ + "/latest", "global_step1");
    testing::WriteFile(src_ + "/old/f", "an old file");
    // Bigger than a copy-up's chunk (8 MiB): copied in several writes.
    testing::WriteFile(src_ + "/" + kShard, Pattern((9 << 20) + 17, 1));
    view_ = std::make_shared<View>(*Env::Posix(), 0);
    view_->BackRootBy(src_);
    source_before_ = testing::FilesBelow(src_);
  }

  void TearDown() override {
    // The source is only ever read.
    EXPECT_EQ(testing::FilesBelow(src_), source_before_);
  }

  // A mount over `upper` (a fresh one for each case) that writes through
  // `faults_`, or the real file system (a remount, the disk mended).
  std::unique_ptr<OverlayFs> Mount(const std::string& upper, bool faulty = true) {
    Overlay::Options options;
    if (faulty) options.writer = &faults_;
    auto overlay = Overlay::Open(upper, view_, *Env::Posix(), std::move(options));
    EXPECT_TRUE(overlay.ok()) << overlay.status().ToString();
    if (!overlay.ok()) return nullptr;
    return std::make_unique<OverlayFs>(std::move(overlay).value(), view_);
  }

  // Runs `body(c, mount, upper)` for each case `c` (named `c.name`), with a
  // mount of its own over the upper directory `upper`, the disk mended.
  template <typename Case, typename Body>
  void ForEachCase(const std::vector<Case>& cases, Body body) {
    for (size_t i = 0; i < cases.size(); ++i) {
      SCOPED_TRACE(cases[i].name);
      const std::string upper = base_ + "/upper" + std::to_string(i);
      faults_.Heal();
      auto mount = Mount(upper);
      ASSERT_TRUE(mount);
      body(cases[i], std::move(mount), upper);
    }
  }

  // The mount shows `expected`, and so does a new one over its upper
  // directory once it is gone.
  void ExpectShownAfterRemount(std::unique_ptr<OverlayFs> mount, const std::string& upper,
                               const Tree& expected) {
    EXPECT_EQ(Shown(*mount), expected);
    mount.reset();
    auto remounted = Mount(upper, /*faulty=*/false);
    ASSERT_TRUE(remounted);
    EXPECT_EQ(Shown(*remounted), expected);
  }

  // The bytes of `inode`, read through a handle as the adapter would.
  std::string Read(OverlayFs& fs, InodeId inode) {
    auto h = fs.Open(inode, O_RDONLY);
    EXPECT_TRUE(h.ok()) << h.status().ToString();
    if (!h.ok()) return "";
    std::string out;
    if (h->fd >= 0) {
      struct stat st {};
      EXPECT_EQ(::fstat(h->fd, &st), 0);
      out.resize(static_cast<size_t>(st.st_size));
      EXPECT_EQ(::pread(h->fd, out.data(), out.size(), 0), static_cast<ssize_t>(out.size()));
    } else {
      std::vector<ReadPiece> pieces;
      EXPECT_TRUE(view_->Plan(h->view_inode, 0, view_->GetAttr(h->view_inode)->size, &pieces).ok());
      SourceFiles reader(*view_);
      EXPECT_TRUE(reader.Read(pieces, &out).ok());
    }
    fs.Release(inode, *h);
    return out;
  }

  Tree Shown(OverlayFs& fs) {
    Tree tree;
    auto walk = [&](auto&& self, InodeId dir, const std::string& path) -> void {
      auto entries = fs.ReadDir(dir);
      ASSERT_TRUE(entries.ok()) << path << ": " << entries.status().ToString();
      for (const auto& [name, st] : *entries) {
        const std::string child = path.empty() ? name : path + "/" + name;
        if (S_ISDIR(st.st_mode)) {
          tree[child] = std::nullopt;
          self(self, st.st_ino, child);
        } else {
          tree[child] = Digest(Read(fs, st.st_ino));
        }
      }
    };
    walk(walk, kRootInode, "");
    return tree;
  }

  // The regular files of the upper directory, internal names included.
  std::vector<std::string> UpperFiles(const std::string& upper) {
    std::vector<std::string> out;
    for (const auto& [path, state] : testing::FilesBelow(upper)) {
      if (fs::is_regular_file(fs::symlink_status(upper + "/" + path))) out.push_back(path);
    }
    return out;
  }

  // A failure as the caller must see it: `err`, naming `path`.
  static void ExpectFailure(const Status& s, int err, const std::string& path) {
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.posix_errno(), err) << s.ToString();
    EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find(std::strerror(err)), std::string::npos) << s.ToString();
  }

  std::string base_, src_;
  std::shared_ptr<View> view_;
  std::map<std::string, testing::FileState> source_before_;
  FaultInjectingWriteEnv faults_;
};

// How a disk fails, and the errno the caller is to see (0: it does not
// fail, only writes short).
struct Failure {
  std::string name;
  std::function<void(FaultInjectingWriteEnv&)> arm;
  int err;
};

// Opening a view file for writing copies it up; every way the copy can
// fail leaves the view's file shown as it was, and nothing in the upper
// directory but (at most) the directories it was to land in.
TEST_F(OverlayFaultsTest, AFailedCopyUpLeavesTheViewFileAsItWas) {
  const std::vector<Failure> failures = {
      {"disk fills up", [](auto& f) { f.FillUpAfter(3 << 20); }, ENOSPC},
      {"quota", [](auto& f) { f.FillUpAfter(1 << 20, EDQUOT); }, EDQUOT},
      {"EIO on the 2nd write", [](auto& f) { f.Inject({.op = Op::kWrite, .after = 1}); }, EIO},
      {"EIO on fsync", [](auto& f) { f.Inject({.op = Op::kSync}); }, EIO},
      {"EIO on chmod", [](auto& f) { f.Inject({.op = Op::kChmod}); }, EIO},
      {"ENOSPC making the copy", [](auto& f) { f.Inject({.op = Op::kOpen, .err = ENOSPC}); },
       ENOSPC},
      {"no O_TMPFILE, then a full disk",
       [](auto& f) {
         f.Inject({.op = Op::kOpen, .times = 1, .err = EOPNOTSUPP});
         f.FillUpAfter(1 << 20);
       },
       ENOSPC},
      {"no O_TMPFILE, then ENOSPC installing it",
       [](auto& f) {
         f.Inject({.op = Op::kOpen, .times = 1, .err = EOPNOTSUPP});
         f.Inject({.op = Op::kRename, .err = ENOSPC});
       },
       ENOSPC},
      {"ENOSPC linking it in", [](auto& f) { f.Inject({.op = Op::kLink, .err = ENOSPC}); }, ENOSPC},
      {"EDQUOT copying its directory up",
       [](auto& f) { f.Inject({.op = Op::kMakeDir, .err = EDQUOT}); }, EDQUOT},
      {"EIO setting its directory's times",
       [](auto& f) { f.Inject({.op = Op::kSetTimes, .path_contains = "/global_step1"}); }, EIO},
      {"short writes", [](auto& f) { f.ShortWrites(100000); }, 0},
  };
  ForEachCase(failures, [&](const Failure& failure, std::unique_ptr<OverlayFs> mount,
                            const std::string& upper) {
    const Tree before = Shown(*mount);
    const InodeId shard = Find(*mount, kShard);
    failure.arm(faults_);
    auto h = mount->Open(shard, O_RDWR);
    faults_.Heal();
    if (failure.err == 0) {
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      mount->Release(shard, *h);
      EXPECT_GT(faults_.calls(Op::kWrite), 90u);  // 9 MiB in writes of 100 kB
      EXPECT_EQ(UpperFiles(upper), std::vector<std::string>{kShard});
      ExpectShownAfterRemount(std::move(mount), upper, before);
      return;
    }
    ASSERT_FALSE(h.ok());
    ExpectFailure(h.status(), failure.err, kShard);
    EXPECT_EQ(Shown(*mount), before);
    EXPECT_EQ(UpperFiles(upper), std::vector<std::string>{}) << "a copy left behind";
    // The disk mended, the same open copies the file up whole.
    auto again = mount->Open(shard, O_RDWR);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    mount->Release(shard, *again);
    ExpectShownAfterRemount(std::move(mount), upper, before);
  });
}

// A trainer's save as torch.save and DeepSpeed's and Hugging Face's
// checkpointing make it through the mount: a temporary made, written,
// fsynced and renamed over the final name (here both a file of an earlier
// save and the view's own shard). Whatever fails, the caller hears it, and
// the files saved before stay whole.
TEST_F(OverlayFaultsTest, AFailedSaveLosesNothingSavedBefore) {
  const std::vector<Failure> failures = {
      {"disk fills up", [](auto& f) { f.FillUpAfter(300000); }, ENOSPC},
      {"EIO on the 3rd write", [](auto& f) { f.Inject({.op = Op::kWrite, .after = 2}); }, EIO},
      {"EIO on fsync", [](auto& f) { f.Inject({.op = Op::kSync}); }, EIO},
      {"ENOSPC on rename", [](auto& f) { f.Inject({.op = Op::kRename, .err = ENOSPC}); }, ENOSPC},
      {"EDQUOT creating the temporary",
       [](auto& f) { f.Inject({.op = Op::kOpen, .path_contains = ".tmp", .err = EDQUOT}); },
       EDQUOT},
      {"short writes", [](auto& f) { f.ShortWrites(4096); }, 0},
  };
  const std::string saved = Pattern(200000, 2);  // the earlier save
  const std::string next = Pattern(1000000, 3);  // what this one writes
  ForEachCase(failures, [&](const Failure& failure, std::unique_ptr<OverlayFs> mount,
                            const std::string& upper) {
    const InodeId dir = Find(*mount, "global_step1");
    // The earlier save, complete.
    auto earlier = mount->Create(dir, "optim_states.pt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_TRUE(earlier.ok()) << earlier.status().ToString();
    ASSERT_TRUE(mount->Write(earlier->first.st_ino, earlier->second, saved, 0).ok());
    mount->Release(earlier->first.st_ino, earlier->second);
    const Tree before = Shown(*mount);

    failure.arm(faults_);
    // One save over each final name; the first failure ends it, as an
    // exception ends torch.save.
    auto save = [&](const std::string& final_name) -> Status {
      const std::string temp = final_name + ".tmp";
      auto made = mount->Create(dir, temp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (!made.ok()) return made.status();
      const InodeId inode = made->first.st_ino;
      Status s;
      for (size_t at = 0; s.ok() && at < next.size(); at += 100000) {
        auto w = mount->Write(inode, made->second, std::string_view(next).substr(at, 100000), at);
        if (!w.ok()) {
          s = w.status();
        } else if (*w != std::min<size_t>(100000, next.size() - at)) {
          // A short answer: the next write meets the error.
          auto rest = mount->Write(inode, made->second, "x", at + *w);
          s = rest.ok() ? Status::IOError("short write with no error") : rest.status();
        }
      }
      if (s.ok()) s = mount->Fsync(made->second, /*datasync=*/false);
      mount->Release(inode, made->second);
      if (s.ok()) s = mount->Rename(dir, temp, dir, final_name, 0);
      return s;
    };
    const Status first = save("optim_states.pt");
    const Status second = first.ok() ? save("mp_rank_00_model_states.pt") : first;
    faults_.Heal();
    Tree expected = before;
    if (failure.err == 0) {
      ASSERT_TRUE(first.ok()) << first.ToString();
      ASSERT_TRUE(second.ok()) << second.ToString();
      expected["global_step1/optim_states.pt"] = Digest(next);
      expected[kShard] = Digest(next);
      ExpectShownAfterRemount(std::move(mount), upper, expected);
      return;
    }
    ExpectFailure(first, failure.err, "global_step1/optim_states.pt");
    // The temporary is the trainer's to remove; everything else is as it was.
    for (const auto& [path, contents] : Shown(*mount)) {
      if (path.ends_with(".tmp")) expected[path] = contents;
    }
    ExpectShownAfterRemount(std::move(mount), upper, expected);
    EXPECT_EQ(testing::ReadFile(upper + "/global_step1/optim_states.pt"), saved);
  });
}

// A rename, an unlink or an rmdir that fails leaves both names as they
// were: the whiteouts and opaque marks they need are made first, and taken
// back if the change fails.
TEST_F(OverlayFaultsTest, FailedRenamesAndRemovalsChangeNothing) {
  struct Change {
    std::string name;
    Fault fault;
    std::function<Status(OverlayFs&)> run;
    std::string path;  // the error names it
  };
  auto rename = [](const char* from, const char* to) {
    return [from, to](OverlayFs& fs) {
      auto [from_dir, from_name] = SplitLast(from);
      auto [to_dir, to_name] = SplitLast(to);
      return fs.Rename(Find(fs, std::string(from_dir)), from_name, Find(fs, std::string(to_dir)),
                       to_name, 0);
    };
  };
  const std::vector<Change> changes = {
      {"rename: EIO", {.op = Op::kRename}, rename("latest", "latest.bak"), "latest.bak"},
      {"rename: ENOSPC for the old name's whiteout",
       {.op = Op::kOpen, .path_contains = ".wh.latest", .err = ENOSPC},
       rename("latest", "latest.bak"),
       "latest"},
      {"rename of a directory onto a removed view directory: ENOSPC for its opaque mark",
       {.op = Op::kOpen, .path_contains = ".wh..opq", .err = ENOSPC},
       rename("new_dir", "removed"),
       "new_dir"},
      {"unlink of a changed view file: ENOSPC for its whiteout",
       {.op = Op::kOpen, .path_contains = ".wh.mp_rank", .err = ENOSPC},
       [](OverlayFs& fs) {
         return fs.Unlink(Find(fs, "global_step1"), "mp_rank_00_model_states.pt");
       },
       kShard},
      {"unlink: EIO",
       {.op = Op::kUnlink, .times = 1},
       [](OverlayFs& fs) {
         return fs.Unlink(Find(fs, "global_step1"), "mp_rank_00_model_states.pt");
       },
       kShard},
      {"rmdir of a directory made where the view's was: EIO (its opaque mark removed first)",
       {.op = Op::kUnlink, .path_contains = "/old", .after = 1},
       [](OverlayFs& fs) { return fs.RemoveDir(kRootInode, "old"); },
       "old"},
  };
  ForEachCase(changes, [&](const Change& change, std::unique_ptr<OverlayFs> mount,
                           const std::string& upper) {
    // The state each change starts from: the shard changed (copied up), a
    // directory of the mount's own, the view's `old` removed and made again
    // (opaque: its file stays hidden), and a view directory `removed`
    // removed.
    const InodeId shard = Find(*mount, kShard);
    auto h = mount->Open(shard, O_WRONLY);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    ASSERT_TRUE(mount->Write(shard, *h, "changed", 0).ok());
    mount->Release(shard, *h);
    ASSERT_TRUE(mount->MakeDir(kRootInode, "new_dir", 0755).ok());
    ASSERT_TRUE(mount->Unlink(Find(*mount, "old"), "f").ok());
    ASSERT_TRUE(mount->RemoveDir(kRootInode, "old").ok());
    ASSERT_TRUE(mount->MakeDir(kRootInode, "old", 0755).ok());
    ASSERT_TRUE(mount->Unlink(Find(*mount, "removed"), "g").ok());
    ASSERT_TRUE(mount->RemoveDir(kRootInode, "removed").ok());
    const Tree before = Shown(*mount);

    faults_.Inject(change.fault);
    const Status s = change.run(*mount);
    faults_.Heal();
    ASSERT_FALSE(s.ok());
    ExpectFailure(s, change.fault.err, change.path);
    ExpectShownAfterRemount(std::move(mount), upper, before);
  });
}

}  // namespace
}  // namespace ucfs

#include "ucfs/mount/shared_index.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "ucfs/base/path.h"
#include "ucfs/base/write_env.h"
#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/checkpoint/checkpoint_layout.h"
#include "ucfs/checkpoint/parallel_checkpoint.h"
#include "ucfs/checkpoint/run_layout.h"
#include "ucfs/checkpoint/snapshot_env.h"
#include "ucfs/mount/source_env.h"
#include "ucfs/views/universal_view.h"

namespace ucfs {

namespace {

constexpr std::string_view kSuffix = ".ucfs-index";

std::string Trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

// `bytes` as `dir`/`name`, whole or not at all: a temporary file beside
// it, synced, renamed over it, the directory synced.
Status WriteAtomically(WriteEnv& writer, const std::string& dir, const std::string& name,
                       std::string_view bytes) {
  UCFS_ASSIGN_OR_RETURN(UniqueFd dir_fd, writer.OpenAt(AT_FDCWD, dir, O_RDONLY | O_DIRECTORY, 0));
  const std::string temp = "." + name + ".tmp." + std::to_string(::getpid());
  UCFS_ASSIGN_OR_RETURN(UniqueFd fd, writer.OpenAt(dir_fd.get(), temp,
                                                   O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  Status written = [&]() -> Status {
    uint64_t offset = 0;
    while (offset < bytes.size()) {
      UCFS_ASSIGN_OR_RETURN(size_t n, writer.Write(fd.get(), bytes.substr(offset), offset));
      if (n == 0) return Status::IOError("no progress writing " + JoinPath(dir, temp));
      offset += n;
    }
    UCFS_RETURN_IF_ERROR(writer.Sync(fd.get(), /*data_only=*/false));
    return writer.RenameAt(dir_fd.get(), temp, dir_fd.get(), name, 0);
  }();
  if (!written.ok()) {
    (void)writer.UnlinkAt(dir_fd.get(), temp, 0);
    return written;
  }
  return writer.Sync(dir_fd.get(), /*data_only=*/false);
}

}  // namespace

TagLocation TagAt(std::string root, std::string tag) {
  TagLocation where;
  where.tag_dir = JoinPath(root, tag);
  where.index_file = where.tag_dir + std::string(kSuffix);
  where.root = std::move(root);
  where.tag = std::move(tag);
  return where;
}

Result<TagLocation> LocateTag(Env& env, const std::string& path,
                              const std::optional<std::string>& tag) {
  TagLocation where;
  const std::string latest = JoinPath(path, "latest");
  if (auto stat = env.Stat(latest); stat.ok() && !stat->is_dir) {
    where.root = path;
    if (tag) {
      where.tag = *tag;
    } else {
      UCFS_ASSIGN_OR_RETURN(std::string named, env.ReadSmallFile(latest, 4096));
      where.tag = Trimmed(std::move(named));
    }
  } else {
    const auto [parent, name] = SplitLast(path);
    where.root = std::string(parent);
    where.tag = std::string(name);
  }
  if (where.tag.empty() || where.tag.find('/') != std::string::npos) {
    return Status::InvalidArgument(path + ": no tag to index ('" + where.tag + "')");
  }
  return TagAt(std::move(where.root), std::move(where.tag));
}

std::string IndexFileIn(const std::string& index_dir, const TagLocation& where) {
  uint64_t hash = 0xcbf29ce484222325u;  // FNV-1a
  for (const char c : where.tag_dir) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3u;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return JoinPath(index_dir, where.tag + "-" + hex + std::string(kSuffix));
}

Result<std::string> WriteSharedIndex(Env& host, const std::string& checkpoint,
                                     const std::optional<std::string>& tag,
                                     const std::optional<std::string>& index_dir) {
  UCFS_ASSIGN_OR_RETURN(CheckpointEnv source, OpenCheckpointEnv(host, checkpoint));
  UCFS_ASSIGN_OR_RETURN(TagLocation where, LocateTag(*source.env, source.path, tag));
  // Discovery as the universal view's mount makes it, recorded: of a
  // tensor- or pipeline-parallel grid, or of data-parallel ranks.
  auto recording = std::make_shared<RecordingEnv>(source.env, where.tag_dir);
  CheckpointOptions options;
  options.tag = tag;
  if (auto grid = ListParallelCheckpointFiles(*recording, source.path, tag);
      grid.ok() && grid->degrees.mp() > 1) {
    UCFS_ASSIGN_OR_RETURN(
        ParallelCheckpoint opened,
        ParallelCheckpoint::OpenListed(*recording, std::move(grid).value(), options));
    UCFS_RETURN_IF_ERROR(BuildUniversalView(*recording, std::make_shared<const ParallelCheckpoint>(
                                                            std::move(opened)))
                             .status());
  } else {
    UCFS_ASSIGN_OR_RETURN(Checkpoint opened, Checkpoint::Open(*recording, source.path, options));
    UCFS_RETURN_IF_ERROR(
        BuildUniversalView(*recording, std::make_shared<const Checkpoint>(std::move(opened)))
            .status());
  }
  UCFS_ASSIGN_OR_RETURN(FileStat before, source.env->Stat(where.tag_dir));
  UCFS_ASSIGN_OR_RETURN(TagSnapshot snapshot, recording->Snapshot(where.tag, before.identity));
  // The tag directory again: a save into it meanwhile would make the
  // snapshot a mix of two.
  UCFS_ASSIGN_OR_RETURN(FileStat after, source.env->Stat(where.tag_dir));
  if (!(PortableIdentity(after.identity) == snapshot.tag_dir_identity)) {
    return Status::Posix(EAGAIN, where.tag_dir +
                                     ": changed while it was indexed (a save in progress?); run "
                                     "`ucfs index` again when it is done");
  }
  const std::string index_file = index_dir ? IndexFileIn(*index_dir, where) : where.index_file;
  const auto [dir, name] = SplitLast(index_file);
  UCFS_RETURN_IF_ERROR(WriteAtomically(*host.Writer(), std::string(dir), std::string(name),
                                       EncodeTagSnapshot(snapshot))
                           .Annotate("writing the index " + index_file));
  return index_file;
}

std::shared_ptr<const TagSnapshot> ReadSharedIndex(Env& index_env, const std::string& index_file,
                                                   Env& source, const TagLocation& where,
                                                   std::string* note) {
  note->clear();
  auto file = index_env.Open(index_file);
  if (!file.ok()) {
    if (file.status().posix_errno() != ENOENT) {
      *note = index_file + ": " + file.status().message();
    }
    return nullptr;
  }
  // About 120 bytes a rank file, deflated (3.3 kB inflated): a larger file
  // is not one `ucfs index` wrote, and is not read into memory.
  constexpr uint64_t kMaxIndexBytes = uint64_t{1} << 30;
  if ((*file)->Size() > kMaxIndexBytes) {
    *note = index_file + ": " + std::to_string((*file)->Size()) +
            " bytes, more than an index of any checkpoint holds";
    return nullptr;
  }
  auto bytes = (*file)->ReadString(0, (*file)->Size());
  if (!bytes.ok()) {
    *note = bytes.status().ToString();
    return nullptr;
  }
  auto snapshot = DecodeTagSnapshot(*bytes);
  if (!snapshot.ok()) {
    *note = index_file + ": " + snapshot.status().message();
    return nullptr;
  }
  if (snapshot->tag != where.tag) {
    *note = index_file + ": an index of tag '" + snapshot->tag + "', not '" + where.tag + "'";
    return nullptr;
  }
  auto dir = source.Stat(where.tag_dir);
  if (!dir.ok() || !(PortableIdentity(dir->identity) == snapshot->tag_dir_identity)) {
    *note = index_file + ": made before " + where.tag_dir +
            " last changed; reading its rank files (run `ucfs index` again)";
    return nullptr;
  }
  return std::make_shared<const TagSnapshot>(std::move(snapshot).value());
}

FoundIndex FindSharedIndex(Env* index_env, const std::optional<std::string>& index_dir, Env& source,
                           const TagLocation& where, bool beside) {
  FoundIndex found;
  std::string note;
  if (index_dir && index_env != nullptr) {
    found.index_file = IndexFileIn(*index_dir, where);
    found.snapshot = ReadSharedIndex(*index_env, found.index_file, source, where, &note);
    if (!note.empty()) spdlog::info("{} (going on without it)", TerminalSafe(note));
  }
  if (!found.snapshot && beside) {
    found.index_file = where.index_file;
    found.snapshot = ReadSharedIndex(source, found.index_file, source, where, &note);
    if (!note.empty()) spdlog::info("{} (going on without it)", TerminalSafe(note));
  }
  return found;
}

std::function<std::optional<IndexedTag>(const std::string& root, const std::string& tag)>
SharedIndexFinder(std::shared_ptr<Env> source, std::shared_ptr<Env> index_env,
                  std::optional<std::string> index_dir) {
  return [source = std::move(source), index_env = std::move(index_env),
          index_dir = std::move(index_dir)](const std::string& root,
                                            const std::string& tag) -> std::optional<IndexedTag> {
    const TagLocation where = TagAt(root, tag);
    FoundIndex found = FindSharedIndex(index_env.get(), index_dir, *source, where, true);
    if (!found.snapshot) return std::nullopt;
    return IndexedTag{std::make_shared<SnapshotEnv>(source, where.tag_dir, found.snapshot),
                      std::move(found.snapshot), std::move(found.index_file)};
  };
}

Result<std::vector<TagIndexed>> WriteRunIndexes(Env& host, const std::string& run,
                                                const std::optional<std::string>& index_dir) {
  UCFS_ASSIGN_OR_RETURN(std::vector<RootListing> roots, FindRoots(host, run));
  std::vector<TagIndexed> out;
  for (const RootListing& root : roots) {
    for (const TagListing& tag : root.tags) {
      if (!tag.complete) continue;  // not served, so not indexed
      TagIndexed done;
      done.tag_dir = tag.dir;
      const TagLocation where = TagAt(root.dir, tag.name);
      done.index_file = index_dir ? IndexFileIn(*index_dir, where) : where.index_file;
      std::string note;
      if (ReadSharedIndex(host, done.index_file, host, where, &note) == nullptr) {
        auto written = WriteSharedIndex(host, root.dir, tag.name, index_dir);
        done.written = written.ok();
        if (!written.ok()) done.error = written.status();
      }
      out.push_back(std::move(done));
    }
  }
  return out;
}

}  // namespace ucfs

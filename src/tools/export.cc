#include "ucfs/tools/export.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "ucfs/base/parallel.h"
#include "ucfs/base/unique_fd.h"
#include "ucfs/vfs/source_files.h"

namespace ucfs {
namespace {

constexpr uint64_t kChunk = uint64_t{64} << 20;

std::string TempPathFor(const std::string& final_path) {
  const std::filesystem::path p(final_path);
  return (p.parent_path() / ("." + p.filename().string() + ".ucfs-export")).string();
}

// Whether copy_file_range answered `err` because this kernel or file
// system pair cannot copy, rather than because the copy failed.
bool CannotCopyInKernel(int err) {
  return err == EXDEV || err == EINVAL || err == ENOSYS || err == EOPNOTSUPP;
}

// Copies [in_off, +length) of `in` to `out` at `out_off` (the file of
// `what`): in the kernel where it can, else through a buffer; short copies
// and writes are gone on from where they stopped.
Status CopyRange(WriteEnv& writer, const RandomAccessFile& in, uint64_t in_off, int out,
                 uint64_t out_off, uint64_t length, const std::string& what) {
  static std::atomic<bool> kernel_copy{true};
  while (length > 0 && in.fd() >= 0 && kernel_copy.load(std::memory_order_relaxed)) {
    auto copied = writer.CopyRange(in.fd(), in_off, out, out_off, length);
    if (!copied.ok() && CannotCopyInKernel(copied.status().posix_errno())) {
      kernel_copy = false;  // buffer instead
      break;
    }
    if (!copied.ok()) return copied.status().WithFile(what);
    if (*copied == 0) return Status::Corruption(what + ": source ends early");
    in_off += *copied;
    out_off += *copied;
    length -= *copied;
  }
  std::string buf(std::min<uint64_t>(length, uint64_t{8} << 20), '\0');
  while (length > 0) {
    const size_t want = std::min<uint64_t>(length, buf.size());
    size_t got = 0;
    UCFS_RETURN_IF_ERROR(in.Read(in_off, want, buf.data(), &got));
    if (got == 0) return Status::Corruption(what + ": source ends early");
    UCFS_RETURN_IF_ERROR(
        writer.WriteAll(out, std::string_view(buf).substr(0, got), out_off).WithFile(what));
    in_off += got;
    out_off += got;
    length -= got;
  }
  return Status::OK();
}

// Makes directory `dir` and its missing parents (as mkdir -p).
Status MakeDirs(WriteEnv& writer, const std::filesystem::path& dir) {
  std::filesystem::path made;
  for (const auto& part : dir) {
    made /= part;
    if (part == "/" || part.empty()) continue;
    Status s = writer.MakeDirAt(AT_FDCWD, made.string(), 0777);
    if (!s.ok() && s.posix_errno() != EEXIST) return s.WithFile(made.string());
  }
  return Status::OK();
}

// One file being written: its temporary, and how many chunks are left.
struct Target {
  const ExportFile* file = nullptr;
  std::string final_path;
  std::string temp_path;
  UniqueFd fd;
  std::atomic<uint64_t> chunks_left{0};
  std::mutex mu;
  Status status;
};

// One chunk of a target's file: bytes [begin, end).
struct Task {
  Target* target;
  uint64_t begin, end;
};

// Already there from an earlier run: whole (it was renamed into place) and
// of this checkpoint (same size and mtime).
bool AlreadyExported(const std::string& final_path, const ExportFile& f) {
  struct stat st {};
  return ::stat(final_path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         static_cast<uint64_t>(st.st_size) == f.size && NanosOf(st.st_mtim) == f.mtime_ns;
}

// Creates t's directory and opens its temporary beside its final path.
Status OpenTemporary(WriteEnv& writer, Target& t) {
  UCFS_RETURN_IF_ERROR(MakeDirs(writer, std::filesystem::path(t.final_path).parent_path()));
  t.temp_path = TempPathFor(t.final_path);
  // Readable by whom the view's file is, and no one else: an export of a
  // 0600 checkpoint is not left for anyone to read.
  auto fd = writer.OpenAt(AT_FDCWD, t.temp_path, O_WRONLY | O_CREAT | O_TRUNC,
                          static_cast<mode_t>(t.file->mode & 0666));
  if (!fd.ok()) return fd.status().WithFile(t.final_path);
  t.fd = std::move(fd).value();
  return Status::OK();
}

// A link as a link (made aside and renamed into place, as files are), or
// left where an earlier run made it.
Status ExportLink(WriteEnv& writer, const std::string& out_dir, const ExportFile& f,
                  ExportStats* stats) {
  namespace fs = std::filesystem;
  const fs::path final_path = fs::path(out_dir) / f.path;
  std::error_code ec;
  if (fs::is_symlink(final_path, ec) && fs::read_symlink(final_path, ec).string() == *f.link) {
    ++stats->files_skipped;
    return Status::OK();
  }
  UCFS_RETURN_IF_ERROR(MakeDirs(writer, final_path.parent_path()));
  const std::string temp = TempPathFor(final_path.string());
  writer.UnlinkAt(AT_FDCWD, temp, 0);  // an earlier run's, if any
  UCFS_RETURN_IF_ERROR(writer.SymlinkAt(*f.link, AT_FDCWD, temp).WithFile(final_path.string()));
  if (Status s = writer.RenameAt(AT_FDCWD, temp, AT_FDCWD, final_path.string(), 0); !s.ok()) {
    writer.UnlinkAt(AT_FDCWD, temp, 0);
    return s.WithFile(final_path.string());
  }
  ++stats->files_written;
  return Status::OK();
}

// A target with its temporary, at its final size, for each of `files` not
// exported already, and the tasks that copy their chunks. On an error,
// *targets holds the temporaries made so far.
Status StartTargets(WriteEnv& writer, const std::string& out_dir,
                    const std::vector<ExportFile>& files, const ExportOptions& options,
                    ExportStats* stats, std::vector<std::unique_ptr<Target>>* targets,
                    std::vector<Task>* tasks) {
  for (const ExportFile& f : files) {
    if (f.link) {
      UCFS_RETURN_IF_ERROR(ExportLink(writer, out_dir, f, stats));
      continue;
    }
    auto t = std::make_unique<Target>();
    t->file = &f;
    t->final_path = (std::filesystem::path(out_dir) / f.path).string();
    if (AlreadyExported(t->final_path, f)) {
      ++stats->files_skipped;
      if (options.on_bytes) options.on_bytes(f.size);
      continue;
    }
    UCFS_RETURN_IF_ERROR(OpenTemporary(writer, *t));
    targets->push_back(std::move(t));
    Target* target = targets->back().get();
    // Zero pieces are left as holes: the size is set first.
    UCFS_RETURN_IF_ERROR(writer.Truncate(target->fd.get(), f.size).WithFile(target->final_path));
    const uint64_t chunks = std::max<uint64_t>(1, (f.size + kChunk - 1) / kChunk);
    target->chunks_left = chunks;
    for (uint64_t c = 0; c < chunks; ++c) {
      tasks->push_back(Task{target, c * kChunk, std::min(f.size, (c + 1) * kChunk)});
    }
  }
  return Status::OK();
}

// Closes and removes the targets' temporaries, returning `s`.
Status Abandon(WriteEnv& writer, const std::vector<std::unique_ptr<Target>>& targets, Status s) {
  for (const auto& t : targets) {
    t->fd.reset();
    writer.UnlinkAt(AT_FDCWD, t->temp_path, 0);
  }
  return s;
}

// Copies a task's chunk of the view's file into its temporary (planned
// into *pieces, a worker's reused buffer) unless the target failed
// already; the target's status keeps its first error.
void CopyChunk(WriteEnv& writer, View& view, SourceFiles& sources, const Task& task,
               std::vector<ReadPiece>* pieces) {
  Target& t = *task.target;
  Status s;
  {
    std::lock_guard lock(t.mu);
    s = t.status;
  }
  pieces->clear();
  if (s.ok()) s = view.Plan(t.file->inode, task.begin, task.end - task.begin, pieces);
  uint64_t at = task.begin;
  SourcesOfRead checked(sources);
  for (const ReadPiece& p : *pieces) {
    if (!s.ok()) break;
    if (p.kind == ReadPiece::Kind::kBytes) {
      s = writer.WriteAll(t.fd.get(), p.bytes, at).WithFile(t.final_path);
    } else if (p.kind == ReadPiece::Kind::kSource) {
      auto in = checked.Get(p.source);
      s = in.ok() ? CopyRange(writer, **in, p.offset, t.fd.get(), at, p.length, t.final_path)
                  : in.status();
    }
    at += p.length;
  }
  if (!s.ok()) {
    std::lock_guard lock(t.mu);
    if (t.status.ok()) t.status = s;
  }
}

// Once every chunk is written: the temporary synced (if asked), given the
// view's mtime and renamed into place, or removed if anything failed.
void FinishTarget(WriteEnv& writer, Target& t, const ExportOptions& options) {
  Status s;
  {
    std::lock_guard lock(t.mu);
    s = t.status;
  }
  if (s.ok() && options.sync) s = writer.Sync(t.fd.get(), false).WithFile(t.final_path);
  if (s.ok()) {
    const timespec times[2] = {{0, UTIME_OMIT}, TimespecOf(t.file->mtime_ns)};
    s = writer.SetTimesAt(t.fd.get(), "", times, 0).WithFile(t.final_path);
  }
  t.fd.reset();
  if (s.ok()) {
    s = writer.RenameAt(AT_FDCWD, t.temp_path, AT_FDCWD, t.final_path, 0).WithFile(t.final_path);
  }
  if (!s.ok()) writer.UnlinkAt(AT_FDCWD, t.temp_path, 0);
  std::lock_guard lock(t.mu);
  t.status = s;
}

}  // namespace

Result<std::vector<ExportFile>> ListExport(View& view, const std::vector<std::string>& roots) {
  std::vector<ExportFile> out;
  auto walk = [&](auto&& self, InodeId node, const std::string& path) -> Status {
    UCFS_ASSIGN_OR_RETURN(Attr attr, view.GetAttr(node));
    if (attr.is_symlink) {
      UCFS_ASSIGN_OR_RETURN(std::string target, view.ReadLink(node));
      out.push_back(ExportFile{path, node, 0, attr.mtime_ns, attr.mode, std::move(target)});
      return Status::OK();
    }
    if (!attr.is_dir) {
      out.push_back(ExportFile{path, node, attr.size, attr.mtime_ns, attr.mode, std::nullopt});
      return Status::OK();
    }
    UCFS_ASSIGN_OR_RETURN(auto entries, view.ReadDir(node));
    for (const auto& [name, child] : entries) {
      UCFS_RETURN_IF_ERROR(self(self, child.inode, path + "/" + name));
    }
    return Status::OK();
  };
  for (const std::string& root : roots) {
    InodeId node = kRootInode;
    for (std::string_view name : Components(root)) {
      auto child = view.Lookup(node, name);
      if (!child.ok()) return Status::NotFound(root + ": not in the view");
      node = *child;
    }
    UCFS_RETURN_IF_ERROR(walk(walk, node, root));
  }
  return out;
}

Result<ExportStats> Export(View& view, const std::string& out_dir,
                           const std::vector<ExportFile>& files, const ExportOptions& options) {
  WriteEnv& writer = options.writer != nullptr ? *options.writer : *Env::Posix()->Writer();
  ExportStats stats;
  std::vector<std::unique_ptr<Target>> targets;
  std::vector<Task> tasks;
  // A failure before the copying starts leaves no temporaries behind.
  if (Status s = StartTargets(writer, out_dir, files, options, &stats, &targets, &tasks); !s.ok()) {
    return Abandon(writer, targets, std::move(s));
  }

  SourceFiles sources(view);
  std::atomic<uint64_t> written{0};
  // Copying is I/O: more workers than CPUs keep the disks busy.
  const unsigned threads =
      options.threads != 0 ? options.threads : std::max(4u, std::thread::hardware_concurrency());
  std::vector<std::vector<ReadPiece>> plans(WorkerCount(tasks.size(), threads));
  ParallelFor(tasks.size(), threads, [&](size_t i, unsigned worker) {
    const Task& task = tasks[i];
    Target& t = *task.target;
    CopyChunk(writer, view, sources, task, &plans[worker]);
    written += task.end - task.begin;
    if (options.on_bytes) options.on_bytes(task.end - task.begin);
    if (t.chunks_left.fetch_sub(1) == 1) FinishTarget(writer, t, options);
  });

  for (const auto& t : targets) {
    if (!t->status.ok()) return t->status;
    ++stats.files_written;
  }
  stats.bytes_written = written;
  return stats;
}

}  // namespace ucfs

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

// Copies [in_off, +length) of `in` to `out` at `out_off`: in the kernel
// where it can, else through a buffer.
Status CopyRange(const RandomAccessFile& in, uint64_t in_off, int out, uint64_t out_off,
                 uint64_t length, const std::string& what) {
  static std::atomic<bool> kernel_copy{true};
  while (length > 0 && in.fd() >= 0 && kernel_copy.load(std::memory_order_relaxed)) {
    loff_t a = static_cast<loff_t>(in_off), b = static_cast<loff_t>(out_off);
    const ssize_t n = ::copy_file_range(in.fd(), &a, out, &b, length, 0);
    if (n > 0) {
      in_off += static_cast<uint64_t>(n);
      out_off += static_cast<uint64_t>(n);
      length -= static_cast<uint64_t>(n);
      continue;
    }
    if (n == 0) return Status::Corruption(what + ": source ends early");
    if (errno == EINTR) continue;
    if (errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) {
      kernel_copy = false;  // this kernel or file system pair cannot: buffer instead
      break;
    }
    return Status::LastErrno(what);
  }
  std::vector<char> buf(std::min<uint64_t>(length, uint64_t{8} << 20));
  while (length > 0) {
    const size_t want = std::min<uint64_t>(length, buf.size());
    size_t got = 0;
    UCFS_RETURN_IF_ERROR(in.Read(in_off, want, buf.data(), &got));
    if (got == 0) return Status::Corruption(what + ": source ends early");
    const auto n = static_cast<ssize_t>(got);
    for (ssize_t done = 0; done < n;) {
      const ssize_t w = ::pwrite(out, buf.data() + done, static_cast<size_t>(n - done),
                                 static_cast<off_t>(out_off) + done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return Status::LastErrno(what);
      done += w;
    }
    in_off += static_cast<uint64_t>(n);
    out_off += static_cast<uint64_t>(n);
    length -= static_cast<uint64_t>(n);
  }
  return Status::OK();
}

Status WriteAll(int fd, std::string_view bytes, uint64_t at, const std::string& what) {
  while (!bytes.empty()) {
    const ssize_t w = ::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(at));
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return Status::LastErrno(what);
    bytes.remove_prefix(static_cast<size_t>(w));
    at += static_cast<uint64_t>(w);
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
Status OpenTemporary(Target& t) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(fs::path(t.final_path).parent_path(), ec);
  if (ec) return Status::FromErrno(fs::path(t.final_path).parent_path().string(), ec.value());
  t.temp_path = TempPathFor(t.final_path);
  // Readable by whom the view's file is, and no one else: an export of a
  // 0600 checkpoint is not left for anyone to read.
  t.fd.reset(::open(t.temp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                    static_cast<mode_t>(t.file->mode & 0666)));
  if (!t.fd) return Status::LastErrno(t.temp_path);
  return Status::OK();
}

// A link as a link (made aside and renamed into place, as files are), or
// left where an earlier run made it.
Status ExportLink(const std::string& out_dir, const ExportFile& f, ExportStats* stats) {
  namespace fs = std::filesystem;
  const fs::path final_path = fs::path(out_dir) / f.path;
  std::error_code ec;
  if (fs::is_symlink(final_path, ec) && fs::read_symlink(final_path, ec).string() == *f.link) {
    ++stats->files_skipped;
    return Status::OK();
  }
  fs::create_directories(final_path.parent_path(), ec);
  if (ec) return Status::FromErrno(final_path.parent_path().string(), ec.value());
  const std::string temp = TempPathFor(final_path.string());
  ::unlink(temp.c_str());
  if (::symlink(f.link->c_str(), temp.c_str()) != 0) return Status::LastErrno(temp);
  if (::rename(temp.c_str(), final_path.c_str()) != 0) {
    Status s = Status::LastErrno(final_path.string());
    ::unlink(temp.c_str());
    return s;
  }
  ++stats->files_written;
  return Status::OK();
}

// A target with its temporary, at its final size, for each of `files` not
// exported already, and the tasks that copy their chunks. On an error,
// *targets holds the temporaries made so far.
Status StartTargets(const std::string& out_dir, const std::vector<ExportFile>& files,
                    const ExportOptions& options, ExportStats* stats,
                    std::vector<std::unique_ptr<Target>>* targets, std::vector<Task>* tasks) {
  for (const ExportFile& f : files) {
    if (f.link) {
      UCFS_RETURN_IF_ERROR(ExportLink(out_dir, f, stats));
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
    UCFS_RETURN_IF_ERROR(OpenTemporary(*t));
    targets->push_back(std::move(t));
    Target* target = targets->back().get();
    // Zero pieces are left as holes: the size is set first.
    if (::ftruncate(target->fd.get(), static_cast<off_t>(f.size)) != 0) {
      return Status::LastErrno(target->temp_path);
    }
    const uint64_t chunks = std::max<uint64_t>(1, (f.size + kChunk - 1) / kChunk);
    target->chunks_left = chunks;
    for (uint64_t c = 0; c < chunks; ++c) {
      tasks->push_back(Task{target, c * kChunk, std::min(f.size, (c + 1) * kChunk)});
    }
  }
  return Status::OK();
}

// Closes and removes the targets' temporaries, returning `s`.
Status Abandon(const std::vector<std::unique_ptr<Target>>& targets, Status s) {
  for (const auto& t : targets) {
    t->fd.reset();
    ::unlink(t->temp_path.c_str());
  }
  return s;
}

// Copies a task's chunk of the view's file into its temporary (planned
// into *pieces, a worker's reused buffer) unless the target failed
// already; the target's status keeps its first error.
void CopyChunk(View& view, SourceFiles& sources, const Task& task, std::vector<ReadPiece>* pieces) {
  Target& t = *task.target;
  Status s;
  {
    std::lock_guard lock(t.mu);
    s = t.status;
  }
  pieces->clear();
  if (s.ok()) s = view.Plan(t.file->inode, task.begin, task.end - task.begin, pieces);
  uint64_t at = task.begin;
  for (const ReadPiece& p : *pieces) {
    if (!s.ok()) break;
    if (p.kind == ReadPiece::Kind::kBytes) {
      s = WriteAll(t.fd.get(), p.bytes, at, t.temp_path);
    } else if (p.kind == ReadPiece::Kind::kSource) {
      auto in = sources.Get(p.source);
      s = in.ok() ? CopyRange(**in, p.offset, t.fd.get(), at, p.length, t.temp_path) : in.status();
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
void FinishTarget(Target& t, const ExportOptions& options) {
  Status s;
  {
    std::lock_guard lock(t.mu);
    s = t.status;
  }
  if (s.ok() && options.sync && ::fsync(t.fd.get()) != 0) s = Status::LastErrno(t.temp_path);
  if (s.ok()) {
    const timespec times[2] = {{0, UTIME_OMIT}, TimespecOf(t.file->mtime_ns)};
    if (::futimens(t.fd.get(), times) != 0) s = Status::LastErrno(t.temp_path);
  }
  t.fd.reset();
  if (s.ok() && ::rename(t.temp_path.c_str(), t.final_path.c_str()) != 0)
    s = Status::LastErrno(t.final_path);
  if (!s.ok()) ::unlink(t.temp_path.c_str());
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
  ExportStats stats;
  std::vector<std::unique_ptr<Target>> targets;
  std::vector<Task> tasks;
  // A failure before the copying starts leaves no temporaries behind.
  if (Status s = StartTargets(out_dir, files, options, &stats, &targets, &tasks); !s.ok()) {
    return Abandon(targets, std::move(s));
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
    CopyChunk(view, sources, task, &plans[worker]);
    written += task.end - task.begin;
    if (options.on_bytes) options.on_bytes(task.end - task.begin);
    if (t.chunks_left.fetch_sub(1) == 1) FinishTarget(t, options);
  });

  for (const auto& t : targets) {
    if (!t->status.ok()) return t->status;
    ++stats.files_written;
  }
  stats.bytes_written = written;
  return stats;
}

}  // namespace ucfs

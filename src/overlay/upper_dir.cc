#include "overlay/upper_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "ucfs/overlay/overlay.h"

namespace ucfs {

std::string StoredName(std::string_view name) {
  if (name.starts_with(kWhiteoutPrefix)) return std::string(kEscapedEntry) + std::string(name);
  return std::string(name);
}

std::string WhiteoutName(std::string_view name) {
  if (name.starts_with(kWhiteoutPrefix) || name == kOpaque.substr(kWhiteoutPrefix.size())) {
    return std::string(kEscapedWhiteout) + std::string(name);
  }
  return std::string(kWhiteoutPrefix) + std::string(name);
}

Stored Classify(std::string_view stored, std::string* name) {
  if (stored.starts_with(kEscapedEntry)) {
    *name = stored.substr(kEscapedEntry.size());
    return Stored::kEntry;
  }
  if (stored.starts_with(kEscapedWhiteout)) {
    *name = stored.substr(kEscapedWhiteout.size());
    return Stored::kWhiteout;
  }
  if (stored.starts_with(kPrivatePrefix) || stored == kOpaque) return Stored::kInternal;
  if (stored.starts_with(kWhiteoutPrefix)) {
    *name = stored.substr(kWhiteoutPrefix.size());
    return Stored::kWhiteout;
  }
  *name = stored;
  return Stored::kEntry;
}

bool StatAt(int dir, const std::string& name, struct stat* st) {
  struct stat ignored {};
  return ::fstatat(dir, name.c_str(), st != nullptr ? st : &ignored, AT_SYMLINK_NOFOLLOW) == 0;
}

Status Fail(int err, std::string_view path, std::string_view what) {
  return Status::Posix(err, std::string(path) + ": " + std::string(what));
}

Result<UniqueFd> OpenDirAt(int dir, const std::string& name, std::string_view what) {
  int fd = ::openat(dir, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return Status::LastErrno(what);
  return UniqueFd(fd);
}

UniqueFd Dup(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

Result<std::vector<UpperName>> ListUpper(int dir, std::string_view what, bool touch_atime) {
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  UniqueFd fd(touch_atime ? -1 : ::openat(dir, ".", kFlags | O_NOATIME));
  // O_NOATIME is the owner's (or CAP_FOWNER's): a daemon that is neither
  // reads as anyone would.
  if (!fd) fd.reset(::openat(dir, ".", kFlags));
  if (!fd) return Status::LastErrno(what);
  DIR* d = ::fdopendir(fd.get());
  if (d == nullptr) return Status::LastErrno(what);
  fd.release();  // the DIR's now
  std::vector<UpperName> out;
  while (struct dirent* e = ::readdir(d)) {
    std::string_view name(e->d_name);
    if (name == "." || name == "..") continue;
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_UNKNOWN) {
      struct stat st {};
      is_dir =
          ::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode);
    }
    out.push_back({std::string(name), is_dir});
  }
  ::closedir(d);
  return out;
}

Status CheckName(std::string_view path, std::string_view name) {
  if (name.size() > kMaxNameLength || StoredName(name).size() > kMaxNameLength) {
    return Fail(ENAMETOOLONG, path, "name too long");
  }
  return Status::OK();
}

void RemoveStaleCopyUps(WriteEnv& writer, int dir, int depth) {
  if (depth > 64) return;
  auto entries = ListUpper(dir, "upper");
  if (!entries.ok()) return;
  for (const auto& d : *entries) {
    if (d.is_dir) {
      auto sub = OpenDirAt(dir, d.stored, d.stored);
      if (sub.ok()) RemoveStaleCopyUps(writer, sub->get(), depth + 1);
    } else if (d.stored.starts_with(kCopyUpPrefix)) {
      writer.UnlinkAt(dir, d.stored, 0);  // best effort: the next Open tries again
    }
  }
}

Status MakeMarker(WriteEnv& writer, int dir, const std::string& name) {
  return writer.OpenAt(dir, name, O_WRONLY | O_CREAT | O_NOFOLLOW, 0644).status();
}

Status MarkOpaque(WriteEnv& writer, int dir, const std::string& name) {
  UCFS_ASSIGN_OR_RETURN(UniqueFd self, OpenDirAt(dir, name, name));
  struct stat before {};
  const bool stated = ::fstat(self.get(), &before) == 0;
  Status marked = MakeMarker(writer, self.get(), std::string(kOpaque));
  if (stated) RestoreTimes(writer, self.get(), before);
  return marked.WithFile(name);
}

bool IsOpaque(int dir, const std::string& name) {
  return StatAt(dir, name + "/" + std::string(kOpaque));
}

void RestoreTimes(WriteEnv& writer, int fd, const struct stat& before) {
  const timespec times[2] = {before.st_atim, before.st_mtim};
  // An O_PATH fd's own times are set through its /proc link.
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  writer.SetTimesAt(AT_FDCWD, self, times, 0);  // best effort
}

}  // namespace ucfs

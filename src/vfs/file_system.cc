#include "ucfs/vfs/file_system.h"

#include <unistd.h>

#include <cerrno>

namespace ucfs {

FileSystem::ViewFile::~ViewFile() {
  const int fd = copy_fd.load();
  if (fd >= 0) ::close(fd);
}

struct statvfs StatFsOf(const std::string& path) {
  struct statvfs sv {};
  if (path.empty() || ::statvfs(path.c_str(), &sv) != 0) {
    sv = {};
    sv.f_bsize = 4096;
    sv.f_frsize = 4096;
    sv.f_namemax = 255;
  }
  return sv;
}

Result<std::string> XattrValue(const std::vector<Xattr>& xattrs, const std::string& name) {
  for (const Xattr& x : xattrs) {
    if (x.name == name) return x.value;
  }
  return Status::Posix(ENODATA, name);
}

std::string XattrNames(const std::vector<Xattr>& xattrs) {
  std::string names;
  for (const Xattr& x : xattrs) {
    names += x.name;
    names.push_back('\0');
  }
  return names;
}

}  // namespace ucfs

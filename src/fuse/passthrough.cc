#include "fuse/passthrough.h"

#include <algorithm>

namespace ucfs::fuse {

int PassthroughTable::Start(InodeId inode, const FileSystem::Handle* handle,
                            std::optional<FileSystem::WholeFile> whole, int source_fd,
                            const Register& reg) {
  MutexLock lock(mu_);
  InodeIo& io = inodes_[inode];
  // An upper file open through passthrough that became set-id meanwhile:
  // the kernel allows its other opens no other way (and clears the bits on
  // a passthrough write as on a buffered one: file_remove_privs).
  if (!whole && io.passthrough > 0 && handle != nullptr && handle->fd >= 0) {
    whole = FileSystem::WholeFile{handle->fd, std::nullopt};
  }
  if (!whole || io.cached > 0 || (whole->source && source_fd < 0)) {
    ++io.cached;
    return 0;
  }
  if (io.passthrough == 0) {
    int id = 0;
    bool owned = false;
    if (whole->source) {
      auto [it, added] = sources_.try_emplace(*whole->source, 0);
      if (added) it->second = std::max(reg(source_fd), -1);
      id = it->second;
    } else {
      id = reg(whole->fd);
      owned = true;
    }
    if (id <= 0) {
      ++io.cached;
      return 0;
    }
    io.backing_id = id;
    io.owned = owned;
  }
  ++io.passthrough;
  handles_.insert(handle);
  return io.backing_id;
}

void PassthroughTable::End(InodeId inode, const FileSystem::Handle* handle,
                           const Unregister& unreg) {
  MutexLock lock(mu_);
  auto it = inodes_.find(inode);
  if (it == inodes_.end()) return;
  InodeIo& io = it->second;
  if (handles_.erase(handle) > 0) {
    if (--io.passthrough == 0 && io.owned) {
      unreg(io.backing_id);
      io.backing_id = 0;
      io.owned = false;
    }
  } else if (io.cached > 0) {
    --io.cached;
  }
  if (io.passthrough == 0 && io.cached == 0) inodes_.erase(it);
}

size_t PassthroughTable::passthrough_handles() {
  MutexLock lock(mu_);
  return handles_.size();
}

}  // namespace ucfs::fuse

#include "ucfs/vfs/lazy_content.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace ucfs {

Result<std::shared_ptr<const FileContent>> ContentCache::Get(const void* key,
                                                             const ContentFactory& make) {
  {
    MutexLock lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->content;
    }
  }
  UCFS_ASSIGN_OR_RETURN(std::shared_ptr<const FileContent> built, make());
  // Outside the lock: memory() walks the content.
  const uint64_t cost = std::max(built->memory(), kMinEntryBytes);
  MutexLock lock(mu_);
  ++builds_;
  auto it = index_.find(key);
  if (it != index_.end()) return it->second->content;  // another thread was first
  lru_.push_front({key, built, cost});
  index_[key] = lru_.begin();
  bytes_ += cost;
  while (bytes_ > max_bytes_ && lru_.size() > 1) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return built;
}

uint64_t ContentCache::bytes() {
  MutexLock lock(mu_);
  return bytes_;
}

size_t ContentCache::size() {
  MutexLock lock(mu_);
  return lru_.size();
}

uint64_t ContentCache::builds() {
  MutexLock lock(mu_);
  return builds_;
}

Result<std::shared_ptr<const FileContent>> LazyContent::Built() const {
  return cache_->Get(this, make_);
}

uint64_t LazyContent::size() const {
  std::call_once(sized_, [this] {
    auto built = Built();
    if (built.ok()) {
      size_ = (*built)->size();
    } else {
      spdlog::error("{}", TerminalSafe(built.status().message()));
    }
  });
  return size_;
}

Status LazyContent::Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const {
  UCFS_ASSIGN_OR_RETURN(std::shared_ptr<const FileContent> built, Built());
  const size_t first = out->size();
  UCFS_RETURN_IF_ERROR(built->Plan(offset, length, out));
  // The cache may drop `built` before the caller is done with the bytes.
  for (size_t i = first; i < out->size(); ++i) {
    if ((*out)[i].kind == ReadPiece::Kind::kBytes) (*out)[i].owner = built;
  }
  return Status::OK();
}

}  // namespace ucfs

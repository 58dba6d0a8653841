// Grafts: a directory of another view, built the first time it is looked
// into (view.h, src/design/run-directories.md).
#include <spdlog/spdlog.h>

#include <limits>

#include "ucfs/vfs/view.h"

namespace ucfs {
namespace {

constexpr uint32_t kUnmapped = std::numeric_limits<uint32_t>::max();
// Grafts a view may hold: their index takes the inode bits above kGraftShift.
constexpr size_t kMaxGrafts = size_t{1} << 23;

}  // namespace

Result<InodeId> View::AddGraft(InodeId parent, std::string_view name, GraftBuilder build,
                               int64_t mtime_ns, FileAccess access,
                               std::shared_ptr<const LazyTime> mtime_later) {
  WriterLock lock(mu_);
  UCFS_RETURN_IF_ERROR(
      AddGraftLocked(parent, name, std::move(build), mtime_ns, access, std::move(mtime_later)));
  return grafts_.back()->host_node;
}

Status View::AddGraftLocked(InodeId parent, std::string_view name, GraftBuilder build,
                            int64_t mtime_ns, FileAccess access,
                            std::shared_ptr<const LazyTime> mtime_later) {
  if (grafts_.size() >= kMaxGrafts) {
    return Status::InvalidArgument("more than " + std::to_string(kMaxGrafts) + " grafts");
  }
  auto graft = std::make_shared<Graft>();
  graft->build = std::move(build);
  graft->index = grafts_.size();
  Node n;
  n.is_dir = true;
  n.mtime_ns = mtime_ns;
  n.mtime_later = std::move(mtime_later);
  n.access = access;
  n.graft = graft;
  UCFS_ASSIGN_OR_RETURN(graft->host_node, AddNodeLocked(parent, name, std::move(n)));
  grafts_.push_back(std::move(graft));
  graft_sources_.emplace_back();
  return Status::OK();
}

bool View::HasGrafts() const {
  ReaderLock lock(mu_);
  return !grafts_.empty();
}

Result<View::Place> View::Locate(InodeId inode) {
  ReaderLock lock(mu_);
  const uint64_t k = inode >> kGraftShift;
  if (k == 0) {
    Node* n = Find(inode);
    if (n == nullptr) return Status::NotFound("no such inode");
    return Place{n->graft, 0};  // with a graft: that graft's own directory
  }
  if (k > grafts_.size()) return Status::NotFound("no such inode");
  return Place{grafts_[k - 1], inode & ((InodeId{1} << kGraftShift) - 1)};
}

Status View::Build(Graft& graft) {
  std::call_once(graft.built, [&graft] {
    Result<GraftTarget> target = graft.build();
    graft.build = nullptr;  // what it holds is no longer needed
    if (target.ok() && target->view == nullptr) {
      target = Status::InvalidArgument("a graft's builder made no view");
    } else if (target.ok() && target->view->HasGrafts()) {
      target = Status::InvalidArgument("a grafted view holds grafts of its own");
    } else if (target.ok()) {
      auto attr = target->view->GetAttr(target->dir);
      if (!attr.ok()) {
        target = attr.status();
      } else if (!attr->is_dir) {
        target = Status::InvalidArgument("a graft's builder made no directory");
      }
    }
    if (!target.ok()) {
      graft.status = target.status();
      spdlog::warn("{}", TerminalSafe(graft.status.message()));
      return;
    }
    graft.target = std::move(target).value();
  });
  return graft.status;
}

InodeId View::Encode(const Graft& graft, InodeId local) const {
  if (local == graft.target.dir) return graft.host_node;
  return (static_cast<InodeId>(graft.index + 1) << kGraftShift) | local;
}

Result<uint32_t> View::GraftSource(const Graft& graft, uint32_t local) {
  {
    ReaderLock lock(mu_);
    const std::vector<uint32_t>& mapped = graft_sources_[graft.index];
    if (local < mapped.size() && mapped[local] != kUnmapped) return mapped[local];
  }
  WriterLock lock(mu_);
  std::vector<uint32_t>& mapped = graft_sources_[graft.index];
  if (local >= mapped.size()) mapped.resize(static_cast<size_t>(local) + 1, kUnmapped);
  if (mapped[local] == kUnmapped) {
    if (sources_.size() >= kUnmapped) return Status::InvalidArgument("too many source files");
    // This view's lock, then the grafted view's: the lock order (view.h).
    // A grafted source does not count for this view's BuiltAccess.
    sources_.push_back(graft.target.view->source(local));
    mapped[local] = static_cast<uint32_t>(sources_.size() - 1);
  }
  return mapped[local];
}

Status View::PlanGrafted(const Place& place, uint64_t offset, uint64_t length,
                         std::vector<ReadPiece>* out) {
  UCFS_RETURN_IF_ERROR(Build(*place.graft));
  const size_t first = out->size();
  UCFS_RETURN_IF_ERROR(place.graft->target.view->Plan(place.local, offset, length, out));
  for (size_t i = first; i < out->size(); ++i) {
    ReadPiece& piece = (*out)[i];
    if (piece.kind != ReadPiece::Kind::kSource) continue;
    UCFS_ASSIGN_OR_RETURN(piece.source, GraftSource(*place.graft, piece.source));
  }
  return Status::OK();
}

}  // namespace ucfs

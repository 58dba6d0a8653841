#include "ucfs/vfs/view.h"

#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

namespace ucfs {
namespace {
constexpr uint32_t kNoOwner = static_cast<uint32_t>(-1);
}  // namespace

Status InlineContent::Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const {
  if (offset >= data_.size()) return Status::OK();
  const uint64_t n = std::min<uint64_t>(length, data_.size() - offset);
  ReadPiece p;
  p.kind = ReadPiece::Kind::kBytes;
  p.bytes = std::string_view(data_).substr(offset, n);
  p.length = n;
  out->push_back(p);
  return Status::OK();
}

Status SourceContent::Plan(uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) const {
  if (offset >= size_) return Status::OK();
  ReadPiece p;
  p.kind = ReadPiece::Kind::kSource;
  p.source = source_;
  p.offset = offset;
  p.length = std::min(length, size_ - offset);
  out->push_back(p);
  return Status::OK();
}

bool IsSafePathComponent(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

View::View(Env& env, int64_t mtime_ns) : env_(env), mtime_ns_(mtime_ns) {
  Node root;
  root.is_dir = true;
  root.parent = kRootInode;
  root.mtime_ns = mtime_ns;
  nodes_.push_back(std::move(root));
}

FileAccess StrictestAccess(const std::vector<FileAccess>& sources, FileAccess fallback) {
  if (sources.empty()) return fallback;
  FileAccess out{0777, sources[0].uid, sources[0].gid};
  for (const FileAccess& a : sources) {
    out.mode &= a.mode;
    if (a.uid != out.uid) out.uid = kNoOwner;
    if (a.gid != out.gid) out.gid = kNoOwner;
  }
  if (out.uid == kNoOwner) {
    out.uid = 0;
    out.mode &= ~0700u;
  }
  if (out.gid == kNoOwner) {
    out.gid = 0;
    out.mode &= ~0070u;
  }
  return out;
}

uint32_t View::AddSource(SourceFile source) {
  WriterLock lock(mu_);
  if (!source.path.empty()) source_access_.push_back(source.access);
  sources_.push_back(std::move(source));
  return static_cast<uint32_t>(sources_.size() - 1);
}

FileAccess View::BuiltAccess() const {
  ReaderLock lock(mu_);
  return BuiltAccessLocked();
}

FileAccess View::BuiltAccessLocked() const {
  return StrictestAccess(source_access_, FileAccess{0444, ::getuid(), ::getgid()});
}

void View::BackRootBy(std::string dir) {
  auto st = env_.Stat(dir);
  WriterLock lock(mu_);
  if (st.ok()) {
    // The root is the source's: its time too, not the newest rank file's.
    nodes_[0].access = st->access;
    nodes_[0].mtime_ns = st->identity.mtime_ns;
  }
  nodes_[0].source_dir = std::move(dir);
  nodes_[0].listed = false;
}

View::Node* View::Find(InodeId inode) {
  if (inode == 0 || inode > nodes_.size()) return nullptr;
  return &nodes_[inode - 1];
}

Result<InodeId> View::AddNodeLocked(InodeId parent, std::string_view name, Node node) {
  if (!IsSafePathComponent(name)) {
    return Status::InvalidArgument("'" + Printable(name) + "' is not a safe file name");
  }
  Node* p = Find(parent);
  if (p == nullptr || !p->is_dir) return Status::InvalidArgument("parent is not a directory");
  if (p->graft) return Status::InvalidArgument("a graft's contents are its view's");
  auto it = std::lower_bound(p->children.begin(), p->children.end(), name,
                             [](const auto& c, std::string_view n) { return c.first < n; });
  if (it != p->children.end() && it->first == name) {
    return Status::InvalidArgument("'" + Printable(name) + "' exists twice in one directory");
  }
  node.name = std::string(name);
  node.parent = parent;
  nodes_.push_back(std::move(node));
  const InodeId id = nodes_.size();
  p = Find(parent);  // deque growth keeps it valid; re-find for clarity
  p->children.insert(it, {std::string(name), id});
  return id;
}

Result<InodeId> View::AddDirectory(InodeId parent, std::string_view name) {
  WriterLock lock(mu_);
  Node n;
  n.is_dir = true;
  n.mtime_ns = mtime_ns_;
  return AddNodeLocked(parent, name, std::move(n));
}

Result<InodeId> View::AddFile(InodeId parent, std::string_view name,
                              std::shared_ptr<const FileContent> content,
                              std::vector<Xattr> xattrs) {
  WriterLock lock(mu_);
  Node n;
  n.content = std::move(content);
  n.mtime_ns = mtime_ns_;
  n.xattrs = std::move(xattrs);
  return AddNodeLocked(parent, name, std::move(n));
}

Result<InodeId> View::AddFileMadeFrom(InodeId parent, std::string_view name,
                                      std::shared_ptr<const FileContent> content,
                                      const std::string& from) {
  auto st = env_.Stat(from);
  WriterLock lock(mu_);
  Node n;
  n.content = std::move(content);
  n.mtime_ns = mtime_ns_;
  if (st.ok()) n.mtime_ns = st->identity.mtime_ns;
  return AddNodeLocked(parent, name, std::move(n));
}

Result<InodeId> View::AddSourceDirectory(InodeId parent, std::string_view name, std::string dir) {
  UCFS_ASSIGN_OR_RETURN(FileStat st, env_.Stat(dir));
  if (!st.is_dir) return Status::InvalidArgument(dir + ": not a directory");
  WriterLock lock(mu_);
  Node n;
  n.is_dir = true;
  n.source_dir = std::move(dir);
  n.listed = false;
  n.mtime_ns = st.identity.mtime_ns;
  n.access = st.access;
  return AddNodeLocked(parent, name, std::move(n));
}

Result<InodeId> View::AddSourceFile(InodeId parent, std::string_view name,
                                    const std::string& path) {
  UCFS_ASSIGN_OR_RETURN(FileStat st, env_.Stat(path));
  if (st.is_dir) return Status::InvalidArgument(path + ": a directory, not a file");
  WriterLock lock(mu_);
  sources_.push_back({path, st.identity, st.access});
  Node n;
  n.content =
      std::make_shared<SourceContent>(static_cast<uint32_t>(sources_.size() - 1), st.identity.size);
  n.mtime_ns = st.identity.mtime_ns;
  n.access = st.access;
  return AddNodeLocked(parent, name, std::move(n));
}

void View::DecorateSourceDirectories(SourceDirDecorator decorator) {
  decorator_ = std::move(decorator);
}

View::SourceListing View::ListSource(const std::string& dir) {
  SourceListing out;
  auto entries = env_.ListDir(dir);
  if (!entries.ok()) {
    out.status = entries.status();
    return out;
  }
  for (const auto& e : *entries) {
    if (e.is_symlink) {
      // Shown as the link it is, wherever it points.
      auto link = env_.ReadLink(JoinPath(dir, e.name));
      if (link.ok()) {
        out.entries.emplace_back(e.name, link->stat);
        out.links.emplace(e.name, std::move(link->target));
      }
      continue;
    }
    auto st = env_.Stat(JoinPath(dir, e.name));  // else vanished meanwhile: not shown
    if (st.ok()) out.entries.emplace_back(e.name, *st);
  }
  if (decorator_) out.extras = decorator_(dir, *entries);
  return out;
}

Status View::AddListingLocked(InodeId dir, SourceListing listing) {
  Node* d = Find(dir);
  d->listed = true;  // even on error: a vanished directory shows as empty
  UCFS_RETURN_IF_ERROR(listing.status);
  const std::string source_dir = d->source_dir;
  for (auto& g : listing.extras.grafts) {
    UCFS_RETURN_IF_ERROR(AddGraftLocked(dir, g.name, std::move(g.build), g.mtime_ns, g.access,
                                        std::move(g.mtime_later)));
  }
  for (auto& f : listing.extras.files) {
    UCFS_RETURN_IF_ERROR(AddExtraFileLocked(dir, std::move(f)));
  }
  // Families run to thousands of ranks: look names up, not along.
  std::unordered_map<std::string_view, const FileStat*> by_name;
  for (const auto& [name, st] : listing.entries) by_name.emplace(name, &st);
  for (const auto& c : listing.extras.copies) {
    auto found = by_name.find(c.of);
    // Vanished meanwhile, or a link (never read through).
    if (found == by_name.end() || found->second->is_dir || listing.links.contains(c.of)) continue;
    const FileStat* st = found->second;
    Node n;
    n.mtime_ns = st->identity.mtime_ns;
    n.access = st->access;
    sources_.push_back({JoinPath(source_dir, c.of), st->identity, st->access});
    n.content = std::make_shared<SourceContent>(static_cast<uint32_t>(sources_.size() - 1),
                                                st->identity.size);
    UCFS_RETURN_IF_ERROR(AddNodeLocked(dir, c.name, std::move(n)).status());
  }
  const std::unordered_set<std::string_view> hidden(listing.extras.hidden.begin(),
                                                    listing.extras.hidden.end());
  for (const auto& [name, st] : listing.entries) {
    if (hidden.contains(name)) continue;
    d = Find(dir);
    auto it = std::lower_bound(d->children.begin(), d->children.end(), name,
                               [](const auto& c, const std::string& n) { return c.first < n; });
    if (it != d->children.end() && it->first == name) continue;  // shadowed by a built entry
    const std::string path = JoinPath(source_dir, name);
    Node n;
    n.mtime_ns = st.identity.mtime_ns;
    n.access = st.access;
    if (auto link = listing.links.find(name); link != listing.links.end()) {
      n.link = link->second;
    } else if (st.is_dir) {
      n.is_dir = true;
      n.source_dir = path;
      n.listed = false;
    } else {
      sources_.push_back({path, st.identity, st.access});
      n.content = std::make_shared<SourceContent>(static_cast<uint32_t>(sources_.size() - 1),
                                                  st.identity.size);
    }
    UCFS_RETURN_IF_ERROR(AddNodeLocked(dir, name, std::move(n)).status());
  }
  return Status::OK();
}

Status View::AddExtraFileLocked(InodeId dir, SourceDirExtras::File f) {
  Node n;
  n.content = std::move(f.content);
  n.mtime_ns = f.mtime_ns;
  n.access = f.access;
  if (f.sources) {
    auto [it, added] = source_tables_.emplace(f.sources, static_cast<uint32_t>(sources_.size()));
    if (added) sources_.insert(sources_.end(), f.sources->begin(), f.sources->end());
    n.source_base = it->second;
  }
  return AddNodeLocked(dir, f.name, std::move(n)).status();
}

void View::UnlinkChildLocked(InodeId dir, std::string_view name) {
  Node* d = Find(dir);
  auto it = std::lower_bound(d->children.begin(), d->children.end(), name,
                             [](const auto& c, std::string_view n) { return c.first < n; });
  if (it != d->children.end() && it->first == name) d->children.erase(it);
}

Result<InodeId> View::MakeDirectories(std::string_view path) {
  InodeId cur = kRootInode;
  for (std::string_view name : Components(path)) {
    auto found = Lookup(cur, name);  // lists a source directory first
    if (!found.ok() && found.status().code() != Status::Code::kNotFound) return found.status();
    if (found.ok()) {
      if (*found >> kGraftShift) {
        return Status::InvalidArgument(std::string(path) + ": inside a graft");
      }
      UCFS_ASSIGN_OR_RETURN(Attr a, GetAttr(*found));
      if (!a.is_dir) return Status::InvalidArgument(std::string(path) + ": a file on the way");
      cur = *found;
      continue;
    }
    WriterLock lock(mu_);
    Node* p = Find(cur);
    auto it = std::lower_bound(p->children.begin(), p->children.end(), name,
                               [](const auto& c, std::string_view n) { return c.first < n; });
    if (it != p->children.end() && it->first == name) {  // made meanwhile
      cur = it->second;
      continue;
    }
    Node n;
    n.is_dir = true;
    n.mtime_ns = mtime_ns_;
    UCFS_ASSIGN_OR_RETURN(cur, AddNodeLocked(cur, name, std::move(n)));
  }
  return cur;
}

Status View::PutExtras(InodeId dir, SourceDirExtras extras) {
  UCFS_RETURN_IF_ERROR(EnsureListed(dir));
  WriterLock lock(mu_);
  Node* d = Find(dir);
  if (d == nullptr || !d->is_dir) return Status::InvalidArgument("not a directory");
  for (auto& g : extras.grafts) {
    UnlinkChildLocked(dir, g.name);
    UCFS_RETURN_IF_ERROR(AddGraftLocked(dir, g.name, std::move(g.build), g.mtime_ns, g.access,
                                        std::move(g.mtime_later)));
  }
  for (auto& f : extras.files) {
    UnlinkChildLocked(dir, f.name);
    UCFS_RETURN_IF_ERROR(AddExtraFileLocked(dir, std::move(f)));
  }
  return Status::OK();
}

Status View::EnsureListed(InodeId dir) {
  std::string source_dir;
  {
    ReaderLock lock(mu_);
    Node* d = Find(dir);
    if (d == nullptr) return Status::NotFound("no such inode");
    if (d->listed) return Status::OK();
    source_dir = d->source_dir;
  }
  SourceListing listing = ListSource(source_dir);
  WriterLock lock(mu_);
  Node* d = Find(dir);
  if (d->listed) return Status::OK();  // listed meanwhile
  return AddListingLocked(dir, std::move(listing));
}

View::NodeAttrs View::AttrsLocked(InodeId inode, const Node& n) const {
  NodeAttrs out;
  out.inode = inode;
  out.is_dir = n.is_dir;
  if (n.link) out.link_size = n.link->size();
  out.content = n.content;
  out.mtime_ns = n.mtime_ns;
  out.mtime_later = n.mtime_later;
  if (n.access) {
    out.access = *n.access;
  } else {
    out.access = BuiltAccessLocked();
    // Built files are data, never programs; built directories may be
    // searched by whoever may read them.
    out.access.mode &= 0666;
    if (n.is_dir) out.access.mode |= (out.access.mode & 0444) >> 2;
  }
  return out;
}

Attr View::AttrOf(const NodeAttrs& n) {
  Attr a;
  a.inode = n.inode;
  a.is_dir = n.is_dir;
  a.is_symlink = n.link_size.has_value();
  a.size = n.link_size ? *n.link_size : n.is_dir ? 0 : n.content->size();
  // Set-id bits never show: a mount is no place to gain privileges.
  a.mode = n.access.mode & 01777;
  a.uid = n.access.uid;
  a.gid = n.access.gid;
  a.mtime_ns = n.mtime_later ? n.mtime_later->Get() : n.mtime_ns;
  return a;
}

Result<InodeId> View::Lookup(InodeId parent, std::string_view name) {
  UCFS_ASSIGN_OR_RETURN(Place place, Locate(parent));
  if (place.graft) {
    UCFS_RETURN_IF_ERROR(Build(*place.graft));
    const GraftTarget& target = place.graft->target;
    UCFS_ASSIGN_OR_RETURN(InodeId child,
                          target.view->Lookup(place.local != 0 ? place.local : target.dir, name));
    return Encode(*place.graft, child);
  }
  UCFS_RETURN_IF_ERROR(EnsureListed(parent));
  ReaderLock lock(mu_);
  Node* p = Find(parent);
  if (!p->is_dir) return Status::InvalidArgument("not a directory");
  auto it = std::lower_bound(p->children.begin(), p->children.end(), name,
                             [](const auto& c, std::string_view n) { return c.first < n; });
  if (it == p->children.end() || it->first != name) {
    return Status::NotFound(std::string(name) + ": no such file or directory");
  }
  return it->second;
}

Result<Attr> View::GetAttr(InodeId inode) {
  if (inode >> kGraftShift) {
    UCFS_ASSIGN_OR_RETURN(Place place, Locate(inode));
    UCFS_RETURN_IF_ERROR(Build(*place.graft));
    UCFS_ASSIGN_OR_RETURN(Attr a, place.graft->target.view->GetAttr(place.local));
    a.inode = inode;
    return a;
  }
  NodeAttrs attrs;
  {
    ReaderLock lock(mu_);
    Node* n = Find(inode);
    if (n == nullptr) return Status::NotFound("no such inode");
    attrs = AttrsLocked(inode, *n);
  }
  return AttrOf(attrs);
}

Result<std::vector<std::pair<std::string, Attr>>> View::ReadDir(InodeId dir) {
  UCFS_ASSIGN_OR_RETURN(Place place, Locate(dir));
  if (place.graft) {
    UCFS_RETURN_IF_ERROR(Build(*place.graft));
    const GraftTarget& target = place.graft->target;
    UCFS_ASSIGN_OR_RETURN(auto entries,
                          target.view->ReadDir(place.local != 0 ? place.local : target.dir));
    for (auto& [name, attr] : entries) attr.inode = Encode(*place.graft, attr.inode);
    return entries;
  }
  UCFS_RETURN_IF_ERROR(EnsureListed(dir));
  std::vector<std::pair<std::string, NodeAttrs>> children;
  {
    ReaderLock lock(mu_);
    Node* d = Find(dir);
    if (!d->is_dir) return Status::InvalidArgument("not a directory");
    children.reserve(d->children.size());
    for (const auto& [name, id] : d->children) {
      children.emplace_back(name, AttrsLocked(id, *Find(id)));
    }
  }
  std::vector<std::pair<std::string, Attr>> out;
  out.reserve(children.size());
  for (const auto& [name, attrs] : children) out.emplace_back(name, AttrOf(attrs));
  return out;
}

Result<std::string> View::ReadLink(InodeId inode) {
  if (inode >> kGraftShift) return Status::InvalidArgument("not a symbolic link");
  ReaderLock lock(mu_);
  Node* n = Find(inode);
  if (n == nullptr) return Status::NotFound("no such inode");
  if (!n->link) return Status::InvalidArgument("not a symbolic link");
  return *n->link;
}

Status View::Plan(InodeId file, uint64_t offset, uint64_t length, std::vector<ReadPiece>* out) {
  if (file >> kGraftShift) {
    UCFS_ASSIGN_OR_RETURN(Place place, Locate(file));
    return PlanGrafted(place, offset, length, out);
  }
  std::shared_ptr<const FileContent> content;
  std::optional<uint32_t> base;
  {
    ReaderLock lock(mu_);
    Node* n = Find(file);
    if (n == nullptr) return Status::NotFound("no such inode");
    if (n->is_dir) return Status::InvalidArgument("is a directory");
    if (n->link) return Status::InvalidArgument("a symbolic link");
    content = n->content;
    base = n->source_base;
  }
  const size_t first = out->size();
  UCFS_RETURN_IF_ERROR(content->Plan(offset, length, out));
  if (base) {
    for (size_t i = first; i < out->size(); ++i) {
      if ((*out)[i].kind == ReadPiece::Kind::kSource) (*out)[i].source += *base;
    }
  }
  return Status::OK();
}

Result<std::optional<uint32_t>> View::WholeSource(InodeId file) {
  constexpr std::optional<uint32_t> kNone;
  if (file >> kGraftShift) {
    UCFS_ASSIGN_OR_RETURN(Place place, Locate(file));
    UCFS_RETURN_IF_ERROR(Build(*place.graft));
    UCFS_ASSIGN_OR_RETURN(auto local, place.graft->target.view->WholeSource(place.local));
    if (!local) return kNone;
    UCFS_ASSIGN_OR_RETURN(uint32_t index, GraftSource(*place.graft, *local));
    return std::optional<uint32_t>(index);
  }
  std::shared_ptr<const FileContent> content;
  std::optional<uint32_t> base;
  {
    ReaderLock lock(mu_);
    Node* n = Find(file);
    if (n == nullptr) return Status::NotFound("no such inode");
    if (n->is_dir || n->link) return kNone;
    content = n->content;
    base = n->source_base;
  }
  std::optional<uint32_t> index = content->WholeSource();
  if (!index) return kNone;
  if (base) *index += *base;
  // A content shorter or longer than its source (none is made so) would
  // show other bytes than the file's.
  if (content->size() != source(*index).identity.size) return kNone;
  return index;
}

Result<std::vector<Xattr>> View::Xattrs(InodeId inode) {
  if (inode >> kGraftShift) {
    UCFS_ASSIGN_OR_RETURN(Place place, Locate(inode));
    UCFS_RETURN_IF_ERROR(Build(*place.graft));
    return place.graft->target.view->Xattrs(place.local);
  }
  ReaderLock lock(mu_);
  Node* n = Find(inode);
  if (n == nullptr) return Status::NotFound("no such inode");
  return n->xattrs;
}

SourceFile View::source(uint32_t index) const {
  ReaderLock lock(mu_);
  return sources_[index];
}

}  // namespace ucfs

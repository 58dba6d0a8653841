#include "ucfs/vfs/source_files.h"

#include <spdlog/spdlog.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <utility>

namespace ucfs {

SourceFiles::SourceFiles(Env& env, std::function<SourceFile(uint32_t)> source)
    : env_(env), source_(std::move(source)) {}

SourceFiles::SourceFiles(const View& view)
    : SourceFiles(view.env(), [&view](uint32_t i) { return view.source(i); }) {}

Status SourceFiles::Changed(uint32_t index, const SourceFile& src, const FileIdentity& now) {
  std::string what;
  FileIdentity same_place = now;  // which file, not what is in it
  same_place.size = src.identity.size;
  same_place.mtime_ns = src.identity.mtime_ns;
  same_place.ctime_ns = src.identity.ctime_ns;
  if (!StillSameFile(src.identity, same_place)) {
    what = "replaced";
  } else if (now.size != src.identity.size) {
    what = "size " + std::to_string(src.identity.size) + " -> " + std::to_string(now.size);
  } else {
    what = "modified in place";
  }
  Status status =
      Status::Posix(EIO, "changed since the checkpoint was read (" + what +
                             "); the bytes it had are gone, so reads that need it fail — remount "
                             "or start again")
          .WithFile(src.path);
  std::once_flag* reported = nullptr;
  {
    ReaderLock lock(mu_);
    reported = &entries_[index].reported;
  }
  std::call_once(*reported, [&] { spdlog::error("{}", TerminalSafe(status.message())); });
  return status;
}

Result<const RandomAccessFile*> SourceFiles::Get(uint32_t index) {
  const RandomAccessFile* file = nullptr;
  FileIdentity expected;
  std::optional<Result<FileStat>> checked;
  {
    ReaderLock lock(mu_);
    if (index < entries_.size() && entries_[index].file) {
      file = entries_[index].file.get();
      expected = entries_[index].expected;
    }
  }
  if (file == nullptr) {
    const SourceFile src = source_(index);
    if (src.path.empty()) {
      return Status::Posix(EIO, "source file " + std::to_string(index) + " has no path");
    }
    auto opened = env_.Open(src.path);
    if (!opened.ok()) {
      spdlog::error("{}", TerminalSafe(opened.status().message()));
      return Status::Posix(EIO, opened.status().message()).WithFile(src.path);
    }
    WriterLock lock(mu_);
    while (entries_.size() <= index) entries_.emplace_back();
    Entry& e = entries_[index];
    if (!e.file) {  // else another thread opened it meanwhile; ours closes
      e.file = std::move(opened).value();
      e.expected = src.identity;
      // Checked as it was opened, an instant ago: an fstat less per source
      // file, each a round trip on a shared file system.
      checked = e.file->OpenedStat();
    }
    file = e.file.get();
    expected = e.expected;
  }
  auto now = checked ? std::move(*checked) : file->Stat();
  if (!now.ok()) return Status::Posix(EIO, now.status().message()).WithFile(file->path());
  if (!StillSameFile(expected, now->identity)) return Changed(index, source_(index), now->identity);
  return file;
}

Status SourceFiles::Read(const std::vector<ReadPiece>& pieces, std::string* out) {
  SourcesOfRead sources(*this);
  for (const ReadPiece& p : pieces) {
    switch (p.kind) {
      case ReadPiece::Kind::kBytes:
        out->append(p.bytes);
        break;
      case ReadPiece::Kind::kZeros:
        out->append(p.length, '\0');
        break;
      case ReadPiece::Kind::kSource: {
        UCFS_ASSIGN_OR_RETURN(const RandomAccessFile* file, sources.Get(p.source));
        const size_t at = out->size();
        out->resize(at + p.length);
        UCFS_RETURN_IF_ERROR(file->ReadExact(p.offset, p.length, out->data() + at));
        break;
      }
    }
  }
  return Status::OK();
}

Result<const RandomAccessFile*> SourcesOfRead::Get(uint32_t index) {
  if (auto it = checked_.find(index); it != checked_.end()) return it->second;
  UCFS_ASSIGN_OR_RETURN(const RandomAccessFile* file, files_.Get(index));
  checked_.emplace(index, file);
  return file;
}

Result<uint32_t> SourceFiles::Crc32(const std::vector<ReadPiece>& pieces) {
  constexpr uint64_t kChunk = uint64_t{4} << 20;
  uLong crc = crc32(0, nullptr, 0);
  std::string chunk;
  for (const ReadPiece& p : pieces) {
    for (uint64_t done = 0; done < p.length; done += kChunk) {
      ReadPiece part = p;
      part.length = std::min(kChunk, p.length - done);
      if (p.kind == ReadPiece::Kind::kBytes) part.bytes = p.bytes.substr(done, part.length);
      if (p.kind == ReadPiece::Kind::kSource) part.offset = p.offset + done;
      chunk.clear();
      UCFS_RETURN_IF_ERROR(Read({part}, &chunk));
      crc =
          crc32(crc, reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(chunk.size()));
    }
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace ucfs

// The shared index's file: a snapshot of what discovery asks of one tag
// directory (its listings, its files' stats, the small files it reads
// whole, every rank file's summary), written once by `ucfs index` beside
// the tag and read by every node's mount instead of asking the shared file
// system again (src/design/shared-index.md).
//
// Paths are relative to the tag directory, so a snapshot serves the tag
// wherever a node has it mounted. Identities carry no device: a parallel
// file system's st_dev is each node's own.
#ifndef UCFS_CHECKPOINT_TAG_SNAPSHOT_H_
#define UCFS_CHECKPOINT_TAG_SNAPSHOT_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"

namespace ucfs {

struct TagSnapshot {
  // 2: the entries deflated (1, the same entries as they are, still read).
  static constexpr uint32_t kFormatVersion = 2;
  // The tag directory's name, and what it was when the snapshot was made:
  // a mount uses the snapshot only while the directory is the same
  // (inode, mtime, ctime; device not compared).
  std::string tag;
  FileIdentity tag_dir_identity;
  // Keyed by path relative to the tag directory ("" for the directory
  // itself, "zero_pp_rank_0_mp_rank_00_optim_states.pt").
  std::map<std::string, std::vector<DirEntry>> listings;
  std::map<std::string, FileStat> stats;
  std::map<std::string, std::string> files;      // whole contents
  std::map<std::string, std::string> summaries;  // EncodeSummary of each rank file
};

// The file's bytes: magic, format version, the entries' length, the
// entries deflated (zlib), and a CRC-32 of all before it.
std::string EncodeTagSnapshot(const TagSnapshot& snapshot);
// Corruption saying what is wrong (not a snapshot, another format version,
// truncated, a checksum mismatch, a field out of bounds); never reads past
// `bytes`.
Result<TagSnapshot> DecodeTagSnapshot(std::string_view bytes);

// `identity` without what differs between nodes seeing one file (the
// device).
FileIdentity PortableIdentity(FileIdentity identity);

}  // namespace ucfs

#endif  // UCFS_CHECKPOINT_TAG_SNAPSHOT_H_

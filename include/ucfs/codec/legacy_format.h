// torch.save's legacy (non-zip) format: pickles back to back, then raw
// storages.
//
// torch writes it with `_use_new_zipfile_serialization=False` (DeepSpeed
// >= 0.17.1 does with "checkpoint_serialization": false). The file is
//   pickle(magic number 0x1950a86a20f9469cfc6c), pickle(protocol 1001),
//   pickle(sys_info: little_endian, type sizes), the object pickle,
//   pickle(sorted list of storage keys),
//   then per key in that order: an 8-byte little-endian element count and
//   the storage's raw bytes.
// The object pickle names storages by persistent ids
// ('storage', torch.<Type>Storage, key, location, numel, view_metadata).
// Every storage's bytes are one contiguous range of the file, so the legacy
// format maps onto the same records as the zip container: ReadLegacyArchive
// returns the object pickle and one record per storage ("<prefix>/data/<key>")
// whose data_offset is where its bytes start.
#ifndef UCFS_CODEC_LEGACY_FORMAT_H_
#define UCFS_CODEC_LEGACY_FORMAT_H_

#include <string>
#include <vector>

#include "ucfs/base/env.h"
#include "ucfs/base/status.h"
#include "ucfs/codec/zip.h"

namespace ucfs {

// The top folder name given to a legacy file's records.
inline constexpr std::string_view kLegacyPrefix = "legacy";

struct LegacyArchive {
  std::string pickle;              // the object pickle (what data.pkl is in a zip)
  std::vector<ZipRecord> records;  // one stored record per storage, in file order
};

// Whether the file starts like a pickle (torch.load's test for the legacy
// format: not a zip, not a tar).
bool LooksLikeLegacyTorchFile(std::string_view head);

// Reads the pickles and storage headers of a legacy torch.save file. Errors
// name the file: a bad magic number or protocol, a big-endian writer, storage
// views (torch < 1.0 files), a storage the pickle does not describe, counts
// that disagree, storages running past the end, trailing bytes.
Result<LegacyArchive> ReadLegacyArchive(const RandomAccessFile& file);

}  // namespace ucfs

#endif  // UCFS_CODEC_LEGACY_FORMAT_H_

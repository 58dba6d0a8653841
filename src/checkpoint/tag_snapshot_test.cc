#include "ucfs/checkpoint/tag_snapshot.h"

#include <gtest/gtest.h>
#include <zlib.h>

namespace ucfs {
namespace {

TagSnapshot Sample() {
  TagSnapshot s;
  s.tag = "global_step4";
  s.tag_dir_identity = FileIdentity{4096, 1700000000123456789, 1700000000223456789, 77, 0};
  s.listings[""] = {{"zero_pp_rank_0_mp_rank_00_optim_states.pt", false, false},
                    {"sub", true, false},
                    {"link", true, true}};
  s.listings["sub"] = {};
  FileStat stat;
  stat.identity = FileIdentity{123, 5, 6, 78, 0};
  stat.access = FileAccess{0640, 1000, 100};
  s.stats["zero_pp_rank_0_mp_rank_00_optim_states.pt"] = stat;
  stat.is_dir = true;
  stat.access.mode = 0755;
  s.stats["sub"] = stat;
  s.files["ds_config.json"] = "{\"train_batch_size\": 4}";
  s.summaries["zero_pp_rank_0_mp_rank_00_optim_states.pt"] = std::string("\x03summary\0bytes", 14);
  return s;
}

// The file's checksum recomputed after a change, so that the change itself
// is what the decoder meets.
std::string Resealed(std::string bytes) {
  bytes.resize(bytes.size() - 4);
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(bytes.data()),
                          static_cast<uInt>(bytes.size()));
  for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
  return bytes;
}

// The file at format version 1 (its entries as they are), whose fields a
// test can reach at fixed offsets: magic, version, then the entries.
std::string AsVersion1(const std::string& bytes) {
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= uint64_t{static_cast<unsigned char>(bytes[16 + i])} << (8 * i);
  std::string entries(length, '\0');
  uLongf got = static_cast<uLongf>(length);
  const std::string deflated = bytes.substr(24, bytes.size() - 28);
  EXPECT_EQ(uncompress(reinterpret_cast<Bytef*>(entries.data()), &got,
                       reinterpret_cast<const Bytef*>(deflated.data()),
                       static_cast<uLong>(deflated.size())),
            Z_OK);
  std::string v1 = bytes.substr(0, 8) + std::string("\x01\0\0\0\0\0\0\0", 8) + entries + "crc!";
  return Resealed(v1);
}

// `bytes` with the little-endian u64 at `at` set to `value`.
std::string WithU64(std::string bytes, size_t at, uint64_t value) {
  for (int i = 0; i < 8; ++i) bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xff);
  return bytes;
}

void ExpectRefused(const std::string& bytes, const std::string& what) {
  auto d = DecodeTagSnapshot(bytes);
  ASSERT_FALSE(d.ok()) << what;
  EXPECT_EQ(d.status().code(), Status::Code::kCorruption);
  EXPECT_NE(d.status().message().find(what), std::string::npos) << d.status().ToString();
}

TEST(TagSnapshot, RoundTrips) {
  const TagSnapshot s = Sample();
  const std::string bytes = EncodeTagSnapshot(s);
  auto d = DecodeTagSnapshot(bytes);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->tag, s.tag);
  EXPECT_EQ(d->tag_dir_identity, s.tag_dir_identity);
  ASSERT_EQ(d->listings.size(), 2u);
  ASSERT_EQ(d->listings.at("").size(), 3u);
  EXPECT_EQ(d->listings.at("")[2].name, "link");
  EXPECT_TRUE(d->listings.at("")[2].is_dir && d->listings.at("")[2].is_symlink);
  EXPECT_FALSE(d->listings.at("")[0].is_dir);
  const FileStat& rank = d->stats.at("zero_pp_rank_0_mp_rank_00_optim_states.pt");
  EXPECT_EQ(rank.identity, (FileIdentity{123, 5, 6, 78, 0}));
  EXPECT_EQ(rank.access, (FileAccess{0640, 1000, 100}));
  EXPECT_FALSE(rank.is_dir);
  EXPECT_TRUE(d->stats.at("sub").is_dir);
  EXPECT_EQ(d->files, s.files);
  EXPECT_EQ(d->summaries, s.summaries);
  EXPECT_EQ(EncodeTagSnapshot(*d),
            bytes);  // the same bytes again: `ucfs index` twice writes one file
}

// Version 1, the entries not deflated, is still read, to the same snapshot.
TEST(TagSnapshot, Version1IsRead) {
  const std::string bytes = EncodeTagSnapshot(Sample());
  const std::string v1 = AsVersion1(bytes);
  EXPECT_GT(v1.size(), bytes.size());
  auto d = DecodeTagSnapshot(v1);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(EncodeTagSnapshot(*d), bytes);
}

// The deflated entries, sealed by their writer but wrong: their length
// claimed otherwise, cut, followed by more, or claimed past any index.
TEST(TagSnapshot, WellSealedBadDeflateIsRefused) {
  const std::string bytes = EncodeTagSnapshot(Sample());
  uint64_t length = 0;
  for (int i = 0; i < 8; ++i)
    length |= uint64_t{static_cast<unsigned char>(bytes[16 + i])} << (8 * i);
  ExpectRefused(Resealed(WithU64(bytes, 16, length + 1)), "not the " + std::to_string(length + 1));
  ExpectRefused(Resealed(WithU64(bytes, 16, length - 1)), "inflate past the");
  ExpectRefused(Resealed(WithU64(bytes, 16, uint64_t{1} << 40)), "claimed");
  std::string cut = bytes.substr(0, bytes.size() - 10) + "crc!";
  ExpectRefused(Resealed(cut), "cut short");
  std::string more = bytes.substr(0, bytes.size() - 4) + "more" + "crc!";
  ExpectRefused(Resealed(more), "bytes after its entries");
  std::string garbled = bytes;
  garbled[24] = static_cast<char>(garbled[24] ^ 0xff);  // the zlib header
  ExpectRefused(Resealed(garbled), "do not inflate");
}

TEST(TagSnapshot, NoDeviceTravels) {
  FileIdentity local{1, 2, 3, 4, 2049};
  EXPECT_EQ(PortableIdentity(local), (FileIdentity{1, 2, 3, 4, 0}));
}

// Every cut and every flipped byte is refused, by the checksum or before it.
TEST(TagSnapshot, DamageIsRefused) {
  const std::string bytes = EncodeTagSnapshot(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeTagSnapshot(bytes.substr(0, n)).ok()) << "cut at " << n;
  }
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x20);
    EXPECT_FALSE(DecodeTagSnapshot(flipped).ok()) << "byte " << i;
  }
  ExpectRefused("not an index at all", "no UCFS-IDX magic");
  ExpectRefused(bytes.substr(0, bytes.size() - 1) + "x", "checksum");
}

// What the checksum cannot catch, because the writer sealed it: another
// version, a count past the end, an unknown kind, a path twice, bytes left.
TEST(TagSnapshot, WellSealedNonsenseIsRefused) {
  const std::string bytes = AsVersion1(EncodeTagSnapshot(Sample()));
  std::string v9 = bytes;
  v9[8] = 9;
  ExpectRefused(Resealed(v9), "format version 9, this ucfs reads 1 to 2");
  // The entry count: after magic, version, the tag and the identity.
  const size_t count_at = 8 + 8 + 8 + Sample().tag.size() + 32;
  std::string many = bytes;
  many[count_at + 6] = 1;
  ExpectRefused(Resealed(many), "more entries than the file holds");
  std::string kind = bytes;
  kind[count_at + 8] = 9;  // the first entry's kind
  ExpectRefused(Resealed(kind), "unknown kind 9");
  std::string short_count = bytes;
  // The count one less than the entries: the last entry is left over.
  short_count[count_at] = static_cast<char>(short_count[count_at] - 1);
  ExpectRefused(Resealed(short_count), "bytes after the last entry");
  // One path recorded twice as a file: a snapshot of one file per path.
  TagSnapshot one;
  one.files["a"] = "x";
  std::string twice = AsVersion1(EncodeTagSnapshot(one));
  twice.resize(twice.size() - 4);
  const size_t entry_at = 8 + 8 + 8 + 32 + 8;  // empty tag
  twice += twice.substr(entry_at);
  twice[entry_at - 8] = 2;
  ExpectRefused(Resealed(twice + "crc!"), "recorded twice");
}

}  // namespace
}  // namespace ucfs

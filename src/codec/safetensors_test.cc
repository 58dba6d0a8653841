#include "ucfs/codec/safetensors.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace ucfs {
namespace {

// The header and the data laid after it parse with a strict reader (the
// length, offsets tiling the data in order, nothing left over), keys in
// the order given, the data 8-aligned as Hugging Face's writer pads it.
TEST(Safetensors, HeaderAsTheReferenceWriterLaysItOut) {
  const std::vector<SafetensorsEntry> entries = {
      {"z.weight", DType::kBFloat16, {2, 3}, 12},
      {"a.bias", DType::kFloat32, {3}, 12},
      {"scalar", DType::kInt64, {}, 8},
  };
  auto header = MakeSafetensorsHeader(entries);
  ASSERT_TRUE(header.ok()) << header.status().ToString();
  EXPECT_EQ(header->data_starts, (std::vector<uint64_t>{0, 12, 24}));
  EXPECT_EQ(header->data_size, 32u);
  EXPECT_EQ(header->bytes.size() % 8, 0u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(header->bytes[i]);
  EXPECT_EQ(n, header->bytes.size() - 8);
  const std::string data = std::string(12, 'z') + std::string(12, 'a') + std::string(8, 's');
  const auto parsed = testing::ParseSafetensors(header->bytes + data);
  ASSERT_EQ(parsed.size(), 3u);
  EXPECT_EQ(parsed.at("z.weight").dtype, "BF16");
  EXPECT_EQ(parsed.at("z.weight").shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(parsed.at("a.bias").bytes, std::string(12, 'a'));
  EXPECT_EQ(parsed.at("scalar").shape, std::vector<int64_t>{});
  const auto json = nlohmann::ordered_json::parse(header->bytes.substr(8));
  std::vector<std::string> keys;
  for (const auto& [key, value] : json.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"__metadata__", "z.weight", "a.bias", "scalar"}));
  EXPECT_EQ(json["__metadata__"]["format"], "pt");
}

TEST(Safetensors, RefusesWhatItCannotName) {
  auto complex = MakeSafetensorsHeader({{"rope.freqs", DType::kComplex64, {4}, 32}});
  ASSERT_FALSE(complex.ok());
  EXPECT_EQ(complex.status().code(), Status::Code::kNotSupported);
  EXPECT_NE(complex.status().message().find("rope.freqs"), std::string::npos);
  auto huge = MakeSafetensorsHeader({{"a", DType::kUInt8, {1}, uint64_t{1} << 61},
                                     {"b", DType::kUInt8, {1}, uint64_t{1} << 61},
                                     {"c", DType::kUInt8, {1}, uint64_t{1} << 61}});
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), Status::Code::kCorruption);
}

TEST(Safetensors, ShardIndexAsJsonDumpsSortedWithIndent2) {
  EXPECT_EQ(ShardIndexJson(40, {{"b", "model-00002-of-00002.safetensors"},
                                {"a", "model-00001-of-00002.safetensors"}}),
            "{\n  \"metadata\": {\n    \"total_size\": 40\n  },\n  \"weight_map\": {\n    \"a\": "
            "\"model-00001-of-00002.safetensors\",\n    \"b\": "
            "\"model-00002-of-00002.safetensors\"\n  }\n}\n");
}

}  // namespace
}  // namespace ucfs

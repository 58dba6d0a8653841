#include "ucfs/consolidated_view.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "test_support.h"

namespace ucfs {
namespace {

using testing::FixtureDir;
using testing::LoadReference;
using testing::ReferenceManifest;

std::shared_ptr<const Checkpoint> Open(const std::string& fixture) {
  auto c = Checkpoint::Open(*Env::Posix(), FixtureDir(fixture) + "/checkpoint");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::make_shared<const Checkpoint>(std::move(c).value());
}

std::string ReadPieces(const Checkpoint& c, const std::vector<ReadPiece>& pieces) {
  PieceReader reader(*Env::Posix(), [&](uint32_t i) { return c.sources()[i]; });
  std::string bytes;
  EXPECT_TRUE(reader.Read(pieces, &bytes).ok());
  return bytes;
}

std::string ReadFileOfView(View& view, const Checkpoint& c, InodeId file) {
  std::vector<ReadPiece> pieces;
  EXPECT_TRUE(view.Plan(file, 0, view.GetAttr(file)->size, &pieces).ok());
  return ReadPieces(c, pieces);
}

// A strict safetensors reader: the 8-byte length, a JSON header, and data
// offsets that tile the data exactly, in order, with nothing left over.
// Returns name -> (dtype, shape, bytes).
struct SafeTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
std::map<std::string, SafeTensor> ParseSafetensors(const std::string& file) {
  std::map<std::string, SafeTensor> out;
  EXPECT_GE(file.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | static_cast<unsigned char>(file[static_cast<size_t>(i)]);
  EXPECT_LE(8 + n, file.size());
  EXPECT_EQ((8 + n) % 8, 0u) << "data not 8-aligned";
  const nlohmann::json header = nlohmann::json::parse(file.substr(8, n));
  EXPECT_EQ(header.at("__metadata__").at("format"), "pt");
  const std::string data = file.substr(8 + n);
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  const std::map<std::string, uint64_t> sizes = {{"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F64", 8},
                                                 {"I64", 8}, {"I32", 4}, {"I16", 2},  {"I8", 1},
                                                 {"U8", 1},  {"BOOL", 1}};
  for (const auto& [name, t] : header.items()) {
    if (name == "__metadata__") continue;
    SafeTensor st;
    st.dtype = t.at("dtype").get<std::string>();
    st.shape = t.at("shape").get<std::vector<int64_t>>();
    const auto offsets = t.at("data_offsets").get<std::vector<uint64_t>>();
    EXPECT_EQ(offsets.size(), 2u);
    uint64_t numel = 1;
    for (int64_t d : st.shape) numel *= static_cast<uint64_t>(d);
    EXPECT_EQ(offsets[1] - offsets[0], numel * sizes.at(st.dtype)) << name;
    st.bytes = data.substr(offsets[0], offsets[1] - offsets[0]);
    spans.emplace_back(offsets[0], offsets[1]);
    out[name] = std::move(st);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t at = 0;
  for (const auto& [a, b] : spans) {
    EXPECT_EQ(a, at) << "gap or overlap in the data";
    at = b;
  }
  EXPECT_EQ(at, data.size()) << "data left over";
  return out;
}

std::string SafeDType(const std::string& torch_name) {
  static const std::map<std::string, std::string> m = {
      {"float32", "F32"}, {"float16", "F16"}, {"bfloat16", "BF16"}, {"float64", "F64"}};
  return m.at(torch_name);
}

class ConsolidatedTest : public ::testing::TestWithParam<std::string> {};

// Every tensor equals the one zero_to_fp32.py wrote (read by torch.load),
// dtype, shape and requires_grad included, and nothing is missing.
TEST_P(ConsolidatedTest, StateDictEqualsZeroToFp32) {
  auto c = Open(GetParam());
  const auto& z2f = ReferenceManifest().at(GetParam()).at("zero_to_fp32");
  auto tensors = ConsolidatedStateDict(*Env::Posix(), *c);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  ASSERT_EQ(tensors->size(), z2f.size());
  for (const ConsolidatedTensor& t : *tensors) {
    SCOPED_TRACE(t.name);
    const auto ref = LoadReference(z2f.at(t.name));
    EXPECT_EQ(ref.dtype, Info(t.dtype).torch_name);
    EXPECT_EQ(ref.shape, t.shape);
    EXPECT_EQ(ref.requires_grad, t.requires_grad);
    std::vector<ReadPiece> pieces;
    ASSERT_TRUE(PlanStorage(*c, t.storage, 0, t.storage.size(), &pieces).ok());
    EXPECT_EQ(ReadPieces(*c, pieces), ref.bytes);
  }
}

// The safetensors file parses strictly and holds the same tensors, tied
// aliases as copies; so does every shard of a sharded one, with an index
// naming each tensor's shard.
TEST_P(ConsolidatedTest, SafetensorsHoldTheSameTensors) {
  auto c = Open(GetParam());
  const auto& z2f = ReferenceManifest().at(GetParam()).at("zero_to_fp32");
  for (uint64_t limit : {uint64_t{5'000'000'000}, uint64_t{200}}) {
    SCOPED_TRACE("max shard bytes " + std::to_string(limit));
    View view(*Env::Posix(), 0);
    for (const auto& s : c->sources()) view.AddSource(s);
    ASSERT_TRUE(AddConsolidatedDir(*Env::Posix(), view, kRootInode, c, {limit}).ok());
    const InodeId dir = *view.Lookup(kRootInode, c->files().tag + "_fp32");
    std::map<std::string, SafeTensor> all;
    std::map<std::string, std::string> shard_of;
    auto entries = view.ReadDir(dir);
    ASSERT_TRUE(entries.ok());
    std::set<std::string> names;
    for (const auto& [name, attr] : *entries) {
      names.insert(name);
      if (!name.ends_with(".safetensors")) continue;
      for (auto& [k, v] : ParseSafetensors(ReadFileOfView(view, *c, attr.inode))) {
        EXPECT_FALSE(all.count(k)) << k << " in two shards";
        shard_of[k] = name;
        all[k] = std::move(v);
      }
    }
    EXPECT_TRUE(names.count("pytorch_model.bin"));
    ASSERT_EQ(all.size(), z2f.size());
    for (const auto& [name, t] : all) {
      const auto ref = LoadReference(z2f.at(name));
      EXPECT_EQ(t.dtype, SafeDType(ref.dtype)) << name;
      EXPECT_EQ(t.shape, ref.shape) << name;
      EXPECT_EQ(t.bytes, ref.bytes) << name;
    }
    if (limit > 1'000'000) {
      EXPECT_TRUE(names.count("model.safetensors"));
      EXPECT_FALSE(names.count("model.safetensors.index.json"));
      continue;
    }
    ASSERT_GT(names.size(), 3u) << "200 bytes should split every fixture";
    const nlohmann::json index = nlohmann::json::parse(
        ReadFileOfView(view, *c, *view.Lookup(dir, "model.safetensors.index.json")));
    uint64_t total = 0;
    for (const auto& [name, t] : all) total += t.bytes.size();
    EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
    EXPECT_EQ(index.at("weight_map").size(), all.size());
    for (const auto& [name, file] : index.at("weight_map").items()) {
      EXPECT_EQ(file.get<std::string>(), shard_of.at(name)) << name;
    }
  }
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// Buffers in other dtypes become float32 as torch's .float() makes them.
TEST(ToFloat32, ConvertsLikeTorch) {
  // float16: 1, -2, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest normal), inf.
  const uint16_t half[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0x7c00};
  auto f = ToFloat32(DType::kFloat16, std::string(reinterpret_cast<const char*>(half), sizeof half),
                     "b");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(Floats(*f), (std::vector<float>{1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x1p-14f,
                                            std::numeric_limits<float>::infinity()}));
  const uint16_t nan16 = 0x7e00;
  EXPECT_TRUE(std::isnan(Floats(
      *ToFloat32(DType::kFloat16, std::string(reinterpret_cast<const char*>(&nan16), 2), "b"))[0]));
  // bfloat16 is the top half of a float32.
  const uint16_t bf[] = {0x3f80, 0xc0a0};
  EXPECT_EQ(Floats(*ToFloat32(DType::kBFloat16,
                              std::string(reinterpret_cast<const char*>(bf), sizeof bf), "b")),
            (std::vector<float>{1.0f, -5.0f}));
  const int64_t ints[] = {-3, 1 << 20};
  EXPECT_EQ(Floats(*ToFloat32(DType::kInt64,
                              std::string(reinterpret_cast<const char*>(ints), sizeof ints), "b")),
            (std::vector<float>{-3.0f, 1048576.0f}));
  const bool flags[] = {true, false};
  EXPECT_EQ(
      Floats(*ToFloat32(DType::kBool,
                        std::string(reinterpret_cast<const char*>(flags), sizeof flags), "b")),
      (std::vector<float>{1.0f, 0.0f}));
  auto complex = ToFloat32(DType::kComplex64, std::string(8, '\0'), "rope.freqs");
  ASSERT_FALSE(complex.ok());
  EXPECT_NE(complex.status().message().find("rope.freqs"), std::string::npos);
}

// Computed bytes (converted buffers) are made on their first read, once;
// a failure or a wrong length is the read's error.
TEST(DeferredBytes, MadeOnFirstReadOnly) {
  auto c = Open("z3_fp32_ws2");
  int calls = 0;
  StorageSpec storage;
  StorageRun run;
  run.kind = StorageRun::Kind::kBytes;
  run.length = 4;
  run.bytes = std::make_shared<const DeferredBytes>([&]() -> Result<std::string> {
    ++calls;
    return std::string("abcd");
  });
  storage.runs.push_back(run);
  storage.FillRunStarts();
  EXPECT_EQ(calls, 0);
  for (int i = 0; i < 2; ++i) {
    std::vector<ReadPiece> pieces;
    ASSERT_TRUE(PlanStorage(*c, storage, 1, 3, &pieces).ok());
    ASSERT_EQ(pieces.size(), 1u);
    EXPECT_EQ(pieces[0].bytes, "bc");
  }
  EXPECT_EQ(calls, 1);

  storage.runs[0].bytes = std::make_shared<const DeferredBytes>(
      []() -> Result<std::string> { return Status::IOError("model_states.pt: gone"); });
  std::vector<ReadPiece> pieces;
  EXPECT_EQ(PlanStorage(*c, storage, 0, 4, &pieces).message(), "model_states.pt: gone");
  storage.runs[0].bytes = std::make_shared<const DeferredBytes>(
      []() -> Result<std::string> { return std::string("abc"); });
  EXPECT_EQ(PlanStorage(*c, storage, 0, 4, &pieces).code(), Status::Code::kCorruption);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConsolidatedTest, ::testing::ValuesIn(testing::FixtureNames()));

}  // namespace
}  // namespace ucfs

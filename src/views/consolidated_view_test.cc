#include "ucfs/views/consolidated_view.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "test_support.h"
#include "ucfs/codec/dtype_cast.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/views/hf_weights.h"

namespace ucfs {
namespace {

using testing::BinContents;
using testing::ParseSafetensors;
using testing::ReadBin;
using testing::SafeTensor;

using testing::FixtureDir;
using testing::LoadReference;
using testing::ReferenceManifest;

std::shared_ptr<const Checkpoint> Open(const std::string& fixture) {
  auto c = Checkpoint::Open(*Env::Posix(), FixtureDir(fixture) + "/checkpoint");
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return std::make_shared<const Checkpoint>(std::move(c).value());
}

std::string ReadPieces(const Checkpoint& c, const std::vector<ReadPiece>& pieces) {
  SourceFiles reader(*Env::Posix(), [&](uint32_t i) { return c.sources()[i]; });
  std::string bytes;
  EXPECT_TRUE(reader.Read(pieces, &bytes).ok());
  return bytes;
}

std::string ReadFileOfView(View& view, const Checkpoint& c, InodeId file) {
  std::vector<ReadPiece> pieces;
  EXPECT_TRUE(view.Plan(file, 0, view.GetAttr(file)->size, &pieces).ok());
  return ReadPieces(c, pieces);
}

// The header length a safetensors file starts with.
uint64_t ParseSafetensorsHeaderSize(const std::string& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  return n;
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
  const auto grid = ParallelCheckpoint::SharedOfDataParallel(c);
  auto tensors = ConsolidatedStateDict(*Env::Posix(), *grid);
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
    ASSERT_TRUE(AddConsolidatedDir(*Env::Posix(), view, kRootInode,
                                   ParallelCheckpoint::SharedOfDataParallel(c), {limit})
                    .ok());
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

// Reads of any range, those ending inside the header too, give exactly the
// bytes of a whole read at that range (found by checkpoint_fuzz: a read
// ending in the header also returned data; offset + length could wrap).
TEST_P(ConsolidatedTest, SafetensorsReadsOfAnyRange) {
  auto c = Open(GetParam());
  View view(*Env::Posix(), 0);
  for (const auto& s : c->sources()) view.AddSource(s);
  ASSERT_TRUE(AddConsolidatedDir(*Env::Posix(), view, kRootInode,
                                 ParallelCheckpoint::SharedOfDataParallel(c))
                  .ok());
  const InodeId dir = *view.Lookup(kRootInode, c->files().tag + "_fp32");
  const InodeId file = *view.Lookup(dir, "model.safetensors");
  const std::string whole = ReadFileOfView(view, *c, file);
  const uint64_t header = 8 + ParseSafetensorsHeaderSize(whole);
  for (uint64_t offset : {uint64_t{0}, uint64_t{1}, uint64_t{7}, header - 1, header, header + 1}) {
    // Up to the end of the header, and "everything from here" (no overflow).
    const uint64_t to_header = offset < header ? header - offset : 1;
    for (uint64_t length : {uint64_t{1}, uint64_t{2}, uint64_t{8}, to_header, uint64_t{4096},
                            std::numeric_limits<uint64_t>::max()}) {
      std::vector<ReadPiece> pieces;
      ASSERT_TRUE(view.Plan(file, offset, length, &pieces).ok());
      EXPECT_EQ(ReadPieces(*c, pieces), whole.substr(offset, length))
          << "[" << offset << ", +" << length << ")";
    }
  }
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// Bytes [begin, end) of a storage of computed runs.
Status ReadStorage(const StateMapper& mapper, const StorageSpec& storage, uint64_t begin,
                   uint64_t end, std::string* out) {
  std::vector<ReadPiece> pieces;
  UCFS_RETURN_IF_ERROR(PlanStorage(mapper, storage, begin, end, &pieces));
  for (const ReadPiece& p : pieces) out->append(p.bytes);
  return Status::OK();
}

// A buffer saved in another dtype is widened to float32 on every read, from
// bytes read as every source byte is: a rank file changed since the view
// was built is an error naming it, never other values.
TEST(BufferTensor, WidenedFromIdentityCheckedBytes) {
  auto c = Open("z3_fp32_ws2");  // only its StateMapper is asked (for nothing)
  MemEnv env;
  const uint16_t bf16[] = {0x3f80, 0xc0a0, 0x4000};  // 1, -5, 2
  env.WriteFile("/r/model_states.pt",
                "head" + std::string(reinterpret_cast<const char*>(bf16), sizeof bf16));
  const FileIdentity saved = env.Stat("/r/model_states.pt")->identity;
  auto files = std::make_shared<SourceFiles>(env, [saved](uint32_t) {
    return SourceFile{"/r/model_states.pt", saved, FileAccess{}};
  });
  BufferInfo b{"rope.inv_freq", {3}, DType::kBFloat16, Extent{0, 4, sizeof bf16}};
  auto t = BufferTensor(b, 0, /*as_saved=*/false, files);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->dtype, DType::kFloat32);
  t->storage.FillRunStarts();
  std::string read;
  ASSERT_TRUE(ReadStorage(*c, t->storage, 4, 12, &read).ok());  // a range inside
  EXPECT_EQ(Floats(read), (std::vector<float>{-5.0f, 2.0f}));
  env.TouchCtime("/r/model_states.pt");  // edited in place, size and mtime kept
  read.clear();
  const Status changed = ReadStorage(*c, t->storage, 0, 12, &read);
  EXPECT_EQ(changed.posix_errno(), EIO);
  EXPECT_NE(changed.message().find("/r/model_states.pt"), std::string::npos);
  // A dtype with no widening is refused when the tensor is made.
  b.dtype = DType::kComplex64;
  auto complex = BufferTensor(b, 0, false, files);
  ASSERT_FALSE(complex.ok());
  EXPECT_NE(complex.status().message().find("rope.inv_freq"), std::string::npos);
}

// The Hugging Face weights beside config.json: what save_pretrained writes
// with gathering on. Trainable params are zero_to_fp32's fp32 weights (read
// by torch.load) cast to the training dtype (CastFloat32, checked against
// LibTorch's .to()), buffers and frozen params in their saved dtype, tied
// aliases left out; split like save_pretrained past the shard size; any
// range of a cast tensor reads as the same range of the whole.
TEST_P(ConsolidatedTest, HfWeightsAreTheMasterWeightsInTheTrainingDtype) {
  auto c = Open(GetParam());
  const auto& z2f = ReferenceManifest().at(GetParam()).at("zero_to_fp32");
  const DType training = c->lp_dtype().value_or(DType::kFloat32);
  std::set<std::string> buffers_or_frozen;
  for (const auto& b : c->buffers()) buffers_or_frozen.insert(b.name);
  for (const auto& f : c->frozen_params()) buffers_or_frozen.insert(f.name);
  std::set<std::string> aliases;
  for (const auto& t : c->tied_params()) aliases.insert(t.alias);
  for (uint64_t limit : {uint64_t{5'000'000'000}, uint64_t{100}}) {
    SCOPED_TRACE("max shard bytes " + std::to_string(limit));
    HfWeightsOptions options;
    options.max_shard_bytes = limit;
    auto files = HfWeightsFiles(*Env::Posix(), c, options);
    ASSERT_TRUE(files.ok()) << files.status().ToString();
    std::map<std::string, SafeTensor> all;
    std::set<std::string> names;
    for (const NamedContent& f : *files) {
      names.insert(f.name);
      if (!f.name.ends_with(".safetensors")) continue;
      std::vector<ReadPiece> pieces;
      ASSERT_TRUE(f.content->Plan(0, f.content->size(), &pieces).ok());
      const std::string whole = ReadPieces(*c, pieces);
      ASSERT_EQ(whole.size(), f.content->size());
      for (auto& [k, v] : ParseSafetensors(whole)) all[k] = std::move(v);
      // Ranges starting and ending mid-element of a cast tensor.
      for (uint64_t offset : {uint64_t{1}, whole.size() / 3, whole.size() - 3}) {
        for (uint64_t length : {uint64_t{1}, uint64_t{3}, uint64_t{1001}}) {
          pieces.clear();
          ASSERT_TRUE(f.content->Plan(offset, length, &pieces).ok());
          EXPECT_EQ(ReadPieces(*c, pieces), whole.substr(offset, length))
              << offset << "+" << length;
        }
      }
    }
    EXPECT_EQ(names.count("model.safetensors"), limit > 1'000'000 ? 1u : 0u);
    EXPECT_EQ(names.count("model.safetensors.index.json"), limit > 1'000'000 ? 0u : 1u);
    EXPECT_EQ(all.size(), z2f.size() - aliases.size());
    for (const auto& [name, t] : all) {
      EXPECT_FALSE(aliases.count(name)) << name << " is a tied alias";
      const auto ref = LoadReference(z2f.at(name));
      EXPECT_EQ(t.shape, ref.shape) << name;
      if (buffers_or_frozen.count(name)) continue;  // their saved dtype: hf_weights_test.py
      std::string want;
      ASSERT_TRUE(CastFloat32(ref.bytes, training, &want).ok());
      EXPECT_EQ(t.dtype, SafeDType(std::string(Info(training).torch_name))) << name;
      EXPECT_EQ(t.bytes, want) << name;
    }
  }
}

TEST(HfWeights, WantedBesideAConfigWithNoWeights) {
  auto listing = [](std::vector<std::string> names) {
    std::vector<DirEntry> out;
    for (auto& n : names) out.push_back({n, n.ends_with("/")});
    return out;
  };
  EXPECT_TRUE(
      WantsHfWeights(listing({"config.json", "latest", "global_step4/", "rng_state_0.pth"})));
  EXPECT_FALSE(WantsHfWeights(listing({"latest", "global_step4/"})));
  for (const char* weights :
       {"model.safetensors", "pytorch_model.bin", "model.safetensors.index.json",
        "model-00001-of-00002.safetensors", "pytorch_model-00001-of-00002.bin",
        "adapter_model.safetensors", "adapter_model.bin"}) {
    EXPECT_FALSE(WantsHfWeights(listing({"config.json", weights}))) << weights;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ConsolidatedTest, ::testing::ValuesIn(testing::FixtureNames()));
// ZeRO-2's zero_to_fp32 output (its stage-1/2 path).
INSTANTIATE_TEST_SUITE_P(FlatGroupFixtures, ConsolidatedTest,
                         ::testing::Values("z2_tricky_fp32_ws2", "z2_tricky_fp16_ws3",
                                           "z2_tricky_bf16_ws4"));

class FlatGroupConsolidatedTest : public ::testing::TestWithParam<std::string> {};

// Every ZeRO-1/2 checkpoint: the state dict zero_to_fp32.py makes of ZeRO-2,
// in its order, with the values the live engine held (ORACLE.json) — the
// buffer as float32, the frozen params in their own dtype from the model
// states, the fp32 master weights, the tied alias sharing its tensor — and
// equal to zero_to_fp32.py's own output for every tensor it has. It has
// them all but where it is wrong: it refuses BF16_Optimizer checkpoints
// ("not a zero checkpoint": they record no zero_stage), and drops the frozen
// params at stage 1 (no frozen_param_shapes).
TEST_P(FlatGroupConsolidatedTest, StateDictHoldsTheLiveEnginesValues) {
  auto c = Open(GetParam());
  const auto& oracle = testing::Oracle(GetParam());
  const auto grid = ParallelCheckpoint::SharedOfDataParallel(c);
  auto tensors = ConsolidatedStateDict(*Env::Posix(), *grid);
  ASSERT_TRUE(tensors.ok()) << tensors.status().ToString();
  std::vector<std::string> names;
  for (const ConsolidatedTensor& t : *tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "mix", "proj.weight", "proj.bias", "tri", "embed.weight", "fc1.weight",
                       "fc2.weight", "gate", "ln1.weight", "ln1.bias", "fc1.bias", "fc2.bias",
                       "ln2.weight", "ln2.bias", "head.bias", "head.weight"}));
  const auto& manifest = ReferenceManifest().at(GetParam());
  const bool has_z2f = manifest.contains("zero_to_fp32");
  EXPECT_EQ(has_z2f, c->optimizer_class() != "BF16_Optimizer");
  size_t compared = 0;
  for (const ConsolidatedTensor& t : *tensors) {
    SCOPED_TRACE(t.name);
    std::vector<ReadPiece> pieces;
    ASSERT_TRUE(PlanStorage(*c, t.storage, 0, t.storage.size(), &pieces).ok());
    const std::string bytes = ReadPieces(*c, pieces);
    const std::vector<double> values = testing::FloatValues(bytes, t.dtype);
    const std::string name = t.name == "head.weight" ? "embed.weight" : t.name;
    if (oracle["expected_buffer_values"].contains(name)) {
      EXPECT_EQ(t.dtype, DType::kFloat32);
      EXPECT_EQ(values,
                oracle["expected_buffer_values"][name]["values"].get<std::vector<double>>());
    } else if (oracle["expected_frozen_values"].contains(name)) {
      const auto& frozen = oracle["expected_frozen_values"][name];
      EXPECT_EQ("torch." + std::string(Info(t.dtype).torch_name),
                frozen["dtype"].get<std::string>());
      EXPECT_EQ(values, frozen["values"].get<std::vector<double>>());
    } else {
      EXPECT_EQ(t.dtype, DType::kFloat32);
      EXPECT_EQ(t.shape, oracle["harness"]["param_shapes"][name].get<std::vector<int64_t>>());
      EXPECT_EQ(values, oracle["expected_full_values"]["fp32"][name].get<std::vector<double>>());
    }
    if (has_z2f && manifest["zero_to_fp32"].contains(t.name)) {
      const auto ref = LoadReference(manifest["zero_to_fp32"][t.name]);
      EXPECT_EQ(ref.dtype, Info(t.dtype).torch_name);
      EXPECT_EQ(ref.shape, t.shape);
      EXPECT_EQ(ref.bytes, bytes);
      ++compared;
    } else if (has_z2f) {
      // The one thing zero_to_fp32.py leaves out: frozen params at stage 1.
      EXPECT_EQ(c->zero_stage(), 1);
      EXPECT_TRUE(oracle["expected_frozen_values"].contains(t.name));
    }
  }
  if (has_z2f) EXPECT_EQ(compared, manifest["zero_to_fp32"].size());
  EXPECT_EQ(tensors->back().alias_of, 4);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, FlatGroupConsolidatedTest,
                         ::testing::ValuesIn(testing::FlatGroupFixtureNames()));

// From DeepSpeed 0.15.3 zero_to_fp32 writes a plain dict, and past
// --max_shard_size (5GB) pytorch_model-0000k-of-0000n.bin shards split as
// Hugging Face's split_torch_state_dict_into_shards splits, with an index;
// up to 0.15.2 one OrderedDict file whatever its size.
TEST(ConsolidatedBins, FollowTheZeroToFp32OfTheCheckpointsDeepSpeed) {
  const auto& z2f = ReferenceManifest().at("z3_tricky_fp32_ws4").at("zero_to_fp32");
  for (const std::string version : {"0.14.5", "0.15.2", "0.15.3", "0.16.4", "0.19.5+g1a2b"}) {
    SCOPED_TRACE("DeepSpeed " + version);
    MemEnv env;
    ASSERT_TRUE(env.CopyTreeFrom(FixtureDir("z3_tricky_fp32_ws4") + "/checkpoint", "/ck").ok());
    const std::string model0 = "/ck/global_step4/zero_pp_rank_0_mp_rank_00_model_states.pt";
    env.WriteFile(model0, testing::RepackTorchFile(*env.Contents(model0), [&](pickle::Document* d) {
                    d->mutable_node(d->Get(d->root(), "ds_version")).text = version;
                  }));
    auto opened = Checkpoint::Open(env, "/ck");
    ASSERT_TRUE(opened.ok()) << opened.status().ToString();
    auto c = std::make_shared<const Checkpoint>(std::move(opened).value());
    const bool new_style = version >= std::string("0.15.3");
    for (uint64_t limit : {uint64_t{5'000'000'000}, uint64_t{300}}) {
      SCOPED_TRACE("max shard bytes " + std::to_string(limit));
      View view(env, 0);
      for (const auto& s : c->sources()) view.AddSource(s);
      ASSERT_TRUE(AddConsolidatedDir(env, view, kRootInode,
                                     ParallelCheckpoint::SharedOfDataParallel(c), {limit})
                      .ok());
      const InodeId dir = *view.Lookup(kRootInode, "global_step4_fp32");
      auto read = [&](InodeId file) {
        std::vector<ReadPiece> pieces;
        EXPECT_TRUE(view.Plan(file, 0, view.GetAttr(file)->size, &pieces).ok());
        SourceFiles reader(env, [&](uint32_t i) { return c->sources()[i]; });
        std::string bytes;
        EXPECT_TRUE(reader.Read(pieces, &bytes).ok());
        return bytes;
      };
      std::map<std::string, BinContents> bins;
      const auto entries = view.ReadDir(dir);
      ASSERT_TRUE(entries.ok());
      for (const auto& [name, attr] : *entries) {
        if (name.starts_with("pytorch_model") && name.ends_with(".bin")) {
          bins[name] = ReadBin(read(attr.inode));
        }
      }
      const bool sharded = new_style && limit < 1'000'000;
      if (!sharded) {
        ASSERT_EQ(bins.size(), 1u);
        ASSERT_TRUE(bins.count("pytorch_model.bin"));
        EXPECT_EQ(bins.at("pytorch_model.bin").plain_dict, new_style);
        EXPECT_FALSE(view.Lookup(dir, "pytorch_model.bin.index.json").ok());
        continue;
      }
      ASSERT_GT(bins.size(), 2u) << "300 bytes split the fixture";
      EXPECT_FALSE(bins.count("pytorch_model.bin"));
      const nlohmann::json index =
          nlohmann::json::parse(read(*view.Lookup(dir, "pytorch_model.bin.index.json")));
      uint64_t total = 0;
      std::set<std::string> seen;
      size_t k = 0;
      for (const auto& [name, bin] : bins) {
        char expected_name[64];
        std::snprintf(expected_name, sizeof expected_name, "pytorch_model-%05zu-of-%05zu.bin", ++k,
                      bins.size());
        EXPECT_EQ(name, expected_name);
        EXPECT_TRUE(bin.plain_dict);
        std::map<std::string, std::string> bytes_of_key;  // storage key -> bytes, once
        uint64_t shard_bytes = 0;
        for (const std::string& t : bin.names) {
          EXPECT_TRUE(seen.insert(t).second) << t << " in two shards";
          EXPECT_EQ(index.at("weight_map").at(t).get<std::string>(), name) << t;
          const auto& [key, bytes] = bin.tensors.at(t);
          EXPECT_EQ(bytes, LoadReference(z2f.at(t)).bytes) << t;
          if (bytes_of_key.emplace(key, bytes).second) shard_bytes += bytes.size();
        }
        total += shard_bytes;
        // Over the limit only as one tensor alone (and its tied aliases).
        if (shard_bytes > limit) EXPECT_EQ(bytes_of_key.size(), 1u) << name;
      }
      EXPECT_EQ(seen.size(), z2f.size());
      EXPECT_EQ(index.at("metadata").at("total_size").get<uint64_t>(), total);
      // Tied aliases share their tensor's storage, in its shard.
      for (const TiedParam& tie : c->tied_params()) {
        const std::string shard = index.at("weight_map").at(tie.alias);
        EXPECT_EQ(index.at("weight_map").at(tie.canonical).get<std::string>(), shard);
        EXPECT_EQ(bins.at(shard).tensors.at(tie.alias).first,
                  bins.at(shard).tensors.at(tie.canonical).first);
      }
    }
  }
}

}  // namespace
}  // namespace ucfs

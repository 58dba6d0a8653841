#include "ucfs/codec/torch_tensor.h"

#include <gtest/gtest.h>

#include "test_support.h"
#include "ucfs/codec/zip.h"

namespace ucfs {
namespace {

using pickle::Document;
using pickle::NodeId;

Document ParseDataPkl(const std::string& path) {
  auto file = Env::Posix()->Open(path);
  EXPECT_TRUE(file.ok());
  auto archive = ZipArchive::Open(**file);
  EXPECT_TRUE(archive.ok());
  auto doc = pickle::Parse(*ZipArchive::ReadRecord(**file, *archive->Find("data.pkl")));
  EXPECT_TRUE(doc.ok());
  return std::move(doc).value();
}

TEST(MatchTensor, UniversalFileIsABareTensor) {
  Document doc = ParseDataPkl(testing::FixtureDir("z3_bf16_ws2") +
                              "/checkpoint/global_step4_universal/zero/fc1.weight/fp32.pt");
  auto t = MatchTensor(doc, doc.root());
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t->has_value());
  const TensorRef& ref = **t;
  EXPECT_EQ(ref.storage_key, "0");
  EXPECT_EQ(ref.location, "cpu");
  EXPECT_EQ(ref.dtype, DType::kFloat32);
  EXPECT_EQ(ref.shape, std::vector<int64_t>{35});
  EXPECT_EQ(ref.stride, std::vector<int64_t>{1});
  EXPECT_EQ(ref.storage_numel, 35u);
  EXPECT_TRUE(ref.requires_grad);
  EXPECT_TRUE(ref.contiguous());
  EXPECT_EQ(ref.byte_size(), 140u);
}

TEST(MatchTensor, ZeroToFp32ViewsOfPaddedStorage) {
  Document doc =
      ParseDataPkl(testing::FixtureDir("z3_fp32_ws4") + "/zero_to_fp32/pytorch_model.bin");
  NodeId embed = doc.Get(doc.root(), "embed.weight");
  auto t = MatchTensor(doc, embed);
  ASSERT_TRUE(t.ok() && t->has_value());
  EXPECT_EQ((*t)->shape, (std::vector<int64_t>{11, 7}));
  EXPECT_EQ((*t)->stride, (std::vector<int64_t>{7, 1}));
  EXPECT_EQ((*t)->storage_numel, 80u);  // the padded partition, per OBSERVED.md
  EXPECT_EQ((*t)->numel(), 77u);
}

TEST(MatchTensor, NonTensorsAreNotTensors) {
  Document doc = ParseDataPkl(testing::FixtureDir("z3_fp32_ws2") +
                              "/checkpoint/global_step4/zero_pp_rank_0_mp_rank_00_model_states.pt");
  auto t = MatchTensor(doc, doc.Get(doc.root(), "param_shapes"));
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->has_value());
  auto shapes = doc.SequenceItems(doc.Get(doc.root(), "param_shapes"));
  ASSERT_TRUE(shapes);
  auto items = doc.MappingItems((*shapes)[0]);
  ASSERT_TRUE(items);
  EXPECT_EQ(MatchShape(doc, (*items)[0].second), (std::vector<int64_t>{11, 7}));
}

// Builds _rebuild_tensor_v2(pid, offset, size, stride, requires_grad, hooks).
NodeId BuildTensor(Document* doc, const char* storage, int64_t numel, int64_t offset,
                   std::vector<int64_t> shape, std::vector<int64_t> stride) {
  auto ints = [&](const std::vector<int64_t>& v) {
    std::vector<NodeId> ids;
    for (int64_t x : v) ids.push_back(doc->AddInt(x));
    return doc->AddTuple(ids);
  };
  NodeId pid = doc->AddTuple({doc->AddStr("storage"), doc->Global("torch", storage),
                              doc->AddStr("0"), doc->AddStr("cpu"), doc->AddInt(numel)});
  NodeId hooks = doc->AddReduce(doc->Global("collections", "OrderedDict"), doc->AddTuple({}));
  NodeId args = doc->AddTuple({doc->AddPersistentId(pid), doc->AddInt(offset), ints(shape),
                               ints(stride), doc->AddBool(false), hooks});
  return doc->AddReduce(doc->Global("torch._utils", "_rebuild_tensor_v2"), args);
}

TEST(MatchTensor, TensorOutsideItsStorageIsMalformed) {
  Document doc;
  NodeId ok = BuildTensor(&doc, "HalfStorage", 12, 2, {2, 5}, {5, 1});
  auto t = MatchTensor(doc, ok);
  ASSERT_TRUE(t.ok() && t->has_value());
  EXPECT_EQ((*t)->dtype, DType::kFloat16);
  EXPECT_EQ((*t)->byte_offset(), 4u);
  NodeId bad = BuildTensor(&doc, "HalfStorage", 11, 2, {2, 5}, {5, 1});
  auto r = MatchTensor(doc, bad);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("reaches element 11"), std::string::npos)
      << r.status().ToString();
  NodeId unknown = BuildTensor(&doc, "NoSuchStorage", 4, 0, {4}, {1});
  EXPECT_FALSE(MatchTensor(doc, unknown).ok());
}

TEST(MatchTensor, WrappersOfTorch2) {
  Document doc;
  NodeId inner = BuildTensor(&doc, "FloatStorage", 6, 0, {6}, {1});
  const auto& inner_node = doc.node(inner);
  // _rebuild_from_type_v2(_rebuild_tensor_v2, Tensor, args, {'ds_id': ...})
  NodeId state = doc.AddDict({doc.AddStr("ds_id"), doc.AddStr("1_4")});
  NodeId wrapped = doc.AddReduce(
      doc.Global("torch._tensor", "_rebuild_from_type_v2"),
      doc.AddTuple({inner_node.a, doc.Global("torch", "Tensor"), inner_node.b, state}));
  auto t = MatchTensor(doc, wrapped);
  ASSERT_TRUE(t.ok() && t->has_value()) << t.status().ToString();
  EXPECT_EQ((*t)->shape, std::vector<int64_t>{6});
  // _rebuild_parameter(data, requires_grad, hooks)
  NodeId param = doc.AddReduce(doc.Global("torch._utils", "_rebuild_parameter"),
                               doc.AddTuple({inner, doc.AddBool(true), doc.AddNone()}));
  t = MatchTensor(doc, param);
  ASSERT_TRUE(t.ok() && t->has_value());
  EXPECT_TRUE((*t)->requires_grad);
}

TEST(MatchTensor, RebuildTensorV3UsesItsDtype) {
  Document doc;
  NodeId pid = doc.AddTuple({doc.AddStr("storage"), doc.Global("torch", "UntypedStorage"),
                             doc.AddStr("3"), doc.AddStr("cuda:1"), doc.AddInt(16)});
  NodeId args = doc.AddTuple({doc.AddPersistentId(pid), doc.AddInt(0),
                              doc.AddTuple({doc.AddInt(8)}), doc.AddTuple({doc.AddInt(1)}),
                              doc.AddBool(false), doc.AddNone(), doc.Global("torch", "uint16")});
  NodeId call = doc.AddReduce(doc.Global("torch._utils", "_rebuild_tensor_v3"), args);
  auto t = MatchTensor(doc, call);
  ASSERT_FALSE(t.ok());  // uint16 is not a dtype ucfs knows: a clear error
  EXPECT_NE(t.status().message().find("dtype"), std::string::npos);
  doc.mutable_node(args).items[6] = doc.Global("torch", "bfloat16");
  t = MatchTensor(doc, call);
  ASSERT_TRUE(t.ok() && t->has_value()) << t.status().ToString();
  EXPECT_EQ((*t)->dtype, DType::kBFloat16);
  EXPECT_EQ((*t)->storage_numel, 8u);
  EXPECT_EQ((*t)->location, "cuda:1");
}

// Found by the fuzzer: an empty tensor with enormous strides.
TEST(MatchTensor, EmptyTensorWithHugeStridesIsContiguousWithoutOverflow) {
  Document doc;
  NodeId t = BuildTensor(&doc, "FloatStorage", 0, 0, {0, int64_t{1} << 62, int64_t{1} << 62},
                         {1, int64_t{1} << 62, 1});
  auto r = MatchTensor(doc, t);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status().ToString();
  EXPECT_EQ((*r)->numel(), 0u);
  EXPECT_TRUE((*r)->contiguous());
}

TEST(MatchTensor, ParameterOfAParameterIsRefused) {
  Document doc;
  NodeId inner = BuildTensor(&doc, "FloatStorage", 6, 0, {6}, {1});
  NodeId p = inner;
  for (int i = 0; i < 3; ++i) {
    p = doc.AddReduce(doc.Global("torch._utils", "_rebuild_parameter"),
                      doc.AddTuple({p, doc.AddBool(true), doc.AddNone()}));
  }
  EXPECT_FALSE(MatchTensor(doc, p).ok());
}

}  // namespace
}  // namespace ucfs

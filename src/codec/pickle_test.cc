#include "ucfs/codec/pickle.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "test_support.h"
#include "ucfs/base/env.h"
#include "ucfs/codec/zip.h"

namespace ucfs::pickle {
namespace {

using ucfs::testing::ReadFile;
using ucfs::testing::TestDataDir;
using ucfs::testing::TorchFilesBelow;

std::string DataPkl(const std::string& path) {
  auto file = Env::Posix()->Open(path);
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  auto archive = ZipArchive::Open(**file);
  EXPECT_TRUE(archive.ok()) << archive.status().ToString();
  const ZipRecord* rec = archive->Find("data.pkl");
  EXPECT_NE(rec, nullptr) << path;
  auto bytes = ZipArchive::ReadRecord(**file, *rec);
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

std::vector<std::string> PythonPickles(std::string_view suffix) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(TestDataDir() + "/pickles")) {
    if (e.path().string().ends_with(suffix)) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The acceptance test of the codec: every pickle DeepSpeed and torch wrote
// in the fixtures comes back byte for byte, memo numbering included.
TEST(PickleRoundTrip, EveryFixturePickleIsByteIdentical) {
  auto files = TorchFilesBelow(TestDataDir() + "/fixtures");
  ASSERT_GT(files.size(), 150u);
  for (const auto& path : files) {
    std::string original = DataPkl(path);
    auto doc = Parse(original);
    ASSERT_TRUE(doc.ok()) << path << ": " << doc.status().ToString();
    auto written = Write(*doc);
    ASSERT_TRUE(written.ok()) << path;
    EXPECT_EQ(*written, original) << path;
  }
}

TEST(PickleRoundTrip, PythonProtocol2PicklesAreByteIdentical) {
  auto files = PythonPickles(".p2.pkl");
  ASSERT_EQ(files.size(), 10u);
  for (const auto& path : files) {
    std::string original = ReadFile(path);
    auto doc = Parse(original);
    ASSERT_TRUE(doc.ok()) << path << ": " << doc.status().ToString();
    auto written = Write(*doc);
    ASSERT_TRUE(written.ok());
    EXPECT_EQ(*written, original) << path;
  }
}

// Protocol 4 (FRAME, MEMOIZE, SHORT_BINUNICODE, EMPTY_SET, ...) parses to the
// same values as protocol 2, and is written back as a pickle with them.
TEST(PickleRoundTrip, Protocol4ParsesToTheSameValues) {
  for (const auto& p4 : PythonPickles(".p4.pkl")) {
    std::string p2 = p4.substr(0, p4.size() - 7) + ".p2.pkl";
    auto a = Parse(ReadFile(p4));
    auto b = Parse(ReadFile(p2));
    ASSERT_TRUE(a.ok()) << p4 << ": " << a.status().ToString();
    ASSERT_TRUE(b.ok());
    auto rewritten = Write(*a);
    ASSERT_TRUE(rewritten.ok());
    auto c = Parse(*rewritten);
    ASSERT_TRUE(c.ok()) << p4;
    EXPECT_EQ(c->Repr(c->root(), 100000), a->Repr(a->root(), 100000)) << p4;
    if (p4.find("batches") == std::string::npos && p4.find("bytes") == std::string::npos) {
      // Sets and bytes pickle differently at protocol 2 (as REDUCE calls).
      EXPECT_EQ(a->Repr(a->root(), 100000), b->Repr(b->root(), 100000)) << p4;
    }
  }
}

TEST(PickleValues, IntegersOfEveryEncoding) {
  auto doc = Parse(ReadFile(TestDataDir() + "/pickles/ints.p2.pkl"));
  ASSERT_TRUE(doc.ok());
  auto items = doc->SequenceItems(doc->root());
  ASSERT_TRUE(items);
  const std::vector<std::optional<int64_t>> expected = {
      0,         1,         255,          256,           65535,        65536,
      -1,        -256,      2147483647,   -2147483648LL, 2147483648LL, -2147483649LL,
      INT64_MAX, INT64_MIN, std::nullopt, std::nullopt,  std::nullopt, 1,
      0};
  ASSERT_EQ(items->size(), expected.size() + 1);
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(doc->AsInt((*items)[i]), expected[i]) << i;
  }
  EXPECT_EQ(doc->node((*items)[14]).kind, Kind::kLong);  // 2**64
  EXPECT_EQ(doc->node((*items)[17]).kind, Kind::kBool);
  EXPECT_EQ(doc->node(items->back()).kind, Kind::kNone);
}

TEST(PickleValues, MemoSharingIsKept) {
  auto doc = Parse(ReadFile(TestDataDir() + "/pickles/shared.p2.pkl"));
  ASSERT_TRUE(doc.ok());
  NodeId a = doc->Get(doc->root(), "a");
  NodeId b = doc->Get(doc->root(), "b");
  ASSERT_NE(a, kNoNode);
  EXPECT_EQ(a, b);
  auto t = doc->SequenceItems(doc->Get(doc->root(), "t"));
  ASSERT_TRUE(t);
  EXPECT_EQ((*t)[0], a);
  EXPECT_EQ(doc->Repr(a), "[1, 2, 3]");
}

TEST(PickleValues, OrderedDictKeepsItsItemsInOrder) {
  auto doc = Parse(ReadFile(TestDataDir() + "/pickles/ordered.p2.pkl"));
  ASSERT_TRUE(doc.ok());
  const Node& root = doc->node(doc->root());
  EXPECT_EQ(root.kind, Kind::kReduce);
  EXPECT_TRUE(doc->IsGlobal(root.a, "collections", "OrderedDict"));
  auto items = doc->MappingItems(doc->root());
  ASSERT_TRUE(items);
  ASSERT_EQ(items->size(), 3u);
  EXPECT_EQ(*doc->AsStr((*items)[0].first), "x");
  EXPECT_EQ(doc->Repr((*items)[1].second), "[1.0, 2.0]");
}

TEST(PickleValues, EditedDocumentIsWrittenAsPythonWould) {
  // Change partition_count in a real optimizer pickle: the output differs
  // from the input only in that integer.
  std::string original =
      DataPkl(testing::FixtureDir("z3_fp32_ws4") +
              "/checkpoint/global_step4/zero_pp_rank_0_mp_rank_00_optim_states.pt");
  auto doc = Parse(original);
  ASSERT_TRUE(doc.ok());
  NodeId osd = doc->Get(doc->root(), "optimizer_state_dict");
  NodeId pc = doc->Get(osd, "partition_count");
  ASSERT_EQ(doc->AsInt(pc), 4);
  doc->mutable_node(pc).scalar = 7;
  auto written = Write(*doc);
  ASSERT_TRUE(written.ok());
  ASSERT_EQ(written->size(), original.size());
  size_t diffs = 0;
  for (size_t i = 0; i < original.size(); ++i) diffs += original[i] != (*written)[i];
  EXPECT_EQ(diffs, 1u);
  auto reparsed = Parse(*written);
  ASSERT_TRUE(reparsed.ok());
  EXPECT_EQ(reparsed->AsInt(reparsed->Get(reparsed->Get(reparsed->root(), "optimizer_state_dict"),
                                          "partition_count")),
            7);
}

// Building code holds node references across Add* (the views append to a
// dict while adding its keys); growth must never move a node. Under
// AddressSanitizer a moved node is a use-after-free here.
TEST(PickleValues, NodesStayPutWhileTheDocumentGrows) {
  Document doc;
  const NodeId dict = doc.AddDict({});
  const Node& dict_node = doc.node(dict);
  const NodeId key = doc.AddStr("first");
  std::string_view key_text = *doc.AsStr(key);
  for (int i = 0; i < 100000; ++i) {
    doc.AppendPair(dict, doc.AddStr("k" + std::to_string(i)), doc.AddInt(i));
  }
  EXPECT_EQ(&dict_node, &doc.node(dict));
  EXPECT_EQ(dict_node.items.size(), 200000u);
  EXPECT_EQ(key_text, "first");
  EXPECT_EQ(doc.AsInt(doc.Get(dict, "k99999")), 99999);
  const NodeId list = doc.AddList({});
  doc.Append(list, key);
  EXPECT_EQ(doc.AsStr(doc.node(list).items[0]), "first");
}

TEST(PickleValues, CopyFromKeepsSharingAndInternsGlobals) {
  auto src = Parse(ReadFile(TestDataDir() + "/pickles/shared.p2.pkl"));
  ASSERT_TRUE(src.ok());
  Document dst;
  NodeId pre = dst.Global("collections", "OrderedDict");
  std::vector<NodeId> map;
  NodeId root = dst.CopyFrom(*src, src->root(), &map);
  dst.set_root(root);
  EXPECT_EQ(dst.Get(root, "a"), dst.Get(root, "b"));
  EXPECT_EQ(dst.Global("collections", "OrderedDict"), pre);
  auto written = Write(dst);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, ReadFile(TestDataDir() + "/pickles/shared.p2.pkl"));
}

// --- hostile and broken input ------------------------------------------

TEST(PickleSafety, ForeignGlobalIsANameNotACall) {
  // pickle.dumps of a __reduce__ returning (os.system, ('touch ...',)).
  const std::string marker = ::testing::TempDir() + "/ucfs_pickle_pwned";
  std::filesystem::remove(marker);
  std::string cmd = "touch " + marker;
  std::string evil(
      "\x80\x02"
      "cos\nsystem\nq\x00X",
      16);
  evil += std::string(1, static_cast<char>(cmd.size())) + std::string(3, '\0') + cmd;
  evil += "q\x01\x85q\x02Rq\x03.";
  auto doc = Parse(evil);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  const Node& root = doc->node(doc->root());
  EXPECT_EQ(root.kind, Kind::kReduce);
  EXPECT_TRUE(doc->IsGlobal(root.a, "os", "system"));
  EXPECT_FALSE(std::filesystem::exists(marker));
  auto written = Write(*doc);
  ASSERT_TRUE(written.ok());
  EXPECT_EQ(*written, evil);
}

TEST(PickleSafety, EveryTruncationIsAnErrorWithAnOffset) {
  std::string original =
      DataPkl(testing::FixtureDir("z3_tricky_fp32_ws4") +
              "/checkpoint/global_step4/zero_pp_rank_0_mp_rank_00_model_states.pt");
  for (size_t cut = 0; cut < original.size(); ++cut) {
    auto doc = Parse(std::string_view(original).substr(0, cut));
    ASSERT_FALSE(doc.ok()) << "cut at " << cut;
    EXPECT_NE(doc.status().message().find("byte"), std::string::npos) << doc.status().ToString();
  }
}

TEST(PickleSafety, RandomCorruptionNeverCrashes) {
  std::string original =
      DataPkl(testing::FixtureDir("z3_bf16_ws3") +
              "/checkpoint/global_step4/bf16_zero_pp_rank_1_mp_rank_00_optim_states.pt");
  std::mt19937 rng(1234);
  int failures = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = original;
    int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    auto doc = Parse(bytes);
    if (!doc.ok()) {
      ++failures;
      continue;
    }
    auto written = Write(*doc);
    ASSERT_TRUE(written.ok());
    ASSERT_TRUE(Parse(*written).ok());
  }
  EXPECT_GT(failures, 0);
}

TEST(PickleSafety, DeepNestingIsRefused) {
  std::string deep = "\x80\x02" + std::string(5000, ']') + std::string(4999, 'a') + ".";
  auto doc = Parse(deep);
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("nested"), std::string::npos) << doc.status().ToString();
  // A tamer nesting is fine.
  std::string ok = "\x80\x02" + std::string(100, ']') + std::string(99, 'a') + ".";
  EXPECT_TRUE(Parse(ok).ok());
}

TEST(PickleSafety, CyclesAreRefused) {
  auto doc =
      Parse(std::string("\x80\x02]q\x00h\x00"
                        "a.",
                        9));
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("cycle"), std::string::npos) << doc.status().ToString();
}

TEST(PickleSafety, MalformedOpcodesNameTheirOffset) {
  struct Case {
    std::string bytes;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {std::string("\x80\x02h\x05.", 5), "memo key 5 was never stored (opcode at byte 2)"},
      {"\x80\x02"
       "a.",
       "stack underflow (opcode at byte 2)"},
      {std::string("\x80\x02K\x01K\x02.", 7), "STOP with 2 values"},
      {"\x80\x02"
       "cos\nsys",
       "unterminated line"},
      {std::string("\x80\x02X\xff\xff\xff\x7f"
                   "abc.",
                   11),
       "runs past the end"},
      {std::string("\x80\x02K\x01)b.", 7), "BUILD on a int"},
      {"\x80\x02\xff.", "unsupported opcode 0xff at byte 2"},
      {"\x80\x09.", "unsupported pickle protocol 9"},
      {"\x80\x02"
       "1.",
       "no MARK"},
  };
  for (const auto& c : cases) {
    auto doc = Parse(c.bytes);
    ASSERT_FALSE(doc.ok()) << c.expect;
    EXPECT_NE(doc.status().message().find(c.expect), std::string::npos) << doc.status().ToString();
  }
}

// Inputs the fuzzers found (tests/data/fuzz_regressions).
TEST(PickleSafety, GlobalNamesWithNewlinesAreRefused) {
  auto doc = Parse(ReadFile(TestDataDir() + "/fuzz_regressions/pickle-global-newline.pkl"));
  ASSERT_FALSE(doc.ok());
  EXPECT_NE(doc.status().message().find("newline"), std::string::npos);
  Document built;
  built.set_root(built.Global("a\nb", "c"));
  EXPECT_FALSE(Write(built).ok());
  // Interning keys on both parts: these are two different globals.
  EXPECT_NE(built.Global("a", "b\nc"), built.Global("a\nb", "c"));
}

TEST(PickleSafety, LimitsAreEnforced) {
  std::string many = "\x80\x02]" + std::string(1000, 'N') + ".";
  ParseLimits limits;
  limits.max_nodes = 100;
  EXPECT_FALSE(Parse(many, limits).ok());
  limits = ParseLimits{};
  limits.max_bytes = 10;
  EXPECT_FALSE(Parse(many, limits).ok());
}

}  // namespace
}  // namespace ucfs::pickle

#include "test_support.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <utility>

#include "ucfs/base/env.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_file.h"
#include "ucfs/codec/torch_tensor.h"
#include "ucfs/codec/zip.h"
#include "ucfs/overlay/overlay_fs.h"
#include "ucfs/vfs/source_files.h"

namespace ucfs::testing {

namespace fs = std::filesystem;

std::string TestDataDir() { return UCFS_TEST_DATA; }

std::string FixtureDir(const std::string& name) { return TestDataDir() + "/fixtures/" + name; }
std::string TpFixtureDir(const std::string& name) {
  // A DeepSpeed 0.19.8 fixture of tests/data/modern, named "modern/<name>".
  if (name.starts_with("modern/")) return TestDataDir() + "/" + name;
  return TestDataDir() + "/tp_fixtures/" + name;
}

std::vector<std::string> TpGridFixtureNames() {
  return {"tp_z1_fp32_t2d2",   "pp_bf16opt_p2t2d2",           "z3_tp_fp32_t2d2",
          "tp_z1_swiglu_t4d1", "pp_z1_fp32_p2d2_nomodelaxis", "tp_z2_bf16_t2d3",
          "z3_tp_bf16_t2d3"};
}

std::vector<std::string> TpFixturesWithExpected() {
  std::vector<std::string> out;
  for (const std::string& name : TpGridFixtureNames()) {
    if (fs::is_directory(TpFixtureDir(name) + "/expected")) out.push_back(name);
  }
  return out;
}

namespace {

// The fixtures whose ORACLE.json names a ZeRO stage `stage3 ? 3 : 1-2`.
std::vector<std::string> FixturesOfStage(bool stage3) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(TestDataDir() + "/fixtures")) {
    if (!e.is_directory()) continue;
    const std::string name = e.path().filename().string();
    if ((Oracle(name).at("zero_stage").get<int>() == 3) == stage3) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<std::string> FixtureNames() { return FixturesOfStage(true); }

std::vector<std::string> FlatGroupFixtureNames() { return FixturesOfStage(false); }

std::vector<std::string> TorchFilesBelow(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    auto ext = e.path().extension();
    if (e.is_regular_file() && (ext == ".pt" || ext == ".bin")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string ModernDir(const std::string& name) { return TestDataDir() + "/modern/" + name; }

const nlohmann::json& ModernFacts(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, nlohmann::json> parsed;  // elements never move (as Oracle's)
  std::lock_guard<std::mutex> lock(mu);
  auto it = parsed.find(name);
  if (it == parsed.end()) {
    it = parsed.emplace(name, nlohmann::json::parse(ReadFile(ModernDir(name) + "/MODERN.json")))
             .first;
  }
  return it->second;
}

std::string LiveBytes(const nlohmann::json& record) {
  // Decoded here, not by ucfs: the reference must not share its code.
  const std::string in = record.at("b64").get<std::string>();
  std::string out;
  uint32_t bits = 0;
  int have = 0;
  for (char ch : in) {
    int v = -1;
    if (ch >= 'A' && ch <= 'Z') v = ch - 'A';
    if (ch >= 'a' && ch <= 'z') v = ch - 'a' + 26;
    if (ch >= '0' && ch <= '9') v = ch - '0' + 52;
    if (ch == '+') v = 62;
    if (ch == '/') v = 63;
    if (v < 0) continue;  // '=' padding
    bits = (bits << 6) | static_cast<uint32_t>(v);
    have += 6;
    if (have >= 8) {
      have -= 8;
      out.push_back(static_cast<char>((bits >> have) & 0xff));
    }
  }
  return out;
}

std::string LiveState(const std::string& fixture, const std::string& param,
                      const std::string& state) {
  return LiveBytes(ModernFacts(fixture).at("live_state").at("params").at(param).at(state));
}

const nlohmann::json& Oracle(const std::string& fixture) {
  // Every test binary lists the fixtures at static initialisation, once per
  // INSTANTIATE_TEST_SUITE_P, and ctest starts one process per test case:
  // parsing the twelve ORACLE.json files (1.2 MB) each time took 3 s of
  // every process under ASan. A std::map's elements never move, so the
  // reference returned stays valid as later fixtures are added.
  static std::mutex mu;
  static std::map<std::string, nlohmann::json> parsed;
  std::lock_guard<std::mutex> lock(mu);
  auto it = parsed.find(fixture);
  if (it == parsed.end()) {
    auto oracle = nlohmann::json::parse(ReadFile(FixtureDir(fixture) + "/ORACLE.json"));
    it = parsed.emplace(fixture, std::move(oracle)).first;
  }
  return it->second;
}

const nlohmann::json& TpOracle(const std::string& fixture) {
  return Oracle("../tp_fixtures/" + fixture);
}

const nlohmann::json& ReferenceManifest() {
  static const nlohmann::json manifest = [] {
    std::string path = std::string(UCFS_REFERENCE_DIR) + "/manifest.json";
    if (!fs::exists(path)) {
      ADD_FAILURE() << path << " is missing: run the reference_tensors ctest first "
                    << "(ctest runs it before these tests)";
      return nlohmann::json::object();
    }
    return nlohmann::json::parse(ReadFile(path));
  }();
  return manifest;
}

ReferenceTensor LoadReference(const nlohmann::json& entry) {
  ReferenceTensor t;
  t.dtype = entry.at("dtype").get<std::string>();
  t.shape = entry.at("shape").get<std::vector<int64_t>>();
  t.requires_grad = entry.at("requires_grad").get<bool>();
  t.bytes = ReadFile(std::string(UCFS_REFERENCE_DIR) + "/" + entry.at("file").get<std::string>());
  return t;
}

namespace {

// A torch.save file re-made with every record inline: `edit` gets the
// records (full names, CRC 0) and the archive's prefix.
std::string RewriteRecords(
    const std::string& bytes,
    const std::function<void(const std::string& prefix, std::vector<ZipEntrySpec>*)>& edit) {
  MemEnv env;
  env.WriteFile("/f.pt", bytes);
  auto file = env.Open("/f.pt");
  auto archive = ZipArchive::Open(**file);
  EXPECT_TRUE(archive.ok()) << archive.status().ToString();
  if (!archive.ok()) return "";
  std::vector<ZipEntrySpec> specs;
  for (const auto& rec : archive->records()) {
    std::string data = *ZipArchive::ReadRecord(**file, rec);
    specs.push_back({rec.name, data.size(), std::move(data), 0});
  }
  edit(archive->prefix(), &specs);
  auto layout = ZipLayout::Plan(specs);
  EXPECT_TRUE(layout.ok());
  return layout->generated();  // every entry is inline, so this is the file
}

}  // namespace

std::string RepackTorchFile(const std::string& bytes,
                            const std::function<void(pickle::Document*)>& edit) {
  return RewriteRecords(bytes, [&](const std::string&, std::vector<ZipEntrySpec>* specs) {
    for (ZipEntrySpec& spec : *specs) {
      if (!spec.name.ends_with("/data.pkl")) continue;
      auto doc = pickle::Parse(*spec.inline_data);
      EXPECT_TRUE(doc.ok());
      edit(&*doc);
      spec.inline_data = *pickle::Write(*doc);
      spec.size = spec.inline_data->size();
    }
  });
}

std::string AddTorchRecord(const std::string& bytes, const std::string& relative_name,
                           const std::string& data) {
  return RewriteRecords(bytes, [&](const std::string& prefix, std::vector<ZipEntrySpec>* specs) {
    auto pkl = std::find_if(specs->begin(), specs->end(),
                            [](const ZipEntrySpec& e) { return e.name.ends_with("/data.pkl"); });
    specs->insert(pkl == specs->end() ? pkl : pkl + 1,
                  {prefix + "/" + relative_name, data.size(), data, 0});
  });
}

std::string ReplaceTorchRecord(const std::string& bytes, const std::string& relative_name,
                               const std::string& data) {
  return RewriteRecords(bytes, [&](const std::string& prefix, std::vector<ZipEntrySpec>* specs) {
    for (ZipEntrySpec& e : *specs) {
      if (e.name == prefix + "/" + relative_name) e = {e.name, data.size(), data, 0};
    }
  });
}

std::string ReadExtents(const Checkpoint& ckpt, const std::vector<Extent>& extents, Env* env) {
  std::string out;
  for (const Extent& e : extents) {
    auto file = (env != nullptr ? env : Env::Posix())->Open(ckpt.sources()[e.file].path);
    EXPECT_TRUE(file.ok()) << file.status().ToString();
    if (!file.ok()) return out;
    auto bytes = (*file)->ReadString(e.offset, e.length);
    EXPECT_TRUE(bytes.ok()) << bytes.status().ToString();
    if (bytes.ok()) out += *bytes;
  }
  return out;
}

std::string FullState(const Checkpoint& ckpt, size_t param, size_t state, Env* env) {
  std::vector<Extent> extents;
  const uint64_t bytes = ckpt.params()[param].numel * Info(ckpt.states()[state].dtype).element_size;
  Status st = ckpt.MapState(param, state, 0, bytes, &extents);
  EXPECT_TRUE(st.ok()) << ckpt.params()[param].name << ": " << st.ToString();
  return ReadExtents(ckpt, extents, env);
}

std::map<std::string, FileState> FilesBelow(const std::string& dir) {
  std::map<std::string, FileState> out;
  if (!std::filesystem::exists(dir)) return out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    const std::string rel = std::filesystem::relative(e.path(), dir).string();
    struct stat st {};
    EXPECT_EQ(::lstat(e.path().c_str(), &st), 0) << e.path();
    out[rel] =
        S_ISREG(st.st_mode) ? FileState{ReadFile(e.path()), NanosOf(st.st_mtim)} : FileState{};
  }
  return out;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(f.good()) << path;
}

InodeId ResolvePath(View& view, const std::string& path) {
  InodeId node = kRootInode;
  size_t start = 0;
  while (start < path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    auto next = view.Lookup(node, path.substr(start, slash - start));
    EXPECT_TRUE(next.ok()) << path << ": " << next.status().ToString();
    if (!next.ok()) return 0;
    node = *next;
    start = slash + 1;
  }
  return node;
}

std::string ReadViewFile(Env& env, View& view, InodeId node) {
  auto attr = view.GetAttr(node);
  EXPECT_TRUE(attr.ok()) << attr.status().ToString();
  if (!attr.ok()) return "";
  std::vector<ReadPiece> pieces;
  EXPECT_TRUE(view.Plan(node, 0, attr->size, &pieces).ok());
  SourceFiles reader(env, [&](uint32_t i) { return view.source(i); });
  std::string out;
  EXPECT_TRUE(reader.Read(pieces, &out).ok());
  EXPECT_EQ(out.size(), attr->size);
  return out;
}

void ViewTree(Env& env, View& view, InodeId dir, const std::string& prefix,
              std::map<std::string, std::string>* out) {
  auto listed = view.ReadDir(dir);
  ASSERT_TRUE(listed.ok()) << prefix << ": " << listed.status().ToString();
  for (const auto& [name, attr] : *listed) {
    if (attr.is_dir) {
      ViewTree(env, view, attr.inode, prefix + name + "/", out);
    } else {
      (*out)[prefix + name] = ReadViewFile(env, view, attr.inode);
    }
  }
}

void CopyViewCheckpoint(Env& env, View& view, const std::string& tag, MemEnv* out,
                        const std::string& root) {
  auto latest = view.Lookup(kRootInode, "latest");
  ASSERT_TRUE(latest.ok()) << latest.status().ToString();
  out->WriteFile(root + "/latest", ReadViewFile(env, view, *latest));
  auto dir = view.Lookup(kRootInode, tag);
  ASSERT_TRUE(dir.ok()) << tag << ": " << dir.status().ToString();
  auto entries = view.ReadDir(*dir);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  for (const auto& [name, attr] : *entries) {
    out->WriteFile(root + "/" + tag + "/" + name, ReadViewFile(env, view, attr.inode));
  }
}

std::vector<std::string> EntryNames(View& view, InodeId dir) {
  std::vector<std::string> names;
  auto listed = view.ReadDir(dir);
  EXPECT_TRUE(listed.ok()) << listed.status().ToString();
  if (listed.ok()) {
    for (const auto& [name, attr] : *listed) names.push_back(name);
  }
  return names;
}

std::shared_ptr<View> SmallView() {
  auto view = std::make_shared<View>(*Env::Posix(), 0);
  auto add = [&](InodeId dir, const char* name, const char* text) {
    EXPECT_TRUE(view->AddFile(dir, name, std::make_shared<InlineContent>(text)).ok());
  };
  add(kRootInode, "latest", "t");
  InodeId t = *view->AddDirectory(kRootInode, "t");
  add(t, "a", "A-view");
  add(t, "b", "B-view");
  InodeId d = *view->AddDirectory(kRootInode, "d");
  add(d, "x", "X-view");
  return view;
}

std::string FreshTempDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/ucfs_" + name;
  std::filesystem::remove_all(dir);
  return dir;
}

std::string FreshTestDir(const std::string& prefix) {
  const std::string dir =
      FreshTempDir(prefix + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::create_directories(dir);
  return dir;
}

std::unique_ptr<OverlayFs> FreshOverlayFs(std::shared_ptr<View> view, const std::string& prefix,
                                          std::string* upper) {
  *upper = FreshTempDir(prefix + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  auto overlay = Overlay::Open(*upper, view, *Env::Posix());
  EXPECT_TRUE(overlay.ok()) << overlay.status().ToString();
  if (!overlay.ok()) return nullptr;
  return std::make_unique<OverlayFs>(std::move(overlay).value(), std::move(view));
}

std::vector<double> FloatValues(const std::string& bytes, DType dtype) {
  std::vector<double> out;
  const uint32_t es = Info(dtype).element_size;
  for (size_t i = 0; i + es <= bytes.size(); i += es) {
    const char* p = bytes.data() + i;
    switch (dtype) {
      case DType::kFloat32: {
        float f;
        std::memcpy(&f, p, 4);
        out.push_back(f);
        break;
      }
      case DType::kFloat64: {
        double d;
        std::memcpy(&d, p, 8);
        out.push_back(d);
        break;
      }
      case DType::kBFloat16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        const uint32_t bits = uint32_t{h} << 16;
        float f;
        std::memcpy(&f, &bits, 4);
        out.push_back(f);
        break;
      }
      case DType::kFloat16: {
        uint16_t h;
        std::memcpy(&h, p, 2);
        const int exponent = (h >> 10) & 0x1f;
        const int mantissa = h & 0x3ff;
        double v;
        if (exponent == 0) {
          v = std::ldexp(mantissa, -24);  // subnormal
        } else if (exponent == 31) {
          v = mantissa ? std::nan("") : INFINITY;
        } else {
          v = std::ldexp(mantissa + 1024, exponent - 25);
        }
        out.push_back(h & 0x8000 ? -v : v);
        break;
      }
      default:
        ADD_FAILURE() << "FloatValues: not a floating dtype";
        return out;
    }
  }
  return out;
}

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

void RemoveDictKey(pickle::Document* doc, pickle::NodeId dict, std::string_view key) {
  pickle::Node& node = doc->mutable_node(dict);
  for (size_t i = node.list_items; i + 1 < node.items.size(); i += 2) {
    if (doc->AsStr(node.items[i]) == key) {
      node.items.erase(node.items.begin() + static_cast<std::ptrdiff_t>(i),
                       node.items.begin() + static_cast<std::ptrdiff_t>(i) + 2);
      return;
    }
  }
}

BinContents ReadBin(const std::string& file) {
  BinContents out;
  MemEnv env;
  env.WriteFile("/f.bin", file);
  auto summary = SummarizeTorchFile(env, "/f.bin");
  EXPECT_TRUE(summary.ok()) << summary.status().ToString();
  if (!summary.ok()) return out;
  auto doc = pickle::Parse(summary->pickle);
  EXPECT_TRUE(doc.ok());
  out.plain_dict = doc->node(doc->root()).kind == pickle::Kind::kDict;
  const auto items = doc->MappingItems(doc->root());
  EXPECT_TRUE(items.has_value());
  if (!items) return out;
  for (const auto& [k, v] : *items) {
    auto t = MatchTensor(*doc, v);
    EXPECT_TRUE(t.ok() && t->has_value());
    const ZipRecord* rec = summary->Find("data/" + (*t)->storage_key);
    EXPECT_NE(rec, nullptr);
    const std::string name(*doc->AsStr(k));
    out.names.push_back(name);
    out.tensors[name] = {(*t)->storage_key,
                         file.substr(rec->data_offset + (*t)->byte_offset(), (*t)->byte_size())};
  }
  return out;
}

Tree Snapshot(Overlay& o, View& view) {
  Tree tree;
  SourceFiles reader(*Env::Posix(), [&](uint32_t i) { return view.source(i); });
  auto walk = [&](auto&& self, const std::string& dir) -> void {
    auto entries = o.ReadDir(dir);
    EXPECT_TRUE(entries.ok()) << dir << ": " << entries.status().ToString();
    if (!entries.ok()) return;
    for (const auto& [name, e] : *entries) {
      const std::string path = dir.empty() ? name : dir + "/" + name;
      if (e.is_dir) {
        tree[path] = std::nullopt;
        self(self, path);
      } else if (e.in_upper) {
        tree[path] = ReadFile(e.upper_path);
      } else {
        std::vector<ReadPiece> pieces;
        EXPECT_TRUE(view.Plan(e.lower, 0, view.GetAttr(e.lower)->size, &pieces).ok());
        std::string bytes;
        EXPECT_TRUE(reader.Read(pieces, &bytes).ok());
        tree[path] = bytes;
      }
    }
  };
  walk(walk, "");
  return tree;
}

void Write(Overlay& o, const std::string& path, const std::string& text, int flags) {
  auto fd = o.OpenWrite(path, O_WRONLY | flags, 0644);
  ASSERT_TRUE(fd.ok()) << path << ": " << fd.status().ToString();
  if (!(flags & O_TRUNC)) ::lseek(fd->get(), 0, SEEK_END);
  ASSERT_EQ(::write(fd->get(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
}

struct stat StatOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

void SetTimes(const std::string& path, int64_t atime_s, int64_t mtime_s) {
  const timespec times[2] = {{atime_s, 0}, {mtime_s, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << path;
}

}  // namespace ucfs::testing

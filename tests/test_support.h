// Shared helpers for the tests: where the fixtures are, and the reference
// tensors that torch.load read from them (tests/tools/dump_reference.py).
#ifndef UCFS_TESTS_TEST_SUPPORT_H_
#define UCFS_TESTS_TEST_SUPPORT_H_

#include <sys/stat.h>

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/vfs/view.h"

namespace ucfs {
class Overlay;
class OverlayFs;
}  // namespace ucfs

namespace ucfs::testing {

// tests/data
std::string TestDataDir();
// tests/data/fixtures/<name>
std::string FixtureDir(const std::string& name);
// A tensor- or pipeline-parallel fixture's directory (tests/data/tp_fixtures;
// "modern/<name>": DeepSpeed 0.19.8's AutoTP fixtures in tests/data/modern).
std::string TpFixtureDir(const std::string& name);
// The tensor- and pipeline-parallel fixtures (T > 1 or P > 1), and those of
// them with a correct universal checkpoint in expected/ (all but ZeRO-3
// bf16 with TP, whose values ORACLE.json holds).
std::vector<std::string> TpGridFixtureNames();
std::vector<std::string> TpFixturesWithExpected();
// The ZeRO-3 fixtures' names (z3_fp32_ws2, ...).
std::vector<std::string> FixtureNames();
// The ZeRO-1 and -2 fixtures' names (z2_tricky_fp32_ws2, ...).
std::vector<std::string> FlatGroupFixtureNames();
// Every *.pt / *.bin file below `dir`, sorted.
std::vector<std::string> TorchFilesBelow(const std::string& dir);
std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& bytes);
// A file's bytes and modification time: what a test that must leave it
// untouched compares.
struct FileState {
  std::string bytes;
  int64_t mtime_ns = 0;
  bool operator==(const FileState&) const = default;
};
// Every entry below `dir` by its path relative to `dir`: a regular file's
// state, an empty one for anything else.
std::map<std::string, FileState> FilesBelow(const std::string& dir);
// The fixture's ORACLE.json, parsed once per process.
const nlohmann::json& Oracle(const std::string& fixture);
// tests/data/modern/<name>: a fixture written by DeepSpeed 0.19.8, and its
// MODERN.json (parsed once).
std::string ModernDir(const std::string& name);
const nlohmann::json& ModernFacts(const std::string& name);
// The bytes of a MODERN.json tensor record ({"b64": base64 of its
// little-endian bytes, C order, ...}).
std::string LiveBytes(const nlohmann::json& record);
// live_state.params[param][state]'s bytes ("fp32", "exp_avg", ...).
std::string LiveState(const std::string& fixture, const std::string& param,
                      const std::string& state);
// A tensor- or pipeline-parallel fixture's ORACLE.json, parsed once.
const nlohmann::json& TpOracle(const std::string& fixture);

// A tensor as torch.load saw it.
struct ReferenceTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  bool requires_grad = false;
  std::string bytes;
};
// The reference manifest (reference/manifest.json), parsed once.
const nlohmann::json& ReferenceManifest();
ReferenceTensor LoadReference(const nlohmann::json& entry);

// A torch.save file's bytes with its data.pkl edited by `edit` (for making
// hostile or inconsistent inputs from real ones).
std::string RepackTorchFile(const std::string& bytes,
                            const std::function<void(pickle::Document*)>& edit);

// Removes key `key` (and its value) from dict `dict` of `doc`, if there.
void RemoveDictKey(pickle::Document* doc, pickle::NodeId dict, std::string_view key);

// A torch.save file's bytes with a stored record `relative_name` holding
// `data` added right after data.pkl (where torch >= 2.1 puts `byteorder`).
std::string AddTorchRecord(const std::string& bytes, const std::string& relative_name,
                           const std::string& data);

// The same file with the stored record `relative_name` holding `data`.
std::string ReplaceTorchRecord(const std::string& bytes, const std::string& relative_name,
                               const std::string& data);

// Little-endian float32, float64, bfloat16 or float16 elements as doubles
// (exact: every such value is a double), decoded here rather than by ucfs.
std::vector<double> FloatValues(const std::string& bytes, DType dtype);

// The bytes of `extents` of `ckpt`'s source files, concatenated, read
// through `env` (the real file system by default).
std::string ReadExtents(const Checkpoint& ckpt, const std::vector<Extent>& extents,
                        Env* env = nullptr);
// The whole of state `state` of param `param`, as MapState maps it.
std::string FullState(const Checkpoint& ckpt, size_t param, size_t state, Env* env = nullptr);

// A small read-only view for overlay tests: latest, t/{a,b}, d/x, whose
// contents are "t", "A-view", "B-view", "X-view".
std::shared_ptr<View> SmallView();

// The inode at '/'-separated `path` below `view`'s root, failing the test
// (and answering 0) where a step is not found.
InodeId ResolvePath(View& view, const std::string& path);
// The whole of file `node` of `view`, its sources read through `env`
// (failing the test where a step fails).
std::string ReadViewFile(Env& env, View& view, InodeId node);
// Every file below directory `dir` of `view`, by its path from `dir` after
// `prefix`, with its bytes (read as ReadViewFile reads them).
void ViewTree(Env& env, View& view, InodeId dir, const std::string& prefix,
              std::map<std::string, std::string>* out);
// The checkpoint a view shows, copied into `out` below `root`: its
// `latest` and every file of directory `tag`.
void CopyViewCheckpoint(Env& env, View& view, const std::string& tag, MemEnv* out,
                        const std::string& root);
// The names in directory `dir` of `view`, as ReadDir sorts them.
std::vector<std::string> EntryNames(View& view, InodeId dir);

// A strict safetensors reader: the 8-byte length, a JSON header, and data
// offsets that tile the data exactly, in order, with nothing left over.
// Returns name -> (dtype, shape, bytes).
struct SafeTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
std::map<std::string, SafeTensor> ParseSafetensors(const std::string& file);

// The tensors of a pytorch_model.bin (or a shard of it): name -> (storage
// key, bytes), and whether its top object is a plain dict (read by ucfs's
// codec, failing the test where it cannot).
struct BinContents {
  bool plain_dict = false;
  std::vector<std::string> names;
  std::map<std::string, std::pair<std::string, std::string>> tensors;
};
BinContents ReadBin(const std::string& file);

// A fresh (removed) directory path under the test temp dir.
std::string FreshTempDir(const std::string& name);
// A fresh directory, made, named `prefix` and the running test's name.
std::string FreshTestDir(const std::string& prefix);

// An OverlayFs over `view` (a writable mount without the kernel), writing
// into the fresh temporary directory `prefix` + the running test's name,
// whose path goes to *upper. Null, with a test failure, if it cannot open.
std::unique_ptr<OverlayFs> FreshOverlayFs(std::shared_ptr<View> view, const std::string& prefix,
                                          std::string* upper);

// An overlay's whole tree as path -> contents (nullopt for a directory),
// the view's files read through their pieces.
using Tree = std::map<std::string, std::optional<std::string>>;
Tree Snapshot(Overlay& overlay, View& view);
// Writes `text` to `path` through the overlay (appended unless `flags`
// holds O_TRUNC).
void Write(Overlay& overlay, const std::string& path, const std::string& text, int flags);
// lstat(2) of `path` (a test failure if it fails).
struct stat StatOf(const std::string& path);
// Sets the atime and mtime of `path` (not following a symlink).
void SetTimes(const std::string& path, int64_t atime_s, int64_t mtime_s);

}  // namespace ucfs::testing

#endif  // UCFS_TESTS_TEST_SUPPORT_H_

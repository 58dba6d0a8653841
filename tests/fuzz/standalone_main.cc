// Replay driver for compilers without libFuzzer (g++): runs the fuzz target
// once on every file named on the command line and on every file below
// every directory named there, so the seed corpus and saved crash inputs
// still run as regression tests. Arguments starting with '-' are libFuzzer
// flags and are ignored, so both builds take the same command line.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// Every regular file at or below `path`, sorted so runs are reproducible.
bool CollectInputs(const fs::path& path, std::vector<fs::path>* out) {
  std::error_code ec;
  if (fs::is_regular_file(path, ec)) {
    out->push_back(path);
    return true;
  }
  if (!fs::is_directory(path, ec)) {
    std::fprintf(stderr, "standalone_main: %s: no such file or directory\n", path.c_str());
    return false;
  }
  std::vector<fs::path> found;
  for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_regular_file(ec)) found.push_back(it->path());
  }
  if (ec) {
    std::fprintf(stderr, "standalone_main: %s: %s\n", path.c_str(), ec.message().c_str());
    return false;
  }
  std::sort(found.begin(), found.end());
  out->insert(out->end(), found.begin(), found.end());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> inputs;
  bool ok = true;
  int paths = 0;
  for (int i = 1; i < argc; ++i) {
    if (argv[i][0] == '-') continue;
    ++paths;
    ok = CollectInputs(argv[i], &inputs) && ok;
  }
  if (paths == 0) {
    // Unlike libFuzzer there is nothing to do without inputs; say so rather
    // than pass silently.
    std::fprintf(stderr, "usage: %s [-flag ...] FILE_OR_DIR...\n", argv[0]);
    return 2;
  }
  if (!ok) return 1;

  for (const fs::path& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) {
      std::fprintf(stderr, "standalone_main: cannot read %s\n", path.c_str());
      return 1;
    }
    // A crash or abort here names the input it happened on.
    std::fprintf(stderr, "Running: %s\n", path.c_str());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("standalone_main: ran %zu inputs\n", inputs.size());
  return 0;
}

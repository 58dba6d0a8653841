// How long ucfs takes to understand a checkpoint: Checkpoint::Open (zip
// directories, data.pkl parsing, the parameter table) against a baseline of
// merely reading the same bytes (each rank file's zip directory and
// data.pkl), measured in the same run, alternating, so machine noise hits
// both alike. Reports per-shard times and the ratio.
//
// usage: open_bench CKPT [repetitions]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ucfs/checkpoint/checkpoint.h"
#include "ucfs/codec/zip.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The baseline: the reads Checkpoint::Open makes (every optimizer file,
// rank 0's model states, the other ranks' only for frozen fragments),
// without parsing.
bool ReadOnly(const ucfs::Checkpoint& c, size_t* bytes, size_t* files_read) {
  const ucfs::CheckpointFiles& files = c.files();
  std::vector<std::string> paths = files.optim_files;
  for (size_t r = 0; r < files.model_files.size(); ++r) {
    if (!files.model_files[r].empty() && (r == 0 || !c.frozen_params().empty())) {
      paths.push_back(files.model_files[r]);
    }
  }
  for (const auto& path : paths) {
    auto file = ucfs::Env::Posix()->Open(path);
    if (!file.ok()) return false;
    auto archive = ucfs::ZipArchive::Open(**file);
    if (!archive.ok()) return false;
    auto pkl = ucfs::ZipArchive::ReadRecord(**file, *archive->Find("data.pkl"));
    if (!pkl.ok()) return false;
    *bytes += pkl->size();
  }
  *files_read = paths.size();
  return true;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s CKPT [repetitions]\n", argv[0]);
    return 2;
  }
  const std::string path = argv[1];
  const int reps = argc > 2 ? std::stoi(argv[2]) : 20;
  auto first = ucfs::Checkpoint::Open(*ucfs::Env::Posix(), path);
  if (!first.ok()) {
    std::fprintf(stderr, "%s\n", first.status().message().c_str());
    return 1;
  }
  size_t shards = 0;
  std::vector<double> open_s, read_s;
  size_t pickle_bytes = 0;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    size_t bytes = 0;
    if (!ReadOnly(*first, &bytes, &shards)) return 1;
    auto t1 = Clock::now();
    auto c = ucfs::Checkpoint::Open(*ucfs::Env::Posix(), path);
    auto t2 = Clock::now();
    if (!c.ok()) return 1;
    pickle_bytes = bytes;
    read_s.push_back(Seconds(t0, t1));
    open_s.push_back(Seconds(t1, t2));
  }
  const double open_med = Median(open_s), read_med = Median(read_s);
  std::printf("checkpoint      %s\n", path.c_str());
  std::printf(
      "files           %zu rank files read (world size %u), %zu params, %.1f KiB of data.pkl "
      "read\n",
      shards, first->world_size(), first->params().size(),
      static_cast<double>(pickle_bytes) / 1024.0);
  std::printf("read only       %.3f ms total, %.3f ms per rank file (median of %d)\n",
              read_med * 1e3, read_med * 1e3 / static_cast<double>(shards), reps);
  std::printf("Checkpoint::Open %.3f ms total, %.3f ms per rank file\n", open_med * 1e3,
              open_med * 1e3 / static_cast<double>(shards));
  std::printf("ratio           %.2fx the cost of reading the same bytes\n", open_med / read_med);
  return 0;
}

// The reader every read benchmark uses, so that ucfs and its baselines are
// read the same way: files are read whole, in the order given, with one
// reused buffer (cat mallocs a buffer per file, whose page faults cost more
// than the reads on a tree of small cached files), and the time is printed.
//
// usage: read_files [--block BYTES] [--direct] [--parallel] FILE...
//        read_files ... -            (the file list on stdin, one per line)
//   --block BYTES  the size of each read (default 1 MiB)
//   --direct       O_DIRECT reads: the disk, never the page cache
//   --parallel     a thread per file, all at once (else one file after another)
// Prints "BYTES SECONDS" on stdout; a failed open or read is an error.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<char, AlignedFree>;

Buffer Allocate(size_t size) {
  void* p = nullptr;
  if (posix_memalign(&p, 4096, size) != 0) return nullptr;
  return Buffer(static_cast<char*>(p));
}

// Reads `path` whole into `buffer`; returns the bytes read, or -1.
long long ReadWhole(const std::string& path, char* buffer, size_t block, bool direct) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0));
  if (fd < 0) {
    std::fprintf(stderr, "read_files: %s: %s\n", path.c_str(), std::strerror(errno));
    return -1;
  }
  long long total = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buffer, block);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "read_files: %s at %lld: %s\n", path.c_str(), total,
                   std::strerror(errno));
      ::close(fd);
      return -1;
    }
    if (n == 0) break;
    total += n;
  }
  ::close(fd);
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  size_t block = size_t{1} << 20;
  bool direct = false;
  bool parallel = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--block" && i + 1 < argc) {
      block = std::strtoull(argv[++i], nullptr, 10);
    } else if (arg == "--direct") {
      direct = true;
    } else if (arg == "--parallel") {
      parallel = true;
    } else if (arg == "-") {
      for (std::string line; std::getline(std::cin, line);) {
        if (!line.empty()) paths.push_back(line);
      }
    } else {
      paths.push_back(arg);
    }
  }
  if (paths.empty() || block == 0 || block % 4096 != 0) {
    std::fprintf(stderr, "usage: read_files [--block BYTES] [--direct] [--parallel] FILE...|-\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  long long total = 0;
  bool failed = false;
  if (parallel) {
    std::vector<long long> got(paths.size(), 0);
    std::vector<std::thread> threads;
    for (size_t i = 0; i < paths.size(); ++i) {
      threads.emplace_back([&, i] {
        Buffer buffer = Allocate(block);
        got[i] = buffer ? ReadWhole(paths[i], buffer.get(), block, direct) : -1;
      });
    }
    for (auto& t : threads) t.join();
    for (long long n : got) {
      if (n < 0) failed = true;
      total += n < 0 ? 0 : n;
    }
  } else {
    Buffer buffer = Allocate(block);
    if (!buffer) return 1;
    for (const std::string& path : paths) {
      const long long n = ReadWhole(path, buffer.get(), block, direct);
      if (n < 0) failed = true;
      total += n < 0 ? 0 : n;
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%lld %.6f\n", total, seconds);
  return failed ? 1 : 0;
}

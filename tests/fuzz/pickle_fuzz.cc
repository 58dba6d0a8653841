// Fuzz target: pickle parsing, writing and the readers layered on a Document.
//
// Any input may be rejected, but none may crash, and a Document that parsed
// must survive Write -> Parse -> Write unchanged: the writer promises
// CPython's canonical protocol-2 bytes, so writing twice is idempotent.
// MatchTensor and Repr run on every node, reachable from the root or not,
// because they are the first things to see an untrusted data.pkl. Describe
// (`ucfs show`) renders the root within its bounds, or refuses, and what it
// renders holds no raw control character but newlines: names from the file
// must reach a terminal escaped.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "ucfs/base/status.h"
#include "ucfs/codec/describe.h"
#include "ucfs/codec/pickle.h"
#include "ucfs/codec/torch_tensor.h"

namespace {

using ucfs::pickle::Document;
using ucfs::pickle::NodeId;

// A broken invariant is a bug: print what broke and abort so the fuzzer
// keeps the input.
[[noreturn]] void Fail(const char* what, const ucfs::Status& status) {
  std::fprintf(stderr, "pickle_fuzz: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

// Exercises the accessors callers use on a matched tensor; their arithmetic
// must stay defined for every TensorRef MatchTensor accepts.
uint64_t TouchTensor(const ucfs::TensorRef& t) {
  uint64_t sum = t.numel() + t.element_size() + t.byte_offset() + t.byte_size();
  if (t.contiguous()) ++sum;
  return sum;
}

void WalkNodes(const Document& doc) {
  // Repr allocates per call, so on big documents render a sample of nodes
  // rather than all of them: quadratic cost would starve the fuzzer.
  constexpr size_t kReprAll = size_t{1} << 12;
  const size_t repr_stride = doc.size() <= kReprAll ? 1 : doc.size() / kReprAll + 1;
  uint64_t sink = 0;
  for (size_t i = 0; i < doc.size(); ++i) {
    const auto id = static_cast<NodeId>(i);
    auto tensor = ucfs::MatchTensor(doc, id);
    if (tensor.ok() && tensor->has_value()) sink += TouchTensor(**tensor);
    if (i % repr_stride == 0) sink += doc.Repr(id, 200).size();
  }
  sink += doc.Repr(doc.root(), 200).size();
  ucfs::DescribeOptions options;
  options.max_values = size_t{1} << 16;
  options.max_output_bytes = size_t{1} << 20;
  auto shown = ucfs::Describe(doc, doc.root(), options);
  if (shown.ok()) {
    // The bound is checked before each value is rendered; one value adds at
    // most a cut Repr and a tensor line on top of it.
    if (shown->size() > options.max_output_bytes + (size_t{1} << 16)) {
      Fail("Describe went past its output bound",
           ucfs::Status::Corruption(std::to_string(shown->size()) + " bytes"));
    }
    for (size_t i = 0; i < shown->size(); ++i) {
      const auto c = static_cast<unsigned char>((*shown)[i]);
      const auto next = i + 1 < shown->size() ? static_cast<unsigned char>((*shown)[i + 1]) : 0;
      if ((c < 0x20 && c != '\n') || c == 0x7f || (c == 0xc2 && next >= 0x80 && next <= 0x9f)) {
        Fail("Describe printed a raw control character",
             ucfs::Status::Corruption("byte " + std::to_string(i) + ": " +
                                      ucfs::Printable(shown->substr(i > 40 ? i - 40 : 0, 80))));
      }
    }
    sink += shown->size();
  }
  // Keeps the calls from being optimised away.
  if (sink == 0xdeadbeefdeadbeefULL) std::fputc('\0', stderr);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ucfs::pickle::ParseLimits limits;
  limits.max_bytes = uint64_t{1} << 24;
  limits.max_nodes = uint64_t{1} << 20;
  limits.max_depth = 1000;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto doc = ucfs::pickle::Parse(input, limits);
  if (!doc.ok()) return 0;

  WalkNodes(*doc);

  // A parsed Document has a root and is at most max_depth deep, which is
  // below the writer's own depth limit: nothing is left for Write to refuse.
  auto written = ucfs::pickle::Write(*doc);
  if (!written.ok()) Fail("Write of a parsed document failed", written.status());

  // The written pickle may hold more values than the input (the writer
  // repeats unmemoized ints where the input fetched one from the memo), so
  // re-parse with node and size limits that only its length bounds. Every
  // opcode makes at most one value, except PERSID, which makes two from at
  // least two bytes.
  ucfs::pickle::ParseLimits again = limits;
  again.max_bytes = written->size();
  again.max_nodes = written->size() + 1;
  auto reparsed = ucfs::pickle::Parse(*written, again);
  if (!reparsed.ok()) Fail("the written pickle does not parse", reparsed.status());

  auto rewritten = ucfs::pickle::Write(*reparsed);
  if (!rewritten.ok()) Fail("Write of the re-parsed document failed", rewritten.status());
  if (*rewritten != *written) {
    Fail("Write(Parse(Write(doc))) != Write(doc)",
         ucfs::Status::Corruption(std::to_string(written->size()) + " vs " +
                                  std::to_string(rewritten->size()) + " bytes"));
  }
  return 0;
}

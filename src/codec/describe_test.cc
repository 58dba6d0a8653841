#include "ucfs/codec/describe.h"

#include <gtest/gtest.h>

#include <string>

namespace ucfs {
namespace {

// A pickle of shared references ("billion laughs"): each level a list
// holding the level below 10 times, through the memo. 3.9 KB of such a
// pickle made `ucfs show` grow without bound and abort on bad_alloc.
std::string BillionLaughs(int levels) {
  std::string p("\x80\x02X\x03\x00\x00\x00lolq\x00", 12);  // BINUNICODE 'lol', BINPUT 0
  for (int level = 1; level <= levels; ++level) {
    p += "0(";  // POP the level below (it stays in the memo), MARK
    for (int i = 0; i < 10; ++i) {
      p += "h";  // BINGET level - 1
      p += static_cast<char>(level - 1);
    }
    p += "l";  // LIST
    p += "q";  // BINPUT level
    p += static_cast<char>(level);
  }
  p += ".";
  return p;
}

TEST(Describe, SharedReferencesAreBoundedWithAClearError) {
  auto doc = pickle::Parse(BillionLaughs(12));
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  DescribeOptions options;
  options.max_items = 100;
  auto shown = Describe(*doc, doc->root(), options);
  ASSERT_FALSE(shown.ok());
  EXPECT_NE(shown.status().message().find("billion laughs"), std::string::npos);
  // A small one renders in full: 10^2 leaves.
  auto small = pickle::Parse(BillionLaughs(2));
  ASSERT_TRUE(small.ok());
  auto text = Describe(*small, small->root());
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  size_t count = 0;
  for (size_t at = 0; (at = text->find("'lol'", at)) != std::string::npos; ++at) ++count;
  EXPECT_EQ(count, 100u);
}

TEST(Describe, ControlCharactersInGlobalsAreEscaped) {
  // GLOBAL 'a\x1b[2J' 'b', called with ().
  const std::string p = std::string(
      "\x80\x02"
      "ca\x1b[2J\nb\n)R.",
      14);
  auto doc = pickle::Parse(p);
  ASSERT_TRUE(doc.ok()) << doc.status().ToString();
  auto text = doc->Repr(doc->root());
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_NE(text.find("a\\x1b[2J.b"), std::string::npos) << text;
}

TEST(Printable, EscapesControlsAndCutsLongNames) {
  EXPECT_EQ(Printable("fc1.weight"), "fc1.weight");
  EXPECT_EQ(Printable(std::string("a\0b\n\x7f\\", 6)), "a\\x00b\\x0a\\x7f\\\\");
  EXPECT_EQ(Printable("\xc2\x9b"
                      "31m"),
            "\\xc2\\x9b31m");                    // CSI as UTF-8 C1
  EXPECT_EQ(Printable("\xc3\xa9"), "\xc3\xa9");  // é stays
  EXPECT_EQ(Printable(std::string(70000, 'x'), 4), "xxxx... (70000 bytes)");
  EXPECT_EQ(TerminalSafe("a\x1b[0m\nb"), "a\\x1b[0m\\x0ab");
  EXPECT_EQ(TerminalSafe("a\\b\nc", true), "a\\b\nc");
}

}  // namespace
}  // namespace ucfs

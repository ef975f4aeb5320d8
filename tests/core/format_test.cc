// Messages quote what users' files hold; printable() keeps them readable on
// a terminal (no raw control bytes, no invalid UTF-8) and keeps valid text.
#include "core/format.h"

#include <gtest/gtest.h>

#include <string>

namespace remat {
namespace {

TEST(Printable, EscapesControlBytesAndInvalidUtf8Only) {
  // Valid text, newlines and tabs (multi-line messages) pass unchanged.
  EXPECT_EQ(printable("token \"é\" 日本 🙂\nnext\tline"),
            "token \"é\" 日本 🙂\nnext\tline");
  // A token of byte 5 (it was printed raw), DEL and an escape sequence.
  EXPECT_EQ(printable(std::string("id 5 is \"\x05\"")), "id 5 is \"\\x05\"");
  EXPECT_EQ(printable("\x7f\x1b[31m"), "\\x7F\\x1B[31m");
  // Not UTF-8: a lone 0xFF, a cut sequence, an overlong '/', a surrogate.
  EXPECT_EQ(printable("last read: '\"\xff'"), "last read: '\"\\xFF'");
  EXPECT_EQ(printable("\xe6\x97"), "\\xE6\\x97");
  EXPECT_EQ(printable("\xc0\xaf"), "\\xC0\\xAF");
  EXPECT_EQ(printable("\xed\xa0\x80"), "\\xED\\xA0\\x80");
  EXPECT_EQ(printable(std::string("a\0b", 3)), "a\\x00b");
}

TEST(Shortened, KeepsShortValuesAndCutsLongOnesNamingTheirLength) {
  EXPECT_EQ(shortened("0123456789abcdef"), "0123456789abcdef");
  EXPECT_EQ(shortened(std::string(80, 'a')), std::string(80, 'a'));
  const std::string cut = shortened(std::string(100000, 'a'));
  EXPECT_EQ(cut, std::string(77, 'a') + "... (100000 bytes)");
  EXPECT_EQ(shortened("abcdef", 5), "ab... (6 bytes)");
}

TEST(Printable, Utf8SequenceLengths) {
  EXPECT_EQ(utf8_sequence_length("a", 0), 1u);
  EXPECT_EQ(utf8_sequence_length("é", 0), 2u);
  EXPECT_EQ(utf8_sequence_length("日", 0), 3u);
  EXPECT_EQ(utf8_sequence_length("🙂", 0), 4u);
  EXPECT_EQ(utf8_sequence_length("\xf4\x90\x80\x80", 0), 0u);  // above U+10FFFF
  EXPECT_EQ(utf8_sequence_length("\x80", 0), 0u);              // a continuation byte
}

}  // namespace
}  // namespace remat

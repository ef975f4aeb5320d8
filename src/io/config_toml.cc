// The job config loader's TOML part (io/config_parts.h): a file's sections
// and keys into the key table's fields, each value type-checked as it is
// stored, and a lexical pre-scan that keeps from toml++ the malformed input
// it mishandles.
#include <toml++/toml.h>

#include <cctype>
#include <optional>
#include <sstream>
#include <type_traits>

#include "io/config_parts.h"

namespace remat::config_parts {

namespace {

std::string render_node(const toml::node& node) {
  // Strings as the user most likely typed them ("ten"), not toml++'s 'ten'.
  std::string s;
  if (const auto* text = node.as_string()) {
    s = in_quotes(text->get());
  } else {
    std::ostringstream os;
    node.visit([&](const auto& n) { os << n; });
    s = os.str();
  }
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// A NUL inside a string (TOML's \u0000) would cut every path, name and
// message built from it at that character: "out\u0000/../x" would write to
// "out". No value of remat's has one, so none is taken.
void refuse_nul(const Field& field, const toml::node& node, const std::string& where) {
  auto check = [&](const toml::node& n) {
    const std::optional<std::string> text = n.value_exact<std::string>();
    if (text && text->find('\0') != std::string::npos)
      throw InputError("config error: " + field.name() + where +
                       " holds a NUL character (\\u0000); expected text without one");
  };
  if (const toml::array* array = node.as_array()) {
    for (const toml::node& element : *array) check(element);
  } else {
    check(node);
  }
}

// Stores `node` into the field or throws naming the key, value and type.
void assign_from_toml(const Field& field, const toml::node& node, const std::string& where) {
  refuse_nul(field, node, where);
  const bool ok = std::visit(
      [&](auto* target) -> bool {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, double>) {  // integers are numbers too
          std::optional<double> v = node.is_integer()
                                        ? static_cast<double>(*node.value_exact<int64_t>())
                                        : node.value_exact<double>();
          if (!v || !usable_double(*v)) return false;
          *target = *v;
          return true;
        } else if constexpr (std::is_same_v<T, NumberOrAuto>) {
          if (node.value_exact<std::string>() == std::optional<std::string>("auto")) {
            *target = NumberOrAuto{0, true};
            return true;
          }
          std::optional<double> v = node.is_integer()
                                        ? static_cast<double>(*node.value_exact<int64_t>())
                                        : node.value_exact<double>();
          if (!v || !usable_double(*v)) return false;
          *target = NumberOrAuto{*v, false};
          return true;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          const toml::array* array = node.as_array();
          if (!array) return false;
          std::vector<std::string> items;
          for (const auto& element : *array) {
            auto v = element.value_exact<std::string>();
            if (!v) return false;
            items.push_back(*v);
          }
          *target = std::move(items);
          return true;
        } else {
          auto v = node.value_exact<T>();
          if (v) *target = *v;
          return v.has_value();
        }
      },
      field.ref);
  if (!ok) {
    const bool number_field = field.ref.index() == 1 || field.ref.index() == 5;
    throw InputError("config error: " + field.name() + " = " + render_node(node) + where + ": " +
                     expectation(field.ref) +
                     (number_field && node.is_floating_point() ? kUsableDouble : ""));
  }
}

}  // namespace

// toml++ 3.3.0 (Debian 12's, which remat links) has undefined behaviour on
// two kinds of malformed TOML (found by tests/fuzz/fuzz_config; both fixed
// upstream after 3.3.0):
//  - a non-ASCII character where it looks for whitespace (outside strings
//    and comments, or after a backslash in a """ string) reaches
//    __builtin_unreachable() for U+00A1..U+0499 and others
//    (marzer/tomlplusplus issues 190 and 295);
//  - a table header whose key starts with a character no key starts with
//    ("[=", "[[[1]]]") breaks a precondition of its key parser (issue 294),
//    and an array element starting with '}' ("t = [}") one of its value
//    parser: assertions in a build with them, __builtin_assume under clang.
// Both are syntax errors in TOML, so this scan reports them itself, before
// toml++ sees the text. It follows TOML's lexical structure as toml++ reads
// it (comments, the four string kinds, bare values up to their terminator,
// arrays and inline tables); anything else it leaves to toml++. Valid TOML
// is refused in one corner only: a non-ASCII character right after a
// line-ending backslash in a """ string (where toml++ 3.3.0 has the bug).
// Long because it is one scanner whose cases share the position, the line
// and the stack of open brackets; split, each piece would carry all three.
void check_toml_lexically_safe(const std::string& text, const std::string& source) {
  size_t i = text.starts_with("\xEF\xBB\xBF") ? 3 : 0;  // a UTF-8 byte order mark
  size_t line = 1, line_start = i;
  std::vector<char> open;  // the [ and { of values, innermost last
  bool in_key = true;      // a key may come next (else a value's text)
  char prev = '\n';        // the last character that was not a blank
  char last = '\n';        // the last one that was not a blank, newline or comment
  bool in_bare = false;    // inside a bare value (a number, date, boolean, ...)
  auto column = [&](size_t at) {
    size_t c = 1;  // in characters, as toml++ counts
    for (size_t k = line_start; k < at; ++k)
      c += (static_cast<unsigned char>(text[k]) & 0xC0) != 0x80;
    return c;
  };
  auto fail = [&](size_t at, const std::string& what) {
    throw InputError("config error: TOML syntax error in " + source + " at line " +
                     std::to_string(line) + ", column " + std::to_string(column(at)) + ": " + what);
  };
  auto newline = [&](size_t at) {
    ++line;
    line_start = at + 1;
  };
  auto is_key_start = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '"' ||
           c == '\'';
  };
  auto skip_blanks = [&](size_t at) {
    while (at < text.size() && (text[at] == ' ' || text[at] == '\t')) ++at;
    return at;
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '#') in_bare = false;
    if (c == ' ' || c == '\t' || c == '\r') {
      ++i;
      continue;
    }
    if (c == '\n') {
      newline(i++);
      prev = '\n';
      if (open.empty()) in_key = true;
      continue;
    }
    if (c == '#') {  // a comment: anything up to the end of the line
      while (i < text.size() && text[i] != '\n') ++i;
      continue;
    }
    if (static_cast<unsigned char>(c) >= 0x80)
      fail(i, "a non-ASCII character outside a string or comment (TOML allows them only there)");
    // toml++ reads a bare value (1e3, true, 1979-05-27, ...) up to whitespace,
    // ] } , or #, taking quotes, [ and { in between as part of it.
    if (in_bare) {
      if (c != ']' && c != '}' && c != ',') {
        prev = last = c;
        ++i;
        continue;
      }
      in_bare = false;
    }
    const bool value_starts =
        !in_key &&
        (last == '=' || ((last == '[' || last == ',') && !open.empty() && open.back() == '['));
    // A quote opens a string only where a key or a value starts.
    const bool string_may_start =
        value_starts ||
        (in_key && (prev == '\n' || last == '.' || last == '{' || last == ',' || last == '['));
    if ((c == '"' || c == '\'') && string_may_start) {
      const bool multi = text.compare(i, 3, std::string(3, c)) == 0;
      i += multi ? 3 : 1;
      while (i < text.size()) {
        if (text[i] == c && (!multi || text.compare(i, 3, std::string(3, c)) == 0)) {
          i += multi ? 3 : 1;
          // """a"""" ends with up to two quotes of content before the delimiter.
          for (int extra = 0; multi && extra < 2 && i < text.size() && text[i] == c; ++extra) ++i;
          break;
        }
        if (text[i] == '\n') {
          if (!multi) return;  // an unterminated string: toml++ stops there
          newline(i);
        } else if (c == '"' && text[i] == '\\' && i + 1 < text.size()) {
          const size_t next = i + 1;
          if (multi && static_cast<unsigned char>(text[next]) >= 0x80)
            fail(next, "a backslash followed by a non-ASCII character (not an escape)");
          if (multi && std::isspace(static_cast<unsigned char>(text[next]))) {
            // A line-ending backslash: the string resumes at the next
            // character that is not whitespace.
            size_t k = next;
            while (k < text.size() && std::isspace(static_cast<unsigned char>(text[k]))) {
              if (text[k] == '\n') newline(k);
              ++k;
            }
            if (k < text.size() && static_cast<unsigned char>(text[k]) >= 0x80)
              fail(k,
                   "a non-ASCII character right after a line-ending backslash (toml++ 3.3.0 "
                   "cannot read it there; write it as a \\u escape or move the backslash)");
            i = k;
            continue;
          }
          ++i;  // the escaped character (an escaped quote does not end the string)
        }
        ++i;
      }
      prev = last = c;
      continue;
    }
    // An array element cannot start with '}' (toml++ 3.3.0 asserts it does not).
    if (c == '}' && !open.empty() && open.back() == '[' && (last == '[' || last == ','))
      fail(i, "expected a value or ']' in an array, saw '}'");
    if (c == '[' && open.empty() && prev == '\n') {  // a table header
      size_t k = skip_blanks(i + 1);
      if (k < text.size() && text[k] == '[' && k == i + 1) k = skip_blanks(k + 1);
      if (k < text.size() && text[k] != ']' && !is_key_start(text[k]))
        fail(k, "a table header must start with a key (a bare key or a quoted one)");
      in_key = true;
      prev = last = '[';
      i = k;
      continue;
    }
    if (value_starts && c != '[' && c != '{' && c != ']' && c != '}' && c != ',') {
      in_bare = true;  // a bare value: read up to its terminator (above)
      prev = last = c;
      ++i;
      continue;
    }
    if (c == '=') in_key = false;
    if (!in_key || !open.empty()) {  // in a value: arrays and inline tables nest
      if (c == '[' || c == '{') open.push_back(c);
      if ((c == ']' || c == '}') && !open.empty()) open.pop_back();
      if (c == '{' || (c == ',' && !open.empty() && open.back() == '{')) in_key = true;
    }
    prev = last = c;
    ++i;
  }
}

void apply_toml(Schema& schema, const std::string& text, const std::string& source) {
  check_toml_lexically_safe(text, source);
  toml::table root;
  try {
    root = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    const auto& at = e.source().begin;
    throw InputError("config error: TOML syntax error in " + source + " at line " +
                     std::to_string(at.line) + ", column " + std::to_string(at.column) + ": " +
                     std::string(e.description()));
  }
  const std::string where = " in " + source;
  for (const auto& [section_key, section_node] : root) {
    const std::string section(section_key.str());
    const toml::table* table = section_node.as_table();
    if (!table) {
      if (schema.has_section(section))
        throw InputError("config error: " + section + " = " + render_node(section_node) + where +
                         ": expected a section [" + section + "]");
      // A key above the first [section]: say which section it belongs in.
      std::string hint;
      for (const auto& s : schema.sections())
        if (schema.find(s, section)) hint += (hint.empty() ? "" : " or ") + ("[" + s + "]");
      throw InputError("config error: key '" + section + "'" + where + " is outside any section" +
                       (hint.empty() ? "" : "; did you mean to put it under " + hint + "?") +
                       " (known sections: " + join(schema.sections(), ", ") + ")");
    }
    if (!schema.has_section(section)) schema.unknown_section(section, where);
    for (const auto& [key, node] : *table) {
      Field* field = schema.find(section, key.str());
      if (!field) schema.unknown_key(section, key.str(), where);
      assign_from_toml(*field, node, where);
      schema.set_origin(*field, "in " + source);
    }
  }
}

// True for a file that is empty or only comments: parse_job_config has
// accepted it, so it parses.
bool sets_no_keys(const std::string& text) {
  try {
    return toml::parse(text).empty();
  } catch (const toml::parse_error&) {
    return false;
  }
}

}  // namespace remat::config_parts

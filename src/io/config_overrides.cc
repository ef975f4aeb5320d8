// The job config loader's command-line part (io/config_parts.h):
// --section.key value (or =value) overrides, each value parsed as the
// field's type, and the number parsers the validation shares.
#include <toml++/toml.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <system_error>
#include <type_traits>

#include "io/config_parts.h"

namespace remat::config_parts {

bool parse_int(std::string_view s, int64_t& out) {
  if (!s.empty() && s[0] == '+') {
    s.remove_prefix(1);
    if (!s.empty() && s[0] == '-') return false;  // "+-5" is no integer
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// A decimal number as TOML writes one (strtod would also read hexadecimal
// "0x1p3", which a config file cannot hold).
bool parse_double(const std::string& s, double& out) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  if (s.find_first_of("xX") != std::string::npos) return false;
  char* end = nullptr;
  errno = 0;
  out = std::strtod(s.c_str(), &end);
  return end == s.c_str() + s.size() && errno != ERANGE && usable_double(out);
}

std::string trim(std::string_view s) {
  const char* ws = " \t";
  auto b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(ws) - b + 1));
}

namespace {

// A TOML array of non-empty strings, as a config file writes a list.
bool parse_string_array(const std::string& array, std::vector<std::string>& out) {
  const std::string text = "list = " + array;
  check_toml_lexically_safe(text, "the command line");
  toml::table root;
  try {
    root = toml::parse(text);
  } catch (const toml::parse_error&) {
    return false;
  }
  const toml::array* items = root["list"].as_array();
  if (items == nullptr) return false;
  for (const toml::node& item : *items) {
    const std::optional<std::string> name = item.value<std::string>();
    if (!name || name->empty()) return false;
    out.push_back(*name);
  }
  return true;
}

// Comma-separated names ("" is the empty list), or the TOML array a config
// file holds (["a", "b"]). Cut at its commas, an array would become names
// with brackets and quotes in them, which match no module: names never hold
// those characters, so such an item is refused.
bool parse_list(const std::string& s, std::vector<std::string>& out) {
  out.clear();
  const std::string text = trim(s);
  if (text.empty()) return true;
  if (text.front() == '[') return parse_string_array(text, out);
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string item = trim(std::string_view(text).substr(start, comma - start));
    if (item.empty() || item.find_first_of("[]\"'") != std::string::npos) return false;
    out.push_back(item);
    if (comma == std::string::npos) return true;
    start = comma + 1;
  }
}

void assign_from_text(const Field& field, const std::string& value) {
  bool ok = std::visit(
      [&](auto* target) {
        using T = std::remove_pointer_t<decltype(target)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          return parse_int(value, *target);
        } else if constexpr (std::is_same_v<T, double>) {
          return parse_double(value, *target);
        } else if constexpr (std::is_same_v<T, bool>) {
          if (value != "true" && value != "false") return false;
          *target = value == "true";
          return true;
        } else if constexpr (std::is_same_v<T, std::string>) {
          *target = value;
          return true;
        } else if constexpr (std::is_same_v<T, NumberOrAuto>) {
          if (value == "auto") {
            *target = NumberOrAuto{0, true};
            return true;
          }
          double number = 0;
          if (!parse_double(value, number)) return false;
          *target = NumberOrAuto{number, false};
          return true;
        } else {
          return parse_list(value, *target);
        }
      },
      field.ref);
  if (!ok) {
    std::string expected = expectation(field.ref);
    // Digits after an optional sign that do not parse: too many of them.
    const size_t sign = !value.empty() && (value[0] == '+' || value[0] == '-') ? 1 : 0;
    const bool whole_number =
        value.size() > sign && value.find_first_not_of("0123456789", sign) == std::string::npos;
    if (field.ref.index() == 0 && whole_number)
      expected += " from -2^63 to 2^63 - 1 (a signed 64-bit integer)";
    // A number strtod reads whole but not as a finite, normal double: inf,
    // nan, 1e400, or one as tiny as 1e-320; or one written in hexadecimal.
    char* end = nullptr;
    if (field.ref.index() == 1 && !value.empty() &&
        (std::strtod(value.c_str(), &end), end == value.c_str() + value.size()))
      expected +=
          value.find_first_of("xX") == std::string::npos ? kUsableDouble : " written in decimal";
    if (field.ref.index() == 4)
      expected =
          "expected a comma-separated list of names, or a TOML array of strings such as "
          "[\"a\", \"b\"]";
    throw InputError("config error: " + field.name() + " = " + in_quotes(value) +
                     " on the command line: " + expected);
  }
}

}  // namespace

void apply_overrides(Schema& schema, const std::vector<std::string>& args) {
  const std::string where = " on the command line";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const size_t eq = arg.find('=');
    // "--section.key" before any "=": checked to start with "--" before it is cut.
    const std::string name =
        arg.starts_with("--") ? arg.substr(2, eq == std::string::npos ? eq : eq - 2) : "";
    const size_t dot = name.find('.');
    if (!arg.starts_with("--") || dot == std::string::npos || dot == 0 || dot + 1 == name.size() ||
        name.find('.', dot + 1) != std::string::npos)
      throw InputError("config error: bad override '" + arg +
                       "': expected --section.key value or --section.key=value");
    const std::string section = name.substr(0, dot), key = name.substr(dot + 1);
    if (!schema.has_section(section)) schema.unknown_section(section, " in '" + arg + "'");
    Field* field = schema.find(section, key);
    if (!field) schema.unknown_key(section, key, where);

    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size() && !args[i + 1].starts_with("--")) {
      value = args[++i];
    } else if (std::holds_alternative<bool*>(field->ref)) {
      value = "true";  // a bare boolean flag, as torchtitan's CLI allows
    } else {
      throw InputError("config error: override '" + arg + "' needs a value (" +
                       expectation(field->ref) + ")");
    }
    assign_from_text(*field, value);
    schema.set_origin(*field, "on the command line");
  }
}

}  // namespace remat::config_parts

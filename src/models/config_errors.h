// How the model builders reject a [model] section: InputError (exit 2) with
// the "config error: " prefix, and the flavor lookup every family does.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/error.h"

namespace remat {

// InputError "config error: <message>" unless `ok`.
inline void require(bool ok, const std::string& message) {
  if (!ok) throw InputError("config error: " + message);
}

// A [model] size key: 0 keeps the flavor's value, a negative one is refused
// naming the key.
inline void require_size_or_flavor(const std::string& key, int64_t value) {
  require(value >= 0, "model." + key + " = " + std::to_string(value) +
                          ": expected a positive integer, or 0 for the flavor's value");
}

// The entry for model.flavor in a family's table, or an InputError that
// lists the flavors the family has.
template <typename Args>
const Args& find_flavor(const std::map<std::string, Args>& flavors, const std::string& family,
                        const std::string& flavor) {
  const auto it = flavors.find(flavor);
  if (it == flavors.end()) {
    std::string known;
    for (const auto& entry : flavors) known += (known.empty() ? "" : ", ") + entry.first;
    throw InputError("config error: model.flavor = \"" + flavor + "\" is not a " + family +
                     " flavor (expected one of: " + known + ")");
  }
  return it->second;
}

}  // namespace remat

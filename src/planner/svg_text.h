// Text inside the SVG pictures remat plan draws (--pareto, --timeline).
#pragma once

#include <string>

namespace remat {

// `s` with the characters XML gives a meaning (<, >, &) written as entities,
// so model and mode names print as they are.
std::string svg_escape(const std::string& s);

}  // namespace remat

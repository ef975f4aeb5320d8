#include "planner/pareto_output.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/files.h"
#include "planner/svg_text.h"

namespace remat {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

constexpr double kGiB = 1024.0 * 1024 * 1024;

std::string to_csv(const std::vector<BudgetChoice>& front, const std::vector<ParetoMark>& marks,
                   const ParetoAxis& axis) {
  std::ostringstream out;
  out.precision(9);
  out << "kind,name,peak_bytes,recompute,cost_unit,recompute_percent,lower_bound\n";
  for (const BudgetChoice& c : front) {
    out << "front,budget," << c.peak << ',' << c.cost << ',' << axis.unit << ','
        << 100 * c.cost / axis.whole << ',' << c.lower_bound << '\n';
  }
  for (const ParetoMark& m : marks) {
    out << "fixed," << m.name << ',' << m.peak_bytes << ',' << m.recompute << ',' << axis.unit
        << ',' << 100 * m.recompute / axis.whole << ",\n";
  }
  return out.str();
}

std::string to_json(const std::vector<BudgetChoice>& front, const std::vector<ParetoMark>& marks,
                    int64_t budget, const ParetoAxis& axis) {
  nlohmann::json j;
  j["cost_unit"] = axis.unit;
  j["percent_of"] = {{"name", axis.whole_name}, {axis.unit, axis.whole}};
  j["budget_bytes"] = budget;
  j["front"] = nlohmann::json::array();
  for (const BudgetChoice& c : front) {
    j["front"].push_back(
        {{"peak_bytes", c.peak}, {"recompute", c.cost}, {"lower_bound", c.lower_bound}});
  }
  j["fixed_modes"] = nlohmann::json::array();
  for (const ParetoMark& m : marks) {
    j["fixed_modes"].push_back(
        {{"name", m.name}, {"peak_bytes", m.peak_bytes}, {"recompute", m.recompute}});
  }
  return j.dump(2) + "\n";
}

// A plain scatter/step chart: x = peak GiB, y = recompute as a % of the
// axis's whole.
std::string to_svg(const std::vector<BudgetChoice>& front, const std::vector<ParetoMark>& marks,
                   int64_t budget, const ParetoAxis& axis, const std::string& title) {
  const double w = 760, h = 480, left = 70, right = 180, top = 40, bottom = 50;
  double x0 = 1e300, x1 = -1e300, y1 = 0;
  auto take = [&](double peak, double cost) {
    x0 = std::min(x0, peak / kGiB);
    x1 = std::max(x1, peak / kGiB);
    y1 = std::max(y1, 100 * cost / axis.whole);
  };
  for (const BudgetChoice& c : front) take(static_cast<double>(c.peak), c.cost);
  for (const ParetoMark& m : marks) take(static_cast<double>(m.peak_bytes), m.recompute);
  if (budget > 0) take(static_cast<double>(budget), 0);
  if (x1 <= x0) x1 = x0 + 1e-6;
  const double pad = (x1 - x0) * 0.05;
  x0 -= pad;
  x1 += pad;
  y1 = y1 <= 0 ? 1 : y1 * 1.1;
  auto px = [&](double gib) { return left + (gib - x0) / (x1 - x0) * (w - left - right); };
  auto py = [&](double pct) { return h - bottom - pct / y1 * (h - top - bottom); };
  std::ostringstream o;
  o.precision(4);
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h
    << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"24\" font-size=\"15\">" << svg_escape(title)
    << ": least recompute for each peak (remat memory_budget)</text>\n";
  // Axes with five ticks each.
  o << "<line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\"" << w - right << "\" y2=\""
    << h - bottom << "\" stroke=\"black\"/>\n<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\""
    << left << "\" y2=\"" << h - bottom << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    const double gx = x0 + (x1 - x0) * i / 4, gy = y1 * i / 4;
    o << "<text x=\"" << px(gx) << "\" y=\"" << h - bottom + 16 << "\" text-anchor=\"middle\">"
      << gx << "</text>\n<text x=\"" << left - 6 << "\" y=\"" << py(gy) + 4
      << "\" text-anchor=\"end\">" << gy << "</text>\n";
  }
  o << "<text x=\"" << (left + w - right) / 2 << "\" y=\"" << h - 12
    << "\" text-anchor=\"middle\">peak memory per device (GiB)</text>\n"
    << "<text transform=\"translate(16," << (top + h - bottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">recompute (% of " << svg_escape(axis.whole_name)
    << (axis.unit == "seconds" ? ", measured op times" : "") << ")</text>\n";
  // The front as a staircase: below a point's peak, the next point's cost.
  if (!front.empty()) {
    o << "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < front.size(); ++i) {
      const double x = px(front[i].peak / kGiB), y = py(100 * front[i].cost / axis.whole);
      if (i > 0) o << x << ',' << py(100 * front[i - 1].cost / axis.whole) << ' ';
      o << x << ',' << y << ' ';
    }
    o << "\"/>\n";
    for (const BudgetChoice& c : front) {
      o << "<circle cx=\"" << px(c.peak / kGiB) << "\" cy=\"" << py(100 * c.cost / axis.whole)
        << "\" r=\"2.5\" fill=\"#1f77b4\"/>\n";
    }
  }
  for (size_t i = 0; i < marks.size(); ++i) {
    const double x = px(marks[i].peak_bytes / kGiB), y = py(100 * marks[i].recompute / axis.whole);
    o << "<rect x=\"" << x - 4 << "\" y=\"" << y - 4
      << "\" width=\"8\" height=\"8\" fill=\"#d62728\"/>\n<text x=\"" << x + 7 << "\" y=\""
      << y - 6 - 12.0 * static_cast<double>(i % 2) << "\" fill=\"#d62728\">"
      << svg_escape(marks[i].name) << "</text>\n";
  }
  if (budget > 0) {
    const double x = px(budget / kGiB);
    o << "<line x1=\"" << x << "\" y1=\"" << top << "\" x2=\"" << x << "\" y2=\"" << h - bottom
      << "\" stroke=\"#2ca02c\" stroke-dasharray=\"5,4\"/>\n<text x=\"" << x + 4 << "\" y=\""
      << top + 12 << "\" fill=\"#2ca02c\">budget</text>\n";
  }
  o << "<text x=\"" << w - right + 10 << "\" y=\"" << top + 10
    << "\" fill=\"#1f77b4\">— memory_budget front</text>\n<text x=\"" << w - right + 10 << "\" y=\""
    << top + 28 << "\" fill=\"#d62728\">■ fixed AC modes</text>\n</svg>\n";
  return o.str();
}

}  // namespace

void check_pareto_path(const std::string& path) {
  if (!ends_with(path, ".svg") && !ends_with(path, ".csv") && !ends_with(path, ".json")) {
    throw InputError("--pareto " + path + ": expected a file name ending in .svg, .csv or .json");
  }
  check_output_file(path, "--pareto");
}

void write_pareto(const std::string& path, const std::vector<BudgetChoice>& front,
                  const std::vector<ParetoMark>& marks, int64_t budget, const ParetoAxis& axis,
                  const std::string& title) {
  check_pareto_path(path);
  std::string text;
  if (ends_with(path, ".csv")) {
    text = to_csv(front, marks, axis);
  } else if (ends_with(path, ".json")) {
    text = to_json(front, marks, budget, axis);
  } else {
    text = to_svg(front, marks, budget, axis, title);
  }
  AtomicFile out(path, "--pareto");
  out.write(text.data(), static_cast<int64_t>(text.size()));
  out.commit();
}

}  // namespace remat

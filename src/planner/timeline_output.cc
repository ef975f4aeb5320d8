#include "planner/timeline_output.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "core/error.h"
#include "io/files.h"
#include "planner/svg_text.h"

namespace remat {

namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;
constexpr const char* kFlag = "--timeline";
// Bottom to top: what lives all step long first, the short-lived last.
constexpr const char* kCategoryColors[kNumMemoryCategories] = {"#4c72b0", "#dd8452", "#55a868",
                                                               "#c44e52", "#8172b3"};
constexpr const char* kPhaseColors[3] = {"#9ecae1", "#fdae6b", "#bcbddc"};

struct Timeline {
  std::string name, mode;
  std::vector<TimelineSample> samples;
  size_t peak_index = 0;  // the first sample reaching the step's peak
};

Timeline make_timeline(TimelineSeries series) {
  Timeline t{std::move(series.name), std::move(series.mode), std::move(series.samples), 0};
  for (size_t i = 0; i < t.samples.size(); ++i) {
    if (t.samples[i].peak.total() > t.samples[t.peak_index].peak.total()) t.peak_index = i;
  }
  return t;
}

TimelineSeries planned(const Program& program, const Plan& plan, const PlannerOptions& planner,
                       const std::string& name) {
  return {name, plan.description, replay_timeline(program, plan, planner)};
}

std::string step_label(const Program& program, const TimelineSample& s) {
  return std::string(to_string(s.kind)) + " " + program.nodes[s.node].fqn;
}

nlohmann::json to_json(const MemorySnapshot& s) {
  nlohmann::json j;
  for (int c = 0; c < kNumMemoryCategories; ++c)
    j[to_string(static_cast<MemoryCategory>(c))] = s.bytes[c];
  j["total"] = s.total();
  return j;
}

std::string to_json(const std::vector<Timeline>& timelines, const Program& program,
                    const std::string& title) {
  nlohmann::json j;
  j["title"] = title;
  j["timelines"] = nlohmann::json::array();
  for (const Timeline& t : timelines) {
    nlohmann::json samples = nlohmann::json::array();
    for (size_t i = 0; i < t.samples.size(); ++i) {
      const TimelineSample& s = t.samples[i];
      samples.push_back({{"step", i},
                         {"phase", to_string(s.kind)},
                         {"op", program.nodes[s.node].fqn},
                         {"after", to_json(s.after)},
                         {"peak", to_json(s.peak)}});
    }
    const TimelineSample& peak = t.samples[t.peak_index];
    j["timelines"].push_back({{"name", t.name},
                              {"mode", t.mode},
                              {"peak_bytes", peak.peak.total()},
                              {"peak_step", t.peak_index},
                              {"peak_during", step_label(program, peak)},
                              {"samples", samples}});
  }
  return j.dump(1) + "\n";
}

// Where one panel goes: x per schedule step and y per byte, shared by all
// panels so two modes compare at a glance.
struct Frame {
  double left, width, top, height, steps, max_bytes;
  double x(double step) const { return left + step / steps * width; }
  double y(double bytes) const { return top + height - bytes / max_bytes * height; }
};

// A staircase through levels[i] over steps [i, i + 1), left to right or
// back; a corner only where the level changes, so flat bands stay small.
void staircase(std::ostringstream& o, const std::vector<int64_t>& levels, const Frame& f,
               bool backwards) {
  const size_t n = levels.size();
  auto at = [&](size_t k) { return levels[backwards ? n - 1 - k : k]; };
  auto x = [&](size_t k) { return f.x(static_cast<double>(backwards ? n - k : k)); };
  for (size_t k = 0; k < n; ++k) {
    if (k > 0 && at(k) == at(k - 1)) continue;
    if (k > 0) o << x(k) << ',' << f.y(static_cast<double>(at(k - 1))) << ' ';
    o << x(k) << ',' << f.y(static_cast<double>(at(k))) << ' ';
  }
  o << x(n) << ',' << f.y(static_cast<double>(at(n - 1))) << ' ';
}

// The stacked bands: band c spans categories below c to c, at each step's
// highest moment (one flat top per step).
void draw_bands(std::ostringstream& o, const Timeline& t, const Frame& f) {
  std::vector<int64_t> below(t.samples.size(), 0), above(below);
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    for (size_t i = 0; i < t.samples.size(); ++i) above[i] = below[i] + t.samples[i].peak.bytes[c];
    o << "<polygon fill=\"" << kCategoryColors[c] << "\" points=\"";
    staircase(o, above, f, /*backwards=*/false);
    staircase(o, below, f, /*backwards=*/true);
    o << "\"/>\n";
    below = above;
  }
}

// Under the bands, a strip coloured by phase; each phase named once, at its
// first run wide enough for the name (the legend names the colours).
void draw_phases(std::ostringstream& o, const Timeline& t, const Frame& f) {
  const double y = f.top + f.height + 2;
  bool named[3] = {false, false, false};
  for (size_t i = 0, j = 0; i < t.samples.size(); i = j) {
    const int kind = static_cast<int>(t.samples[i].kind);
    while (j < t.samples.size() && static_cast<int>(t.samples[j].kind) == kind) ++j;
    o << "<rect x=\"" << f.x(i) << "\" y=\"" << y << "\" width=\"" << f.x(j) - f.x(i)
      << "\" height=\"10\" fill=\"" << kPhaseColors[kind] << "\"/>\n";
    if (named[kind] || f.x(j) - f.x(i) < 70) continue;
    named[kind] = true;
    o << "<text x=\"" << f.x(i) + 2 << "\" y=\"" << y + 22 << "\" font-size=\"11\">"
      << to_string(t.samples[i].kind) << "</text>\n";
  }
}

// A round tick step in GiB (1, 2 or 5 x 10^k) giving at most five ticks.
double tick_step(double max_gib) {
  double step = std::pow(10.0, std::floor(std::log10(max_gib / 5)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (max_gib / (step * m) <= 5) return step * m;
  }
  return step * 10;
}

void draw_panel(std::ostringstream& o, const Timeline& t, const Program& program, const Frame& f) {
  const TimelineSample& peak = t.samples[t.peak_index];
  o << "<text x=\"" << f.left << "\" y=\"" << f.top - 24 << "\" font-size=\"13\">"
    << svg_escape(t.name + ": " + t.mode) << "</text>\n<text x=\"" << f.left << "\" y=\""
    << f.top - 8 << "\">peak " << peak.peak.total() / kGiB << " GiB (" << peak.peak.total()
    << " bytes) during " << svg_escape(step_label(program, peak)) << "</text>\n";
  const double step = tick_step(f.max_bytes / kGiB);
  for (double gib = 0; gib * kGiB <= f.max_bytes; gib += step) {
    o << "<line x1=\"" << f.left << "\" y1=\"" << f.y(gib * kGiB) << "\" x2=\"" << f.left + f.width
      << "\" y2=\"" << f.y(gib * kGiB) << "\" stroke=\"#dddddd\"/>\n<text x=\"" << f.left - 6
      << "\" y=\"" << f.y(gib * kGiB) + 4 << "\" text-anchor=\"end\">" << gib << "</text>\n";
  }
  draw_bands(o, t, f);
  draw_phases(o, t, f);
  const double x = (f.x(t.peak_index) + f.x(t.peak_index + 1)) / 2;
  o << "<line x1=\"" << x << "\" y1=\"" << f.top << "\" x2=\"" << x << "\" y2=\""
    << f.top + f.height << "\" stroke=\"black\" stroke-dasharray=\"4,3\"/>\n<text x=\"" << x + 4
    << "\" y=\"" << f.top + 12 << "\">peak</text>\n";
}

void draw_legend(std::ostringstream& o, double x, double y) {
  const char* phases[3] = {"forward", "recompute", "backward"};
  for (int i = 0; i < kNumMemoryCategories + 3; ++i) {
    const bool category = i < kNumMemoryCategories;
    const char* color = category ? kCategoryColors[i] : kPhaseColors[i - kNumMemoryCategories];
    const std::string name = category ? to_string(static_cast<MemoryCategory>(i))
                                      : std::string("phase: ") + phases[i - kNumMemoryCategories];
    const double row = y + 18.0 * (kNumMemoryCategories - 1 - i + (category ? 0 : 9));
    o << "<rect x=\"" << x << "\" y=\"" << row << "\" width=\"12\" height=\"12\" fill=\"" << color
      << "\"/>\n<text x=\"" << x + 18 << "\" y=\"" << row + 10 << "\">" << name << "</text>\n";
  }
}

std::string to_svg(const std::vector<Timeline>& timelines, const Program& program,
                   const std::string& title) {
  const double left = 70, width = 720, panel = 220, gap = 86, top = 76;
  double steps = 1, max_bytes = 1;
  for (const Timeline& t : timelines) {
    steps = std::max(steps, static_cast<double>(t.samples.size()));
    max_bytes = std::max(max_bytes, static_cast<double>(t.samples[t.peak_index].peak.total()));
  }
  const double height = top + static_cast<double>(timelines.size()) * (panel + gap) + 10;
  std::ostringstream o;
  o.precision(5);
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + width + 200 << "\" height=\""
    << height << "\" font-family=\"sans-serif\" font-size=\"12\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n<text x=\"" << left
    << "\" y=\"24\" font-size=\"15\">" << svg_escape(title)
    << ": bytes held over one training step (GiB; each step at its highest moment)</text>\n";
  for (size_t p = 0; p < timelines.size(); ++p) {
    const Frame f{left,  width, top + static_cast<double>(p) * (panel + gap),
                  panel, steps, max_bytes * 1.05};
    draw_panel(o, timelines[p], program, f);
  }
  o << "<text x=\"" << left + width / 2 << "\" y=\"" << height - 12
    << "\" text-anchor=\"middle\">schedule step (one op run each)</text>\n";
  draw_legend(o, left + width + 20, top);
  o << "</svg>\n";
  return o.str();
}

void write_text(const std::string& path, const std::string& text, const std::string& key) {
  AtomicFile file(path, key);
  file.write(text.data(), static_cast<int64_t>(text.size()));
  file.commit();
}

}  // namespace

std::string json_path_of(const std::string& path) {
  return path.ends_with(".svg") ? path.substr(0, path.size() - 4) + ".json" : path;
}

void check_timeline_path(const std::string& path) {
  if (!path.ends_with(".svg") && !path.ends_with(".json"))
    throw InputError(std::string(kFlag) + " " + path +
                     ": expected a file name ending in .svg "
                     "(a .json with the same series is written beside it) or .json");
  check_output_file(path, kFlag);
  check_output_file(json_path_of(path), kFlag);
}

void write_timeline_files(const std::string& path, const std::vector<TimelineSeries>& series,
                          const Program& program, const std::string& title,
                          const std::string& key) {
  std::vector<Timeline> timelines;
  for (const TimelineSeries& one : series) {
    if (one.samples.empty()) throw std::logic_error("a memory timeline without samples");
    timelines.push_back(make_timeline(one));
  }
  if (path.ends_with(".svg")) write_text(path, to_svg(timelines, program, title), key);
  write_text(json_path_of(path), to_json(timelines, program, title), key);
}

void write_timelines(const std::string& path, const std::string& compare, const Program& program,
                     const Plan& configured_plan, const AcOptions& configured,
                     const PlannerOptions& planner, const std::string& title) {
  std::vector<TimelineSeries> series = {planned(program, configured_plan, planner, "configured")};
  if (!compare.empty()) {
    std::string names;
    for (const NamedMode& mode : comparison_modes(configured)) {
      if (mode.name == compare)
        series.push_back(planned(program, make_plan(program, mode.options), planner, mode.name));
      names += (names.empty() ? "" : ", ") + mode.name;
    }
    if (series.size() == 1)
      throw InputError("--timeline-compare " + compare + ": unknown mode (known: " + names + ")");
  }
  write_timeline_files(path, series, program, title, kFlag);
}

}  // namespace remat

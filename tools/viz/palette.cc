#include "tools/viz/palette.h"

#include <string>

namespace trainc::viz {

std::string BucketColor(int id) {
  // ColorBrewer "Set3": distinguishable, light enough for black text.
  static const char* const kColors[] = {
      "#8dd3c7", "#ffffb3", "#bebada", "#fb8072", "#80b1d3", "#fdb462",
      "#b3de69", "#fccde5", "#d9d9d9", "#bc80bd", "#ccebc5", "#ffed6f"};
  constexpr int kN = sizeof(kColors) / sizeof(kColors[0]);
  if (id < 0) return "#eeeeee";
  return kColors[id % kN];
}

std::string PhaseColor(const std::string& phase) {
  if (phase == "forward") return "#9ecae1";
  if (phase == "backward") return "#fdae6b";
  if (phase == "optimizer") return "#a1d99b";
  if (phase == "data") return "#d9d9d9";
  if (phase == "comm") return "#c994c7";
  return "#eeeeee";
}

std::string RunColor(int index) {
  // Tableau 10 (matplotlib's default cycle): strong, and told apart.
  static const char* const kColors[] = {
      "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  constexpr int kN = sizeof(kColors) / sizeof(kColors[0]);
  return kColors[(index % kN + kN) % kN];
}

}  // namespace trainc::viz

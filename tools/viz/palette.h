// Colours shared by the graph, the legend and the timeline, so that a bucket
// has the same colour everywhere it is drawn.
#ifndef TRAINC_TOOLS_VIZ_PALETTE_H_
#define TRAINC_TOOLS_VIZ_PALETTE_H_

#include <string>

namespace trainc::viz {

// A light fill for bucket `id` (cycles after a dozen buckets).
std::string BucketColor(int id);
// Fill of an op by phase name ("forward", "backward", ...).
std::string PhaseColor(const std::string& phase);
// A strong line colour for run `index` of overlaid training curves.
std::string RunColor(int index);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_PALETTE_H_

// The predicted scaling of a plan (tools/simulate/scaling.h) as one
// standalone SVG of two panels over a log2 GPU axis:
//   step time (ms): per curve, the predicted step (solid, a dot per world
//     size), the backward compute (dashed) and the exposed communication
//     (dotted), y from 0;
//   scaling efficiency (%): samples/s per rank against one rank.
// One colour per curve (bucket size), with a legend. Every dot carries
// data-gpus and data-ms / data-percent (the value it is drawn at) and a
// tooltip; each plot area is a <rect class="frame">.
//
//   std::string svg = RenderScalingSvg(curves, "gpt2_small on h100_nvlink_ib");
#ifndef TRAINC_TOOLS_VIZ_SCALING_PLOT_H_
#define TRAINC_TOOLS_VIZ_SCALING_PLOT_H_

#include <string>
#include <vector>

#include "tools/simulate/scaling.h"

namespace trainc::viz {

// `title` is plain text (escaped here).
std::string RenderScalingSvg(const std::vector<simulate::ScalingCurve>& curves,
                             const std::string& title);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_SCALING_PLOT_H_

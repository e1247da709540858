// Writing a VizGraph as Graphviz DOT text.
//
// Styles (also drawn in the graph's legend):
//   compute-stream ops: boxes filled by phase (forward blue, backward orange,
//   optimizer green, data grey); comm-stream ops: bold hexagons filled with
//   their bucket's colour; parameters: ellipses; buckets: folders in their
//   colour; repeated blocks: 3-D boxes. Data edges are solid, event
//   (stream ordering) edges dashed. The output is deterministic, so it can
//   be compared with a golden file.
#ifndef TRAINC_TOOLS_VIZ_DOT_WRITER_H_
#define TRAINC_TOOLS_VIZ_DOT_WRITER_H_

#include <string>

#include "compiler/plan/plan.h"
#include "tools/viz/viz_graph.h"

namespace trainc::viz {

// `plan` supplies the title's batch arithmetic.
std::string WriteDot(const VizGraph& graph, const Plan& plan);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_DOT_WRITER_H_

// Rendering DOT with Graphviz's `dot` program, run as a subprocess.
//
// We shell out rather than link libgvc: the binary then builds on machines
// without Graphviz, and only the .svg/.png outputs need it.
#ifndef TRAINC_TOOLS_VIZ_GRAPHVIZ_H_
#define TRAINC_TOOLS_VIZ_GRAPHVIZ_H_

#include <string>

#include "absl/status/statusor.h"

namespace trainc::viz {

// The path of `dot` on $PATH (or $TRAINC_DOT when set); NotFound otherwise,
// with a message that says how to get it.
absl::StatusOr<std::string> FindDot();

// Runs `dot -T<format>` on `dot_text` ("svg", "png") and returns its output.
absl::StatusOr<std::string> RenderDot(const std::string& dot_text,
                                      const std::string& format);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_GRAPHVIZ_H_

// Rendering DOT with Graphviz's `dot` program, run as a subprocess (and SVG
// to PNG with librsvg's `rsvg-convert`, the same way).
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

// A standalone SVG (the training curves) as PNG, through librsvg's
// `rsvg-convert` (Debian's librsvg2-bin; $TRAINC_RSVG_CONVERT overrides),
// run the same way as dot. NotFound, saying how to get it, without it.
absl::StatusOr<std::string> RenderSvgToPng(const std::string& svg);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_GRAPHVIZ_H_

#include "tools/viz/dot_writer.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/viz/palette.h"
#include "tools/viz/xml_escape.h"

namespace trainc::viz {
namespace {

std::string NodeLine(const VizNode& n) {
  std::string attrs = absl::StrCat("label=\"", DotEscape(n.label), "\"");
  switch (n.kind) {
    case NodeKind::kOp:
      if (n.comm) {
        absl::StrAppend(&attrs, ", shape=hexagon, style=\"filled,bold\", "
                                "color=\"#6a3d9a\", penwidth=2, fillcolor=\"",
                        BucketColor(n.bucket), "\"");
      } else if (n.bucket >= 0) {  // optimizer of one bucket
        absl::StrAppend(&attrs, ", shape=box, style=\"filled,rounded\", "
                                "fillcolor=\"", PhaseColor(n.phase),
                        "\", color=\"", BucketColor(n.bucket),
                        "\", penwidth=3");
      } else {
        absl::StrAppend(&attrs, ", shape=box, style=\"filled,rounded\", "
                                "fillcolor=\"", PhaseColor(n.phase), "\"");
      }
      break;
    case NodeKind::kRepeatedBlock:
      absl::StrAppend(&attrs, ", shape=box3d, style=filled, fillcolor=\"",
                      PhaseColor(n.phase), "\"");
      break;
    case NodeKind::kParameter:
      absl::StrAppend(&attrs, ", shape=ellipse, style=filled, "
                              "fillcolor=\"#ffffff\", color=\"#444444\"");
      break;
    case NodeKind::kParameterGroup:
      absl::StrAppend(&attrs, ", shape=ellipse, style=\"filled\", "
                              "peripheries=2, fillcolor=\"#ffffff\"");
      break;
    case NodeKind::kBucket:
      absl::StrAppend(&attrs, ", shape=folder, style=filled, fillcolor=\"",
                      BucketColor(n.bucket), "\"");
      break;
  }
  return absl::StrCat("    ", n.id, " [", attrs, "];\n");
}

void AppendGroup(const VizGraph& g, NodeGroup group, std::string* out) {
  for (const VizNode& n : g.nodes) {
    if (n.group == group) absl::StrAppend(out, NodeLine(n));
  }
}

}  // namespace

std::string WriteDot(const VizGraph& g, const Plan& plan) {
  std::string title = absl::StrCat(
      g.model, ": ", plan.world_size, " rank(s) \xC3\x97 ", plan.micro_batch,
      " samples \xC3\x97 ", plan.accumulate, " micro-step(s) = ",
      plan.global_batch, " per step; ", g.instructions, " instructions");
  std::string out = absl::StrCat(
      "digraph \"", DotEscape(g.model), "\" {\n"
      "  graph [label=\"", DotEscape(title), "\", labelloc=t, fontsize=16, "
      "fontname=\"Helvetica\", rankdir=TB, newrank=true, nodesep=0.25, "
      "ranksep=0.35];\n"
      "  node [fontname=\"Helvetica\", fontsize=10];\n"
      "  edge [fontname=\"Helvetica\", fontsize=9, color=\"#555555\", "
      "arrowsize=0.6];\n");
  absl::StrAppend(&out, "  subgraph cluster_parameters {\n"
                        "    label=\"parameters\"; style=dashed; color=\"#aaaaaa\";\n");
  AppendGroup(g, NodeGroup::kParameters, &out);
  absl::StrAppend(&out, "  }\n");
  absl::StrAppend(&out, "  subgraph cluster_micro {\n    label=\"micro-step \xC3\x97 ",
                  g.accumulate,
                  " (compute stream; every rank runs the same program)\"; "
                  "style=\"rounded,filled\"; fillcolor=\"#f7fbff\"; "
                  "color=\"#3182bd\";\n");
  AppendGroup(g, NodeGroup::kMicroStep, &out);
  absl::StrAppend(&out, "  }\n");
  absl::StrAppend(&out, "  subgraph cluster_comm {\n    label=\"comm stream "
                        "(last micro-step)\"; style=\"rounded,filled\"; "
                        "fillcolor=\"#fcf5fd\"; color=\"#6a3d9a\";\n");
  AppendGroup(g, NodeGroup::kComm, &out);
  absl::StrAppend(&out, "  }\n");
  AppendGroup(g, NodeGroup::kStep, &out);

  // Legend: the styles, then one entry per bucket with its size.
  absl::StrAppend(&out, "  subgraph cluster_legend {\n    label=\"legend\"; "
                        "style=rounded; color=\"#aaaaaa\"; fontsize=11;\n");
  const char* phases[] = {"forward", "backward", "optimizer"};
  std::string prev;
  for (const char* p : phases) {
    std::string id = absl::StrCat("legend_", p);
    absl::StrAppend(&out, "    ", id, " [label=\"", p,
                    " (compute)\", shape=box, style=\"filled,rounded\", "
                    "fillcolor=\"", PhaseColor(p), "\"];\n");
    if (!prev.empty()) {
      absl::StrAppend(&out, "    ", prev, " -> ", id, " [style=invis];\n");
    }
    prev = id;
  }
  absl::StrAppend(&out, "    legend_comm [label=\"all-reduce (comm)\", "
                        "shape=hexagon, style=\"filled,bold\", penwidth=2, "
                        "color=\"#6a3d9a\", fillcolor=\"#ffffff\"];\n"
                        "    ", prev, " -> legend_comm [label=\"data\"];\n"
                        "    legend_comm -> legend_event [style=dashed, "
                        "label=\"event\"];\n"
                        "    legend_event [label=\"waits for event\", "
                        "shape=plaintext];\n");
  prev = "legend_event";
  for (const BucketSummary& b : g.buckets) {
    std::string id = absl::StrCat("legend_b", b.id);
    absl::StrAppend(&out, "    ", id, " [label=\"bucket ", b.id, ": ",
                    HumanBytes(b.bytes), " (", b.bytes, " B), ",
                    b.parameters.size(), " params\", shape=folder, "
                    "style=filled, fillcolor=\"", BucketColor(b.id), "\"];\n",
                    "    ", prev, " -> ", id, " [style=invis];\n");
    prev = id;
  }
  absl::StrAppend(&out, "  }\n");

  for (const VizEdge& e : g.edges) {
    absl::StrAppend(&out, "  ", e.from, " -> ", e.to,
                    e.kind == EdgeKind::kEvent
                        ? " [style=dashed, color=\"#6a3d9a\", constraint=false];\n"
                        : ";\n");
  }
  absl::StrAppend(&out, "}\n");
  return out;
}

}  // namespace trainc::viz

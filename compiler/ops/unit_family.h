// What the unit families' headers (compiler/ops/*_family.h) share: the
// shape arithmetic and attributes their Resolve reads.
#ifndef TRAINC_COMPILER_OPS_UNIT_FAMILY_H_
#define TRAINC_COMPILER_OPS_UNIT_FAMILY_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainc::ops::unit {

// Elements of a tensor of `shape`.
inline int64_t Elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// attrs[name], or `fallback` where the instruction has none.
inline double Attr(const std::map<std::string, double>& attrs, const char* name,
                   double fallback) {
  auto it = attrs.find(name);
  return it == attrs.end() ? fallback : it->second;
}

// A normalization over the last axis: `width` the elements of the
// per-feature operand ([d]: the weight or its gradient), `rows` the rest of
// x. "" or why x is not [rows, width].
inline std::string RowsOf(const std::vector<int64_t>& x, const std::vector<int64_t>& per_feature,
                          int64_t* rows, int64_t* width) {
  *width = Elements(per_feature);
  if (*width == 0 || Elements(x) % *width != 0) return "x is not [B, d]";
  *rows = Elements(x) / *width;
  return "";
}

}  // namespace trainc::ops::unit

#endif  // TRAINC_COMPILER_OPS_UNIT_FAMILY_H_

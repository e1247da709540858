#include "compiler/util/number_text.h"

#include <cstdio>
#include <cstdlib>

namespace trainc {

std::string ShortestDouble(double d) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.15g", d);
  if (std::strtod(buf, nullptr) != d) std::snprintf(buf, sizeof(buf), "%.17g", d);
  return buf;
}

}  // namespace trainc

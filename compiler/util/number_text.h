// Numbers as text that reads back exactly and stays short.
#ifndef TRAINC_COMPILER_UTIL_NUMBER_TEXT_H_
#define TRAINC_COMPILER_UTIL_NUMBER_TEXT_H_

#include <string>

namespace trainc {

// The shorter of %.15g and %.17g that reads back as `d`: 0.001 stays
// "0.001" (diffable), 1/255 still round-trips exactly, 10000 is "10000".
// Plan files, model signatures and config.json messages write numbers so.
std::string ShortestDouble(double d);

}  // namespace trainc

#endif  // TRAINC_COMPILER_UTIL_NUMBER_TEXT_H_

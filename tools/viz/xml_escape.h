// Escaping text for XML/HTML attributes and content, and for DOT strings.
#ifndef TRAINC_TOOLS_VIZ_XML_ESCAPE_H_
#define TRAINC_TOOLS_VIZ_XML_ESCAPE_H_

#include <string>

namespace trainc::viz {

// & < > " ' -> entities: safe in element content and in quoted attributes.
std::string XmlEscape(const std::string& text);

// For the inside of a DOT double-quoted string: escapes '"' and '\'.
std::string DotEscape(const std::string& text);

}  // namespace trainc::viz

#endif  // TRAINC_TOOLS_VIZ_XML_ESCAPE_H_

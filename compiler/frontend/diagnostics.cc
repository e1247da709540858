#include "compiler/frontend/diagnostics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "compiler/frontend/source_text.h"

namespace trainc {
namespace {

// Lines longer than this are shown as a window around the column.
constexpr int kMaxShownLine = 200;
constexpr int kWindow = 160;

const char* SeverityName(Diagnostic::Severity severity) {
  switch (severity) {
    case Diagnostic::Severity::kError:
      return "error";
    case Diagnostic::Severity::kWarning:
      return "warning";
    case Diagnostic::Severity::kNote:
      return "note";
  }
  return "error";
}

// Control characters and invalid bytes would garble a terminal; they are
// shown as '?' so that the caret still lines up (one column each).
void AppendShown(char32_t c, std::string* out) {
  if (c == '\t') {
    out->push_back('\t');
  } else if (c < 0x20 || c == 0x7F ||
             (c >= frontend::kInvalidByteBase &&
              c <= frontend::kInvalidByteBase + 0xFF)) {
    out->push_back('?');
  } else {
    frontend::AppendUtf8(c, out);
  }
}

// Appends the source line and the caret line for one diagnostic.
void AppendExcerpt(const Diagnostic& d, std::string_view source,
                   std::string* out) {
  const std::u32string line =
      frontend::DecodeUtf8Lenient(frontend::SourceLine(source, d.location.line));
  const int size = static_cast<int>(line.size());
  const int column = std::max(0, d.location.column - 1);  // 0-based
  int begin = 0;
  int end = size;
  if (size > kMaxShownLine) {
    begin = std::max(0, std::min(column - kWindow / 2, size - kWindow));
    end = std::min(size, begin + kWindow);
  }
  std::string shown;
  std::string caret;
  if (begin > 0) {
    shown += "...";
    caret += "   ";
  }
  for (int i = begin; i < end; ++i) AppendShown(line[i], &shown);
  if (end < size) shown += "...";
  for (int i = begin; i < std::min(column, end); ++i) {
    caret.push_back(line[i] == '\t' ? '\t' : ' ');
  }
  // A column past the end (e.g. "expected '}'" at end of file) still gets
  // a caret right after the last character.
  for (int i = end; i < column && size <= kMaxShownLine; ++i) {
    caret.push_back(' ');
  }
  caret.push_back('^');
  const int underline_end = std::min(column + std::max(1, d.length), end);
  for (int i = column + 1; i < underline_end; ++i) caret.push_back('~');
  absl::StrAppend(out, shown, "\n", caret, "\n");
}

}  // namespace

std::string FormatDiagnostics(const std::vector<Diagnostic>& diagnostics,
                              std::string_view source) {
  std::string out;
  for (const Diagnostic& d : diagnostics) {
    if (!d.location.file.empty()) {
      absl::StrAppend(&out, d.location.file, ":");
      if (d.location.line > 0) {
        absl::StrAppend(&out, d.location.line, ":", d.location.column, ":");
      }
      out += " ";
    }
    absl::StrAppend(&out, SeverityName(d.severity), ": ", d.message, "\n");
    if (d.location.line > 0) AppendExcerpt(d, source, &out);
    if (!d.hint.empty()) absl::StrAppend(&out, "  hint: ", d.hint, "\n");
  }
  return out;
}

namespace frontend {

void DiagnosticSink::Error(Span span, std::string message, std::string hint) {
  if (full()) {
    ++dropped_errors_;
    return;
  }
  ++error_count_;
  Add(Diagnostic::Severity::kError, span, std::move(message), std::move(hint));
}

void DiagnosticSink::Warning(Span span, std::string message, std::string hint) {
  if (diagnostics_.size() >= 4 * kMaxErrors) return;
  Add(Diagnostic::Severity::kWarning, span, std::move(message),
      std::move(hint));
}

void DiagnosticSink::Note(Span span, std::string message, std::string hint) {
  if (diagnostics_.size() >= 4 * kMaxErrors) return;
  Add(Diagnostic::Severity::kNote, span, std::move(message), std::move(hint));
}

void DiagnosticSink::CommandLineError(std::string message, std::string hint) {
  if (full()) {
    ++dropped_errors_;
    return;
  }
  ++error_count_;
  Add(Diagnostic::Severity::kError, Span{}, std::move(message),
      std::move(hint), /*command_line=*/true);
}

void DiagnosticSink::CommandLineNote(std::string message, std::string hint) {
  Add(Diagnostic::Severity::kNote, Span{}, std::move(message), std::move(hint),
      /*command_line=*/true);
}

void DiagnosticSink::Add(Diagnostic::Severity severity, Span span,
                         std::string message, std::string hint,
                         bool command_line) {
  Diagnostic d;
  if (!command_line) d.location.file = file_name_;
  d.location.line = command_line ? 0 : span.line;
  d.location.column = d.location.line > 0 ? span.column : 0;
  d.length = span.length;
  d.severity = severity;
  d.message = std::move(message);
  d.hint = std::move(hint);
  diagnostics_.push_back(std::move(d));
}

std::vector<Diagnostic> DiagnosticSink::Take() {
  // Source order reads best; position-less diagnostics (missing blocks,
  // flags) go first. Stable, so related diagnostics keep their order.
  std::stable_sort(diagnostics_.begin(), diagnostics_.end(),
                   [](const Diagnostic& a, const Diagnostic& b) {
                     return std::make_pair(a.location.line, a.location.column) <
                            std::make_pair(b.location.line, b.location.column);
                   });
  if (dropped_errors_ > 0) {
    Diagnostic note;
    note.location.file = file_name_;
    note.severity = Diagnostic::Severity::kNote;
    note.message = absl::StrCat("too many errors; ", dropped_errors_,
                                " more not shown");
    diagnostics_.push_back(std::move(note));
  }
  return std::move(diagnostics_);
}

}  // namespace frontend
}  // namespace trainc

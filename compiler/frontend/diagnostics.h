// Diagnostics of the .train front end and their rendering.
//
//   fashion.train:5:10: error: unknown op 'rleu'
//     h1 = rleu(linear(image, 256))
//          ^~~~
//     hint: did you mean 'relu'?
//
// Columns are 1-based and count Unicode code points (tabs count as one).
#ifndef TRAINC_COMPILER_FRONTEND_DIAGNOSTICS_H_
#define TRAINC_COMPILER_FRONTEND_DIAGNOSTICS_H_

#include <string>
#include <string_view>
#include <vector>

#include "compiler/spec/train_spec.h"

namespace trainc {

struct Diagnostic {
  enum class Severity { kError, kWarning, kNote };

  // line 0: no position in the source (a command-line flag, a missing
  // block); rendered without a source line. An empty file is omitted too.
  SourceLocation location;
  int length = 1;  // code points to underline, starting at the column
  Severity severity = Severity::kError;
  std::string message;
  std::string hint;  // empty: no hint line
};

// Renders each diagnostic as "file:line:col: error: message", the source
// line (trimmed around the column when longer than 200 code points), a caret
// line, and "  hint: ..." when there is a hint.
std::string FormatDiagnostics(const std::vector<Diagnostic>& diagnostics,
                              std::string_view source);

namespace frontend {

// A 1-based position plus how many code points it covers.
struct Span {
  int line = 0;
  int column = 0;
  int length = 1;
};

// Collects diagnostics for one file and stops collecting errors after a cap,
// so that a garbage input cannot produce megabytes of output.
class DiagnosticSink {
 public:
  static constexpr int kMaxErrors = 20;

  explicit DiagnosticSink(std::string file_name)
      : file_name_(std::move(file_name)) {}

  void Error(Span span, std::string message, std::string hint = "");
  void Warning(Span span, std::string message, std::string hint = "");
  void Note(Span span, std::string message, std::string hint = "");
  // An error about a command-line flag: no file, no position.
  void CommandLineError(std::string message, std::string hint = "");
  void CommandLineNote(std::string message, std::string hint = "");

  int error_count() const { return error_count_; }
  // True once kMaxErrors errors were reported; later errors are dropped.
  bool full() const { return error_count_ >= kMaxErrors; }

  // The diagnostics in source order (stable), plus a closing note when
  // errors were dropped.
  std::vector<Diagnostic> Take();

 private:
  void Add(Diagnostic::Severity severity, Span span, std::string message,
           std::string hint, bool command_line = false);

  std::string file_name_;
  std::vector<Diagnostic> diagnostics_;
  int error_count_ = 0;
  int dropped_errors_ = 0;
};

}  // namespace frontend
}  // namespace trainc

#endif  // TRAINC_COMPILER_FRONTEND_DIAGNOSTICS_H_

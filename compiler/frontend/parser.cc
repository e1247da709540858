// ANTLR glue: a screening lexer, friendly syntax-error messages, and the
// exception boundary (nothing thrown by ANTLR leaves ParseTrain).
#include "compiler/frontend/parser.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "antlr4-runtime.h"
#include "compiler/frontend/TrainLexer.h"
#include "compiler/frontend/TrainParser.h"
#include "compiler/frontend/ast_builder.h"
#include "compiler/frontend/source_text.h"

namespace trainc::frontend {
namespace {

using trainc_antlr::TrainLexer;
using trainc_antlr::TrainParser;

// Thrown to stop lexing/parsing once the error cap is reached or nesting is
// too deep; caught in ParseTrain. A ParseCancellationException because the
// generated rules catch only RecognitionException and let this one through.
class StopParsing : public antlr4::ParseCancellationException {};

std::string DescribeToken(const antlr4::Token* token) {
  if (token == nullptr || token->getType() == antlr4::Token::EOF) {
    return "end of file";
  }
  // Clipped so that one huge token cannot flood the message.
  const std::u32string text = DecodeUtf8Lenient(token->getText());
  constexpr size_t kMaxShown = 40;
  std::string shown;
  for (size_t i = 0; i < text.size() && i < kMaxShown; ++i) {
    if (text[i] < 0x20 || text[i] >= kInvalidByteBase) {
      shown.push_back('?');
    } else {
      AppendUtf8(text[i], &shown);
    }
  }
  if (text.size() > kMaxShown) shown += "...";
  return absl::StrCat("'", shown, "'");
}

// "an expression", "'}'", "a name or '='": what the parser would accept.
std::string DescribeExpected(const antlr4::Parser& parser,
                             const antlr4::misc::IntervalSet& expected) {
  std::vector<std::string> names;
  const auto has = [&](size_t type) { return expected.contains(type); };
  const bool expression = has(TrainParser::INT) && has(TrainParser::IDENT) &&
                          has(TrainParser::LPAREN);
  if (expression) names.push_back("an expression");
  for (ssize_t raw : expected.toList()) {
    const size_t type = static_cast<size_t>(raw);
    const bool starts_expression =
        type == TrainParser::INT || type == TrainParser::FLOAT ||
        type == TrainParser::STRING || type == TrainParser::BOOL ||
        type == TrainParser::IDENT || type == TrainParser::LPAREN ||
        type == TrainParser::MINUS || type == TrainParser::PLUS;
    if (expression && starts_expression) continue;
    switch (type) {
      case TrainParser::IDENT:
        names.push_back("a name");
        break;
      case TrainParser::INT:
        names.push_back("an integer");
        break;
      case TrainParser::FLOAT:
        names.push_back("a number");
        break;
      case TrainParser::STRING:
        names.push_back("a string");
        break;
      case TrainParser::BOOL:
        names.push_back("true or false");
        break;
      case antlr4::Token::EOF:
        names.push_back("end of file");
        break;
      default: {
        const std::string literal =
            parser.getVocabulary().getLiteralName(type);
        if (!literal.empty()) names.push_back(literal);
        break;
      }
    }
  }
  if (names.empty()) return "something else";
  if (names.size() == 1) return names[0];
  const std::string last = names.back();
  names.pop_back();
  return absl::StrCat(absl::StrJoin(names, ", "), " or ", last);
}

// Screens tokens as they are lexed, so that neither the lexer nor the parser
// ever sees a character it cannot handle:
//   - BAD_CHAR is reported and hidden from the parser;
//   - UNTERMINATED_STRING is reported and passed on as a STRING;
//   - bracket/unary nesting deeper than kMaxNesting is reported and stops
//     everything (it bounds the parser's recursion).
class ScreeningLexer : public TrainLexer {
 public:
  ScreeningLexer(antlr4::CharStream* input, DiagnosticSink* sink)
      : TrainLexer(input), sink_(sink) {}

  std::unique_ptr<antlr4::Token> nextToken() override {
    std::unique_ptr<antlr4::Token> token = TrainLexer::nextToken();
    auto* writable = dynamic_cast<antlr4::CommonToken*>(token.get());
    const size_t type = token->getType();
    if (type == BAD_CHAR && writable != nullptr) {
      const std::u32string text = DecodeUtf8Lenient(token->getText());
      const char32_t c = text.empty() ? 0 : text[0];
      sink_->Error(TokenSpan(token.get()),
                   absl::StrCat("unexpected character ", DescribeCodePoint(c)),
                   c == '\'' ? "strings use double quotes: \"...\"" : "");
      writable->setChannel(antlr4::Token::HIDDEN_CHANNEL);
    } else if (type == UNTERMINATED_STRING && writable != nullptr) {
      sink_->Error(TokenSpan(token.get()), "unterminated string",
                   "close it with '\"' on the same line");
      writable->setType(STRING);
    }
    TrackNesting(*token);
    if (sink_->full()) throw StopParsing();
    return token;
  }

 private:
  void TrackNesting(const antlr4::Token& token) {
    switch (token.getType()) {
      case LPAREN:
      case LBRACK:
        ++brackets_;
        break;
      case RPAREN:
      case RBRACK:
        if (brackets_ > 0) --brackets_;
        break;
      case LBRACE:
      case RBRACE:
        // Block boundaries: unbalanced brackets before them are syntax
        // errors already; do not let them add up across blocks.
        brackets_ = 0;
        unary_ = 0;
        break;
      case ASSIGN:
        unary_ = 0;
        break;
      case PLUS:
      case MINUS:
        if (!after_operand_) ++unary_;
        break;
      default:
        break;
    }
    if (token.getChannel() == antlr4::Token::DEFAULT_CHANNEL) {
      const size_t t = token.getType();
      after_operand_ = t == INT || t == FLOAT || t == STRING || t == BOOL ||
                       t == IDENT || t == RPAREN || t == RBRACK;
    }
    if (brackets_ + unary_ > kMaxNesting) {
      sink_->Error(TokenSpan(&token),
                   absl::StrCat("expression nested too deeply (more than ",
                                kMaxNesting, " levels)"),
                   "split it into several statements");
      throw StopParsing();
    }
  }

  DiagnosticSink* sink_;
  int brackets_ = 0;
  int unary_ = 0;  // unary +/- in the current statement (conservative)
  bool after_operand_ = false;
};

// DefaultErrorStrategy's recovery with this language's wording:
// "expected ')', found 'h2'" instead of "mismatched input 'h2' expecting ')'".
class FriendlyErrorStrategy : public antlr4::DefaultErrorStrategy {
 public:
  explicit FriendlyErrorStrategy(DiagnosticSink* sink) : sink_(sink) {}

 protected:
  void reportNoViableAlternative(antlr4::Parser* parser,
                                 const antlr4::NoViableAltException& e) override {
    antlr4::Token* start = e.getStartToken();
    antlr4::Token* token = e.getOffendingToken();
    if (MissingBlockClose(parser, token)) return;
    // `gpus 2`: an item that is neither `name = value` nor a declaration.
    if (parser->getContext() != nullptr &&
        parser->getContext()->getRuleIndex() == TrainParser::RuleItem &&
        start != nullptr && token != nullptr &&
        start->getType() == TrainParser::IDENT &&
        token->getTokenIndex() == start->getTokenIndex() + 1) {
      Report(TokenSpan(token),
             absl::StrCat("expected '=' after '", start->getText(),
                          "', found ", DescribeToken(token)),
             "a setting is `name = value`; a declaration is "
             "`input name: f32[N]`");
      return;
    }
    Report(TokenSpan(token), absl::StrCat("unexpected ", DescribeToken(token)),
           absl::StrCat("expected ",
                        DescribeExpected(*parser, e.getExpectedTokens())));
  }

  // `model m { ... ` missing its '}' before `data {`: the parser sees an
  // item `data {`. Says what is actually wrong.
  bool MissingBlockClose(antlr4::Parser* parser, antlr4::Token* token) {
    antlr4::Token* previous = parser->getTokenStream()->LT(-1);
    if (token == nullptr || token->getType() != TrainParser::LBRACE) {
      return false;
    }
    antlr4::Token* kind = previous;
    if (kind == nullptr || kind->getType() != TrainParser::IDENT ||
        kind->getTokenIndex() + 1 != token->getTokenIndex()) {
      kind = parser->getTokenStream()->LT(1);
      if (kind == token) return false;
    }
    if (kind == nullptr || kind->getType() != TrainParser::IDENT) return false;
    const std::string text = kind->getText();
    if (text != "model" && text != "data" && text != "train") return false;
    Report(TokenSpan(kind),
           absl::StrCat("missing '}' before the ", text, " block"),
           "the previous block is not closed");
    return true;
  }

  void reportInputMismatch(antlr4::Parser* parser,
                           const antlr4::InputMismatchException& e) override {
    if (MissingBlockClose(parser, e.getOffendingToken())) return;
    Expected(parser, e.getOffendingToken(), e.getExpectedTokens());
  }

  void reportFailedPredicate(antlr4::Parser* parser,
                             const antlr4::FailedPredicateException& e) override {
    Report(TokenSpan(e.getOffendingToken()),
           absl::StrCat("unexpected ", DescribeToken(e.getOffendingToken())),
           "");
  }

  void reportUnwantedToken(antlr4::Parser* parser) override {
    if (inErrorRecoveryMode(parser)) return;
    beginErrorCondition(parser);
    antlr4::Token* token = parser->getCurrentToken();
    Report(TokenSpan(token), absl::StrCat("unexpected ", DescribeToken(token)),
           absl::StrCat("expected ",
                        DescribeExpected(*parser, getExpectedTokens(parser))));
  }

  void reportMissingToken(antlr4::Parser* parser) override {
    if (inErrorRecoveryMode(parser)) return;
    beginErrorCondition(parser);
    antlr4::Token* token = parser->getCurrentToken();
    Report(PositionFor(parser, token),
           absl::StrCat("expected ",
                        DescribeExpected(*parser, getExpectedTokens(parser)),
                        " before ", DescribeToken(token)),
           "");
  }

 private:
  void Expected(antlr4::Parser* parser, antlr4::Token* token,
                const antlr4::misc::IntervalSet& expected) {
    Report(PositionFor(parser, token),
           absl::StrCat("expected ", DescribeExpected(*parser, expected),
                        ", found ", DescribeToken(token)),
           "");
  }

  // Like clang: when the offending token starts a later line (or is the end
  // of the file), the problem is at the end of the previous token: that is
  // where the ')' or '}' is missing.
  static Span PositionFor(antlr4::Parser* parser, antlr4::Token* token) {
    antlr4::Token* previous = parser->getTokenStream()->LT(-1);
    if (token != nullptr && previous != nullptr &&
        (token->getType() == antlr4::Token::EOF ||
         token->getLine() > previous->getLine())) {
      Span span = TokenSpan(previous);
      span.column += span.length;
      span.length = 1;
      return span;
    }
    return TokenSpan(token);
  }

  void Report(Span span, std::string message, std::string hint) {
    sink_->Error(span, std::move(message), std::move(hint));
    if (sink_->full()) throw StopParsing();
  }

  DiagnosticSink* sink_;
};

// Safety net: anything else that reaches the listeners (there should be
// nothing) goes to the sink instead of the console.
class SinkErrorListener : public antlr4::BaseErrorListener {
 public:
  explicit SinkErrorListener(DiagnosticSink* sink) : sink_(sink) {}

  void syntaxError(antlr4::Recognizer*, antlr4::Token*, size_t line,
                   size_t column, const std::string& message,
                   std::exception_ptr) override {
    sink_->Error(Span{static_cast<int>(line), static_cast<int>(column) + 1, 1},
                 message);
    if (sink_->full()) throw StopParsing();
  }

 private:
  DiagnosticSink* sink_;
};

}  // namespace

std::optional<ast::File> ParseTrain(std::string_view source,
                                    DiagnosticSink& sink) {
  const int errors_before = sink.error_count();
  try {
    // The ANTLR runtime throws on invalid UTF-8; sanitised text keeps one
    // code point per invalid byte, so columns are unchanged.
    antlr4::ANTLRInputStream input(SanitizeUtf8(source));
    ScreeningLexer lexer(&input, &sink);
    SinkErrorListener listener(&sink);
    lexer.removeErrorListeners();
    lexer.addErrorListener(&listener);
    antlr4::CommonTokenStream tokens(&lexer);
    tokens.fill();

    TrainParser parser(&tokens);
    parser.removeErrorListeners();
    parser.addErrorListener(&listener);
    parser.setErrorHandler(std::make_shared<FriendlyErrorStrategy>(&sink));
    TrainParser::FileContext* tree = parser.file();
    if (sink.error_count() > errors_before) return std::nullopt;

    ast::File file;
    if (!BuildAst(tree, sink, &file)) return std::nullopt;
    return file;
  } catch (const antlr4::ParseCancellationException&) {
    // Reported already (error cap or nesting limit).
  } catch (const std::exception& e) {
    sink.Error(Span{1, 1, 1}, absl::StrCat("internal parser error: ", e.what()));
  }
  if (sink.error_count() == errors_before) {
    sink.Error(Span{1, 1, 1}, "internal parser error");
  }
  return std::nullopt;
}

}  // namespace trainc::frontend

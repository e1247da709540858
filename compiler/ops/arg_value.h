// A constant of the .train language: an integer, a number, a string or a
// boolean. The front end evaluates constant expressions (`2 * width`,
// `1 / 255`) and reads command-line values to it
// (compiler/frontend/const_eval.h); the op table's rules read a call's
// constant arguments as it (OpCall::constants, compiler/ops/op_table.h).
#ifndef TRAINC_COMPILER_OPS_ARG_VALUE_H_
#define TRAINC_COMPILER_OPS_ARG_VALUE_H_

#include <cstdint>
#include <string>
#include <utility>

namespace trainc::ops {

struct ArgValue {
  enum class Kind { kInt, kFloat, kString, kBool } kind = Kind::kInt;
  // Only the field of `kind` is meaningful.
  int64_t i = 0;
  double f = 0;
  std::string s;
  bool b = false;

  static ArgValue Int(int64_t v) {
    ArgValue a;
    a.kind = Kind::kInt;
    a.i = v;
    return a;
  }
  static ArgValue Float(double v) {
    ArgValue a;
    a.kind = Kind::kFloat;
    a.f = v;
    return a;
  }
  static ArgValue String(std::string v) {
    ArgValue a;
    a.kind = Kind::kString;
    a.s = std::move(v);
    return a;
  }
  static ArgValue Bool(bool v) {
    ArgValue a;
    a.kind = Kind::kBool;
    a.b = v;
    return a;
  }

  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat; }
  // An integer or a number as a double.
  double AsDouble() const {
    return kind == Kind::kInt ? static_cast<double>(i) : f;
  }
};

}  // namespace trainc::ops

#endif  // TRAINC_COMPILER_OPS_ARG_VALUE_H_

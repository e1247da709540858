"""Tests of tools/function_lengths.py, the function-length report."""

import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import function_lengths  # noqa: E402

SOURCE = r'''#include <string>
// A comment with a brace {
namespace trainc {
namespace {

const int kTable[] = {1, 2, 3};

struct Point {
  int x = 0;
  int Sum() const { return x; }
};

}  // namespace

Widget::Widget(int a) : a_{a}, b_(a) {
  b_ = a;
}

absl::Status Run(const std::string& s) {
  const char* raw = R"(}}})";
  const char* str = "{";
  char c = '}';
  auto f = [&](int x) {
    return x + 1;
  };
  if (s.empty()) {
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

extern "C" {
int Entry() { return 0; }
}

bool operator==(const Point& a, const Point& b) {
  return a.x == b.x;
}

}  // namespace trainc
'''


class FunctionLengthsTest(unittest.TestCase):
    def test_finds_each_function_with_its_lines(self):
        found = {name: (first, last)
                 for name, first, last in function_lengths.functions(SOURCE)}
        self.assertEqual(found, {
            "Point::Sum": (10, 10),
            "Widget::Widget": (15, 17),
            "Run": (19, 30),
            "Entry": (33, 33),
            "operator==": (36, 38),
        })

    def test_skips_tests_and_testing_folders(self):
        self.assertTrue(function_lengths.is_production("runtime/exec/executor.cc"))
        self.assertFalse(function_lengths.is_production("runtime/exec/executor_test.cc"))
        self.assertFalse(function_lengths.is_production("runtime/exec/testing/fake.h"))
        self.assertFalse(function_lengths.is_production("third_party/x/y.cc"))
        self.assertFalse(function_lengths.is_production("tools/viz/check_xml.py"))

    def test_measure_sorts_longest_first(self):
        with tempfile.TemporaryDirectory() as root:
            with open(os.path.join(root, "a.cc"), "w") as f:
                f.write(SOURCE)
            with open(os.path.join(root, "a_test.cc"), "w") as f:
                f.write("void Long() {\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n}\n")
            rows = function_lengths.measure([root])
            self.assertEqual([(r[0], r[3]) for r in rows[:2]],
                             [(12, "Run"), (3, "Widget::Widget")])
            self.assertEqual(len(rows), 5)


if __name__ == "__main__":
    unittest.main()

#!/usr/bin/env python3
"""Lists the production C++ functions of the tree by length.

    python3 tools/function_lengths.py                 # the 20 longest, counts
    python3 tools/function_lengths.py --top 50 --over 80
    python3 tools/function_lengths.py runtime/exec    # one folder

A function's length is the number of lines from the line that names it
(`absl::Status Executor::Prepare(`) to the line of its closing brace, both
included. Production code is every .cc, .cu and .h file under the given
folders (compiler, runtime and tools by default) except tests: files named
*_test.*, files under a testing/ folder, and third_party.

The parser is a heuristic, not a C++ front end: it blanks comments, string
and character literals (raw strings included) and preprocessor lines, then
matches braces. A brace at namespace or class scope opens a function body
when the text before it holds a parameter list and no namespace, class,
struct, union or enum keyword, and does not end in `=` (an initializer).
Lambdas and blocks inside a function count towards that function.
"""

import argparse
import os
import re
import sys

DEFAULT_ROOTS = ("compiler", "runtime", "tools")
EXTENSIONS = (".cc", ".cu", ".h", ".cuh")
SCOPE_KEYWORDS = re.compile(r"\b(namespace|class|struct|union|enum)\b")
EXTERN = re.compile(r"^\s*extern\s*\"\s*\"\s*$")
IDENT = re.compile(r"[A-Za-z_~][A-Za-z_0-9]*(?:\s*::\s*~?[A-Za-z_][A-Za-z_0-9]*)*$")


def blank(text):
    """Comments, literals and preprocessor lines as spaces; newlines kept."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            # A preprocessor line, with its continuations.
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c == "\n":
            out.append(c)
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        raw = re.match(r'R"([^(\s]*)\(', text[i:i + 20])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find(")" + raw.group(1) + '"', i)
            j = n if end < 0 else end + len(raw.group(1)) + 2
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:j - 1]) + '"')
            i = j
            continue
        if c in "\"'":
            # A digit separator (1'000'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and \
                    i + 1 < n and text[i + 1].isalnum() and \
                    re.match(r"[0-9a-fA-FxX.]", text[i - 1]):
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(c + " " * max(0, j - i - 2) + (c if j - i >= 2 else ""))
            i = j
            continue
        out.append(c)
        i += 1
    return "".join(out)


def function_name(header):
    """The name before the parameter list, or None if there is none."""
    depth = 0
    # The parameter list is the first top-level parenthesis after the name;
    # `operator()(` and `operator<(` are handled by their own pattern.
    op = re.search(r"(\b[\w:]*operator\s*(\(\)|[^\s(]+))\s*\(", header)
    if op:
        return re.sub(r"\s+", "", op.group(1))
    for i, c in enumerate(header):
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(0, depth - 1)
        elif c == "(" and depth == 0:
            m = IDENT.search(header[:i].rstrip())
            if m:
                return re.sub(r"\s+", "", m.group(0))
            return None
    return None


def functions(text):
    """(name, first line, last line) for each function defined in text."""
    code = blank(text)
    found = []
    # Each scope: (kind, class name). kind: "outer" (file, namespace, class,
    # extern "C"), "body" (a function's body), "block" (inside a body, or an
    # initializer at namespace scope), "init" (a member's brace initializer
    # in a constructor's initializer list).
    stack = [("outer", None)]
    header_start = 0
    current = None  # (name, first line) of the open function
    line = 1
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
            continue
        kind = stack[-1][0]
        if c == "{":
            if kind != "outer":
                stack.append(("block", None))
                continue
            header = code[header_start:i]
            stripped = header.strip()
            before_paren = stripped.split("(", 1)[0]
            if SCOPE_KEYWORDS.search(before_paren) or EXTERN.match(stripped) \
                    or not stripped:
                m = re.search(r"\b(?:class|struct|union)\s+(\w+)", before_paren)
                stack.append(("outer", m.group(1) if m else None))
                header_start = i + 1
                continue
            if stripped.endswith("=") or "(" not in stripped or \
                    stripped.endswith(","):
                stack.append(("block", None))
                continue
            if re.search(r"\)\s*:", stripped) and re.search(r"[\w>]$", stripped):
                # A member initialized with braces: `: a_{x}`.
                stack.append(("init", None))
                continue
            name = function_name(stripped)
            if name is None:
                stack.append(("block", None))
                continue
            cls = next((s[1] for s in reversed(stack) if s[1]), None)
            if cls and "::" not in name:
                name = cls + "::" + name
            name_at = header_start + header.find(name.split("::")[-1]) \
                if name.split("::")[-1] in header else i
            first = line - code.count("\n", name_at, i)
            stack.append(("body", None))
            current = (name, first)
            continue
        if c == "}":
            if len(stack) == 1:
                continue  # unbalanced; ignore
            closed = stack.pop()[0]
            if closed == "body":
                found.append((current[0], current[1], line))
                current = None
                header_start = i + 1
            elif closed == "outer":
                header_start = i + 1
            elif closed == "block" and stack[-1][0] == "outer":
                pass  # an initializer; its `;` ends the declaration
            continue
        if c == ";" and kind == "outer":
            header_start = i + 1
    return found


def is_production(path):
    parts = path.replace(os.sep, "/").split("/")
    name = parts[-1]
    if not name.endswith(EXTENSIONS):
        return False
    if re.search(r"_test\.[a-z]+$", name) or "testing" in parts[:-1]:
        return False
    return "third_party" not in parts


def walk(roots):
    for root in roots:
        if os.path.isfile(root):
            yield root
            continue
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if not d.startswith(("bazel-", ".")))
            for f in sorted(files):
                yield os.path.join(folder, f)


def measure(roots):
    """[(length, path, line, name)] for every production function, longest first."""
    rows = []
    for path in walk(roots):
        if not is_production(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        for name, first, last in functions(text):
            rows.append((last - first + 1, path, first, name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(
        description="List production C++ functions by length (lines from "
                    "the name to the closing brace).")
    parser.add_argument("paths", nargs="*", default=list(DEFAULT_ROOTS),
                        help="folders or files (default: compiler runtime tools)")
    parser.add_argument("--top", type=int, default=20,
                        help="how many of the longest to list (default 20)")
    parser.add_argument("--over", type=int, action="append",
                        help="also count functions over this many lines "
                             "(default: 80 and 150)")
    args = parser.parse_args(argv)
    rows = measure(args.paths)
    for length, path, line, name in rows[:args.top]:
        print("%5d  %s:%d  %s" % (length, path, line, name))
    print("functions: %d" % len(rows))
    if rows:
        print("longest: %d lines (%s)" % (rows[0][0], rows[0][3]))
    for limit in args.over or [80, 150]:
        print("over %d lines: %d" % (limit, sum(1 for r in rows if r[0] > limit)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

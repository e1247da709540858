"""ARCHITECTURE.md's package table is true to the includes.

The table "The packages and what each may include" says, per package, which
other packages its production code may include. This test reads the table
and every production .cc, .h, .cu and .cuh under compiler/, runtime/ and
tools/, and fails

- naming the file, the line and the include, when a package includes a
  package its row does not allow;
- naming the row, when the row allows an arrow no file of the package
  uses (the table has gone stale the other way);
- naming the packages, when two packages' production code includes each
  other (a folder cycle), even where the table allows both arrows;
- when a source file belongs to no row.

How a row is read (the table's third column): a comma-separated list of
packages, each by its path or its last folder name (`ops`, `plan`,
`device`), possessives allowed (`spec's model signature`). A parenthesis is
a note, except that a backquoted file path in it (`compiler/plan/settings.h`)
allows that file alone. `X: a, b` after a semicolon adds arrows for the
sub-package X of a row that names several (`cuda: comm`) or for a
sub-folder (`nccl: cuda`). `everything in runtime` allows every runtime
package, `anything` every package (neither is checked for use); `absl` and
other libraries outside the tree are not checked. A row's package owns its
folder and the folders below it that no other row names.

Test code follows its own rule: files named *_test.*, files under a
testing/ folder and files only in test targets (cc_test, or testonly
binaries) may include anything: they link into tests, not into the
programs. A testonly library outside a testing/ folder (a test helper
beside production code) is held to its package's row like production
code, since it draws its package's arrows; one that needs more belongs in
a testing/ folder. A package with no production code (runtime/conformance)
is held to its row by its tests.

The sources are read from the checkout this test's runfiles link into (the
test is tagged "external", so its result is never cached: it reruns on
every `bazel test`).
"""

import glob
import os
import re
import unittest

RUNFILES = os.path.join(os.environ.get("TEST_SRCDIR", "."),
                        os.environ.get("TEST_WORKSPACE", "trainc"))
ARCH = os.path.join(RUNFILES, "ARCHITECTURE.md")
# The source tree: ARCHITECTURE.md in the runfiles links into it.
ROOT = os.environ.get("TRAINC_SOURCE_ROOT",
                      os.path.dirname(os.path.realpath(ARCH)))
TOP = ("compiler", "runtime", "tools")
SOURCE_EXT = (".cc", ".h", ".cu", ".cuh")
# Libraries outside the tree a row may name; not checked.
LIBRARIES = ("absl",)

# Includes the table forbids that the code still has, each with why it
# stays for now; the test fails when one is no longer needed (so that the
# list only shrinks). (file, included package).
KNOWN_VIOLATIONS = set()  # none now

# Packages whose production code includes each other (sorted tuples), each
# with why the cycle stays for now.
KNOWN_CYCLES = {
}


# ---------------------------------------------------------------- the table

def table_rows(text):
    """The rows of the package table: [(packages, allowed text, line)]."""
    m = re.search(r"^## The packages and what each may include\n(.*?)(?=^## )",
                  text, re.M | re.S)
    if not m:
        raise AssertionError("ARCHITECTURE.md: no section 'The packages and "
                             "what each may include'")
    rows = []
    for line in m.group(1).split("\n"):
        if not line.startswith("| `"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3:
            raise AssertionError("ARCHITECTURE.md: a package row needs 3 "
                                 "columns: %s" % line)
        pkgs = [p.strip("/") for p in re.findall(r"`([^`]+)`", cells[0])]
        rows.append((pkgs, cells[2], line))
    if not rows:
        raise AssertionError("ARCHITECTURE.md: the package table has no rows")
    return rows


def split_top(text, sep):
    """Splits at sep outside parentheses."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "("
        depth -= ch == ")"
        if ch == sep and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [s.strip() for s in out if s.strip()]


class Arrow:
    """One allowed dependency: to a package, or to one file of it."""

    def __init__(self, target, file=None, row="", checked=True):
        self.target, self.file, self.row = target, file, row
        self.checked = checked  # false for 'anything' and 'everything in'

    def allows(self, pkg, path):
        return pkg == self.target and (self.file is None or path == self.file)

    def __repr__(self):
        return "%s -> %s" % (self.row, self.file or self.target)


def parse_table(text):
    """{package: [Arrow]} and the list of packages."""
    rows = table_rows(text)
    packages = [p for pkgs, _, _ in rows for p in pkgs
                if p.startswith(TOP)]
    by_tail = {}
    for p in packages:
        by_tail.setdefault(p.split("/")[-1], []).append(p)

    def resolve(name, line):
        name = re.sub(r"'s$", "", name)
        if name in packages:
            return name
        hits = by_tail.get(name, [])
        if len(hits) != 1:
            raise AssertionError("ARCHITECTURE.md: %r in the row %s names %s "
                                 "package" % (name, line,
                                              "no" if not hits else "more than one"))
        return hits[0]

    arrows = {p: [] for p in packages}
    for pkgs, allowed, line in rows:
        pkgs = [p for p in pkgs if p.startswith(TOP)]
        for i, clause in enumerate(split_top(allowed, ";")):
            owners = pkgs
            m = re.match(r"^([\w/]+):\s*(.*)$", clause)
            if i > 0 and m:
                sub = m.group(1)
                owners = [p for p in pkgs if p.split("/")[-1] == sub]
                if not owners:  # a sub-folder of the row's one package
                    owners = [p + "/" + sub for p in pkgs
                              if os.path.isdir(os.path.join(ROOT, p, sub))]
                if not owners:
                    raise AssertionError("ARCHITECTURE.md: %r in the row %s is "
                                         "no package of the row" % (sub, line))
                clause = m.group(2)
            for item in split_top(clause, ","):
                files = re.findall(r"\(([^)]*)\)", item)
                files = [f for note in files
                         for f in re.findall(r"`([\w/.]+\.(?:h|cuh))`", note)]
                head = re.sub(r"\([^)]*\)", "", item).strip()
                words = head.split()
                if not words:
                    continue
                if words[0] in LIBRARIES:
                    continue
                for o in owners:  # one Arrow per owner: each is used or not
                    if head == "anything":
                        new = [Arrow(p, row=o, checked=False) for p in packages]
                    elif head.startswith("everything in "):
                        top = head.split()[-1]
                        new = [Arrow(p, row=o, checked=False) for p in packages
                               if p.startswith(top + "/")]
                    else:
                        target = resolve(words[0], line)
                        new = ([Arrow(target, f, o) for f in files] or
                               [Arrow(target, None, o)])
                    arrows.setdefault(o, []).extend(new)
    return packages, arrows


# ---------------------------------------------------------------- the code

def package_of(path, packages):
    """The longest package (or sub-package with its own arrows) holding a
    path, or None."""
    best = None
    for p in packages:
        if path == p or path.startswith(p + "/"):
            if best is None or len(p) > len(best):
                best = p
    return best


class _Build:
    """Reads a BUILD file as Python with stand-ins for Bazel's functions:
    which files only test targets use, and which of those are in testonly
    libraries (helpers other tests link)."""

    def __init__(self, folder):
        self.folder = folder
        self.test_files, self.prod_files, self.lib_files = set(), set(), set()

    def _glob(self, patterns, exclude=(), **_):
        out = []
        for pat in patterns:
            out += [os.path.relpath(f, self.folder)
                    for f in glob.glob(os.path.join(self.folder, pat))]
        return [f for f in out if f not in exclude]

    def _rule(self, kind):
        def rule(name=None, srcs=(), hdrs=(), testonly=False, **_):
            files = set(s for s in list(srcs) + list(hdrs)
                        if isinstance(s, str) and not s.startswith(("//", ":", "@")))
            if testonly or kind in ("cc_test", "sh_test"):
                self.test_files |= files
                if kind == "cc_library":
                    self.lib_files |= files
            else:
                self.prod_files |= files
        return rule

    def read(self):
        env = {
            "glob": self._glob,
            "select": lambda d: [x for v in d.values() for x in v],
            "load": lambda *a, **k: None,
            "True": True, "False": False,
        }
        for kind in ("cc_library", "cc_binary", "cc_test", "cuda_library",
                     "sh_test", "filegroup", "genrule", "alias", "package",
                     "exports_files", "config_setting", "sh_binary",
                     "py_binary", "py_test", "cc_import", "test_suite"):
            env[kind] = self._rule(kind)
        path = os.path.join(self.folder, "BUILD")
        with open(path) as f:
            code = compile(f.read(), path, "exec")
        for _ in range(50):  # a rule this list lacks: one more stand-in
            try:
                exec(code, dict(env))
                break
            except NameError as e:
                name = getattr(e, "name", None) or re.search(
                    r"'(\w+)'", str(e)).group(1)
                env[name] = self._rule(name)
            self.test_files, self.prod_files, self.lib_files = set(), set(), set()
        test = self.test_files - self.prod_files
        return test, test & self.lib_files


TEST_NAME = re.compile(r"_test\.(cc|h|cu|cuh)$")


def test_kind(path, test_only, helpers):
    """None for production code; "helper" for a testonly library outside a
    testing/ folder; "test" for the rest of test code."""
    if in_testing(path) or TEST_NAME.search(path):
        return "test"
    if path in helpers:
        return "helper"
    return "test" if path in test_only else None


def in_testing(path):
    return "/testing/" in "/" + path


def sources():
    """(path, test kind) of every source file under compiler/, runtime/,
    tools/ (see test_kind)."""
    test_only, helpers = set(), set()
    for top in TOP:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            if "BUILD" in files:
                rel = os.path.relpath(folder, ROOT)
                test, libs = _Build(folder).read()
                test_only |= {rel + "/" + f for f in test}
                helpers |= {rel + "/" + f for f in libs}
    out = []
    for top in TOP:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for f in sorted(files):
                if f.endswith(SOURCE_EXT):
                    rel = os.path.relpath(os.path.join(folder, f), ROOT)
                    out.append((rel, test_kind(rel, test_only, helpers)))
    return out


INCLUDE = re.compile(r'^\s*#\s*include\s+"((?:compiler|runtime|tools)/[^"]+)"')


def includes(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = INCLUDE.match(line)
            if m:
                yield n, m.group(1)


# ---------------------------------------------------------------- the test

def cycles(edges):
    """The strongly connected components of more than one node."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(tuple(sorted(scc)))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def check(arch_text):
    """A dict of lists of problems, by kind."""
    packages, arrows = parse_table(arch_text)
    owners = packages + [o for o in arrows if o not in packages]
    files = sources()
    # A package with no production code (the conformance tests) is held
    # to its row by its tests.
    has_prod = {package_of(p, owners) for p, kind in files if kind is None}
    problems = {k: [] for k in ("violations", "unused", "unowned", "stale",
                                "cycles")}
    used, seen_known, edges = set(), set(), {}
    for path, kind in files:
        pkg = package_of(path, owners)
        if pkg is None:
            problems["unowned"].append(path)
            continue
        # Tests may include anything; a test helper library beside
        # production code is held to its row, and so are the tests of a
        # package that has nothing else.
        checked = kind != "test" or pkg not in has_prod
        # A sub-folder with arrows of its own also has its row's.
        row = package_of(path, packages)
        allowed = arrows.get(pkg, []) + (arrows.get(row, []) if row != pkg else [])
        for n, inc in includes(path):
            to = package_of(inc, packages)
            if to is None or to == row or to == pkg:
                continue
            ok = [a for a in allowed if a.allows(to, inc)]
            used.update(id(a) for a in ok)
            if not checked:
                continue
            if kind is None:
                edges.setdefault(pkg, set()).add(package_of(inc, owners))
            if ok:
                continue
            if (path, to) in KNOWN_VIOLATIONS:
                seen_known.add((path, to))
                continue
            problems["violations"].append(
                "%s:%d: #include \"%s\": %s may not include %s "
                "(ARCHITECTURE.md, the package table)" % (path, n, inc, pkg, to))
    problems["unused"] = sorted(set(
        "%s: the table allows %s -> %s, and no file of %s includes %s"
        % (o, o, a.file or a.target, o, a.file or a.target)
        for o, lst in arrows.items() for a in lst
        if a.checked and id(a) not in used))
    found = cycles(edges)
    problems["cycles"] = [
        "packages that include each other: %s" % " -> ".join(c + (c[0],))
        for c in found if c not in KNOWN_CYCLES]
    stale = ["KNOWN_VIOLATIONS lists %s -> %s, which the file no longer "
             "includes: remove it" % k
             for k in sorted(set(KNOWN_VIOLATIONS) - seen_known)]
    stale += ["KNOWN_CYCLES lists %s, which is no longer a cycle: remove it"
              % " <-> ".join(c) for c in sorted(set(KNOWN_CYCLES) - set(found))]
    problems["stale"] = stale
    return problems


class PackageTableTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        with open(ARCH, encoding="utf-8") as f:
            cls.problems = check(f.read())

    def expect_none(self, kind):
        p = self.problems[kind]
        self.assertEqual(p, [], "\n" + "\n".join(p))

    def test_sources_were_found(self):
        self.assertTrue(os.path.isdir(os.path.join(ROOT, "compiler")),
                        "no source tree at %s" % ROOT)
        self.assertGreater(len(sources()), 100)

    def test_no_package_includes_what_its_row_forbids(self):
        self.expect_none("violations")

    def test_every_arrow_of_the_table_is_used(self):
        self.expect_none("unused")

    def test_no_two_packages_include_each_other(self):
        self.expect_none("cycles")

    def test_every_source_file_has_a_row(self):
        self.expect_none("unowned")

    def test_exception_lists_are_current(self):
        self.expect_none("stale")


if __name__ == "__main__":
    unittest.main()

"""The manual's links resolve, and the README's commands are what CI runs.

Every relative link and image in README.md, ARCHITECTURE.md and docs/*.md
must name a file that exists (relative to the page), and a `#fragment` must
name a heading of the page it points to (GitHub's anchors). The README's
second command and its second pass must be the ones .ci/run runs.

The pages and the files they link to are this test's data (//tests/docs:
BUILD), so the test reruns when any of them changes; a new link to a file
outside that data fails with a note saying to add it.
"""

import os
import re
import unittest

ROOT = os.path.join(os.environ.get("TEST_SRCDIR", "."),
                    os.environ.get("TEST_WORKSPACE", "trainc"))
PAGES = ["README.md", "ARCHITECTURE.md"]


def pages():
    docs = sorted(f for f in os.listdir(os.path.join(ROOT, "docs"))
                  if f.endswith(".md"))
    return PAGES + ["docs/" + f for f in docs]


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    fence = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield n, line


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(text):
    """(line, target) of every inline link or image outside code."""
    for n, line in prose_lines(text):
        line = re.sub(r"`[^`]*`", "", line)  # code spans are not links
        for m in LINK.finditer(line):
            yield n, m.group(1)


def slug(heading):
    """GitHub's anchor for a heading's text."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)  # drops punctuation, backticks, slashes
    return s.replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    for _, line in prose_lines(text):
        m = re.match(r"^#{1,6} (.*)$", line)
        if not m:
            continue
        s = slug(m.group(1))
        k = seen.get(s, 0)
        seen[s] = k + 1
        out.add(s if k == 0 else "%s-%d" % (s, k))
    return out


def read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def source_root():
    """The checkout the runfiles link into, to tell a missing file from
    one the test was not given."""
    return os.path.dirname(os.path.realpath(os.path.join(ROOT, "README.md")))


class DocLinksTest(unittest.TestCase):

    def test_every_relative_link_resolves(self):
        problems, checked = [], 0
        for page in pages():
            for n, target in links(read(page)):
                checked += 1
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:
                    continue
                path, _, frag = target.partition("#")
                rel = (os.path.normpath(os.path.join(os.path.dirname(page), path))
                       if path else page)
                where = "%s:%d: link to %s" % (page, n, target)
                if rel.startswith(".."):
                    problems.append("%s: leaves the repository" % where)
                    continue
                if not os.path.exists(os.path.join(ROOT, rel)):
                    if os.path.exists(os.path.join(source_root(), rel)):
                        problems.append(
                            "%s: %s exists but is not in the data of "
                            "//tests/docs:doc_links_test; add it there" % (where, rel))
                    else:
                        problems.append("%s: no file %s" % (where, rel))
                    continue
                if frag and rel.endswith(".md") and frag not in anchors(read(rel)):
                    problems.append("%s: %s has no heading with anchor #%s"
                                    % (where, rel, frag))
        self.assertEqual(problems, [], "\n" + "\n".join(problems))
        # The README alone links every page of docs/: a parser that finds
        # nothing must not pass.
        self.assertGreater(checked, len(pages()), "too few links found")

    def test_readme_commands_are_what_ci_runs(self):
        readme = read("README.md")
        ci = read(".ci/run")
        ci_cmds = [l.strip() for l in ci.split("\n")
                   if l.strip() and not l.lstrip().startswith("#")]
        # Command 2: "./tools/setup.sh && bazel test //...".
        m = re.search(r"^\./tools/setup\.sh && (bazel test [^\n]*)$", readme, re.M)
        self.assertIsNotNone(m, "README.md: no './tools/setup.sh && bazel test' line")
        self.assertIn("./tools/setup.sh", ci_cmds, ".ci/run does not set up")
        self.assertIn(m.group(1).strip(), ci_cmds,
                      ".ci/run does not run the README's command 2")
        # The second pass, a backslash-continued command in README and CI.
        def joined(text):
            return re.sub(r"\\\n\s*", "", text)
        m = re.search(r"^(bazel test --test_tag_filters=trains[^\n]*)$",
                      joined(readme), re.M)
        self.assertIsNotNone(m, "README.md: no second pass (bazel test "
                             "--test_tag_filters=trains ...)")
        self.assertIn(" ".join(m.group(1).split()),
                      [" ".join(l.split()) for l in joined(ci).split("\n")],
                      ".ci/run does not run the README's second pass")


if __name__ == "__main__":
    unittest.main()

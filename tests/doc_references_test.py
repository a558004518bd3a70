"""Every section a comment or doc cites exists, and nothing names an issue.

A citation is a doc's file name followed by a quoted section name, the way
comments cite docs here: `docs/ARCHITECTURE.md, "Offload"`,
`ARCHITECTURE.md ("Traffic per link")`, `bench/README.md, "Waiting at 4
ranks on 2 cores"`, spread over comment lines or not. The section must be a
heading of that doc, or a bold lead (`**Reduced as stored**`) in it.

The repository has no issue tracker, so "issue 18" (or a file named
`*issue18*`) cannot be followed: names say what a thing is or measures.

Run by hand with a file to check as well (`python3 tests/doc_references_test.py
--check FILE`) to see a made-up citation fail."""
import os
import re
import subprocess
import sys
import unittest

# The source tree itself (the runfile is a link into it), as
# include_layering_test does.
ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
# This file spells out what it forbids.
SELF = os.path.relpath(os.path.realpath(__file__), ROOT)
SKIP_DIRS = {".git", "third_party", "node_modules", "target", "__pycache__"}
TEXT = (".h", ".cc", ".c", ".cu", ".cuh", ".py", ".pyi", ".rs", ".sh", ".bzl",
        ".md", ".toml", ".txt", ".json", ".jsonl", ".cfg", ".in")
TEXT_NAMES = ("BUILD", "BUILD.bazel", "WORKSPACE", "run")

# Files other work still has to clean of issue numbers; each entry goes when
# its file does (the test says when an entry is no longer needed).
ISSUE_NUMBER_PENDING: set = set()

# Comment markers that continue a comment on the next line.
CONTINUATION = re.compile(r"[ \t]*\n[ \t]*(?:///?!?|#+|\*|--|\"\"\")?[ \t]*")
CITATION = re.compile(
    r"((?:[\w.-]+/)*(?:ARCHITECTURE|DEEPSPEED_COMPAT|README)\.md)`?,?[ \t]*\(?[ \t]*"
    r"\"([^\"\n]{1,160})\"")
ISSUE_NUMBER = re.compile(r"(?<![a-z])issues?[ _-]?#?[0-9]+", re.I)
HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)
BOLD_LEAD = re.compile(r"\*\*([^*\n]+?)[.:]?\*\*")


def tree_files():
    """The repository's files: git's view (tracked, and new files it does not
    ignore) where there is one, else a walk of the tree."""
    try:
        out = subprocess.run(
            ["git", "-C", ROOT, "ls-files", "-co", "--exclude-standard", "-z"],
            capture_output=True, check=True).stdout.decode()
        paths = sorted(p for p in out.split("\0") if p and p != SELF)
        if paths:
            yield from (p for p in paths if os.path.isfile(os.path.join(ROOT, p)))
            return
    except (OSError, subprocess.CalledProcessError):
        pass
    for d, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(x for x in dirs
                         if x not in SKIP_DIRS and not x.startswith("bazel-"))
        for f in sorted(files):
            path = os.path.relpath(os.path.join(d, f), ROOT)
            if path != SELF:
                yield path


def is_text(path):
    name = os.path.basename(path)
    return name.endswith(TEXT) or name in TEXT_NAMES


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8", errors="replace") as fh:
        return fh.read()


def norm(s):
    return " ".join(s.replace("`", "").split()).rstrip(".:").strip()


def sections(doc):
    text = read(doc)
    return ({norm(h) for h in HEADING.findall(text)} |
            {norm(b) for b in BOLD_LEAD.findall(text)})


def resolve(cited, citing):
    """The doc a citation names, relative to ROOT."""
    if "/" in cited:
        return cited
    if cited in ("ARCHITECTURE.md", "DEEPSPEED_COMPAT.md"):
        return "docs/" + cited
    return "README.md"


def citations(path, text):
    """(doc, section, line) for every citation in text."""
    joined = CONTINUATION.sub(" ", text)
    # Map offsets in the joined text back to lines: count the joins before.
    out = []
    for m in CITATION.finditer(joined):
        line = text.count("\n", 0, _offset(text, joined, m.start())) + 1
        out.append((resolve(m.group(1), path), norm(m.group(2)), line))
    return out


def _offset(text, joined, at):
    # The joined text is the original with some whitespace runs shortened;
    # find the original offset by matching the prefix's non-space characters.
    want = len(re.sub(r"\s", "", joined[:at]))
    seen = 0
    for i, ch in enumerate(text):
        if seen >= want:
            return i
        if not ch.isspace():
            seen += 1
    return len(text)


def bad_citations_in(path, text, cache=None):
    """Citations in text (the file at path) whose doc or section is missing."""
    cache = {} if cache is None else cache
    bad = []
    for doc, section, line in citations(path, text):
        if doc not in cache:
            cache[doc] = (sections(doc)
                          if os.path.isfile(os.path.join(ROOT, doc)) else None)
        if cache[doc] is None:
            bad.append(f"{path}:{line}: cites {doc}, which does not exist")
        elif section not in cache[doc]:
            bad.append(f'{path}:{line}: cites {doc}, "{section}": no such section')
    return bad


def bad_citations(paths):
    cache = {}
    return [b for p in paths for b in bad_citations_in(p, read(p), cache)]


def issue_numbers(paths):
    bad = []
    for path in paths:
        if ISSUE_NUMBER.search(os.path.basename(path)):
            bad.append(f"{path}: file name names an issue")
        if path in ISSUE_NUMBER_PENDING or not is_text(path):
            continue
        for n, line in enumerate(read(path).splitlines(), 1):
            for m in ISSUE_NUMBER.finditer(line):
                bad.append(f"{path}:{n}: '{m.group(0)}'")
    return bad


class DocReferencesTest(unittest.TestCase):
    def setUp(self):
        self.files = [p for p in tree_files()]
        self.text = [p for p in self.files if is_text(p)]

    def test_tree_found(self):
        self.assertIn("docs/ARCHITECTURE.md", self.files)
        self.assertGreater(len(self.text), 300)

    def test_cited_sections_exist(self):
        self.assertGreater(sum(len(citations(p, read(p))) for p in self.text), 100)
        bad = bad_citations(self.text)
        self.assertEqual(bad, [], "\n" + "\n".join(bad))

    def test_a_made_up_citation_fails(self):
        fake = 'x\n// see docs/ARCHITECTURE.md, "Where\n// each byte lives"\n'
        self.assertEqual(citations("x.cc", fake),
                         [("docs/ARCHITECTURE.md", "Where each byte lives", 2)])
        self.assertEqual(bad_citations_in("x.cc", fake),
                         ['x.cc:2: cites docs/ARCHITECTURE.md, "Where each byte lives": '
                          "no such section"])

    def test_no_issue_numbers(self):
        bad = issue_numbers(self.files)
        self.assertEqual(bad, [], "\n" + "\n".join(bad))
        self.assertTrue(ISSUE_NUMBER.search("see issue 18's profile"))
        self.assertTrue(ISSUE_NUMBER.search("figures/torch_gpt_issue18_ab.jsonl"))
        self.assertFalse(ISSUE_NUMBER.search("param #1, nvme#1"))

    def test_pending_files_still_pending(self):
        done = [p for p in sorted(ISSUE_NUMBER_PENDING)
                if p in self.files and not ISSUE_NUMBER.search(read(p))]
        if done:
            print("no issue number left in (drop from ISSUE_NUMBER_PENDING): " +
                  ", ".join(done))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        target = os.path.abspath(sys.argv[2])
        rel = os.path.relpath(target, ROOT)
        with open(target, encoding="utf-8") as fh:
            problems = bad_citations_in(rel, fh.read())
        problems += issue_numbers([rel]) if os.path.exists(target) else []
        print("\n".join(problems) or "ok")
        sys.exit(1 if problems else 0)
    unittest.main()

"""Comments cite the project's own documents: every `docs/<file>.md#anchor` a comment or
docstring of src/, rules/, the Snakefile or the tests names exists, and none cites a
document the repository does not carry. Links between the documents resolve the same way."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from ringtools import REPO

DOCS = REPO / "docs"
CITATION = re.compile(r"docs/([A-Za-z0-9_.-]+\.md)(?:#([A-Za-z0-9_-]+))?")
FOREIGN = re.compile(r"\bSPEC\b|\bissue \d+")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT = re.compile(r"""<a\s+(?:id|name)=["']([^"']+)["']""")
FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\]\((?!https?:|mailto:)([^)#\s]*\.md)?(?:#([^)\s]+))?\)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: its text without markup, lower case, punctuation
    dropped, spaces as hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*_~]", lambda m: "_" if m.group() == "_" else "", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    found: set[str] = set(EXPLICIT.findall(markdown))
    seen: dict[str, int] = {}
    fenced = False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def _docstrings(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            value = first.value if isinstance(first, ast.Expr) else None
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                out.append((first.lineno, value.value))
    return out


def _comments(text: str) -> list[tuple[int, str]]:
    try:
        tokens = tokenize.generate_tokens(io.StringIO(text).readline)
        return [(tok.start[0], tok.string) for tok in tokens if tok.type == tokenize.COMMENT]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return [(n, line) for n, line in enumerate(text.splitlines(), 1)
                if line.lstrip().startswith("#")]  # fmt: skip


def commented_text(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every comment, and of every docstring of a Python file."""
    text = path.read_text()
    found = _comments(text)
    if path.suffix == ".py":
        found += _docstrings(ast.parse(text))
    return found


def sources() -> list[Path]:
    return [*sorted((REPO / "src").rglob("*.py")), *sorted((REPO / "rules").glob("*.smk")),
            REPO / "Snakefile"]  # fmt: skip


def sources_of_tests() -> list[Path]:
    """The tests' Python files: their comments and docstrings cite like the code's."""
    return sorted((REPO / "tests").rglob("*.py"))


def citation_problems(path: Path, known: dict[str, set[str]]) -> list[str]:
    problems = []
    where = path.relative_to(REPO)
    for line, text in commented_text(path):
        if FOREIGN.search(text):
            cited = text.strip()[:80]
            problems.append(f"{where}:{line}: cites a document the repository lacks: {cited}")
        for name, anchor in CITATION.findall(text):
            if name not in known:
                problems.append(f"{where}:{line}: cites docs/{name}, which does not exist")
            elif anchor and anchor not in known[name]:
                problems.append(f"{where}:{line}: cites docs/{name}#{anchor}, no such heading")
    return problems


def known_documents() -> dict[str, set[str]]:
    return {p.name: anchors(p.read_text()) for p in DOCS.glob("*.md")}


def test_slugs_follow_github():
    assert slug("The evaluator's sandbox") == "the-evaluators-sandbox"
    assert slug("Search, selection and `final/`") == "search-selection-and-final"
    assert slug("GPUs and SLURM") == "gpus-and-slurm"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_no_comment_cites_a_missing_document_or_anchor():
    known = known_documents()
    assert {"architecture.md", "contracts.md", "ring-folder.md", "configuration.md",
            "operations.md"} <= set(known)  # fmt: skip
    problems = [p for path in sources() for p in citation_problems(path, known)]
    assert not problems, "\n".join(problems)


def test_no_test_cites_a_missing_document_or_anchor():
    known = known_documents()
    files = sources_of_tests()
    assert Path(__file__).resolve() in {f.resolve() for f in files}
    problems = [p for path in files for p in citation_problems(path, known)]
    assert not problems, "\n".join(problems)


def test_a_missing_anchor_or_a_spec_citation_is_caught(tmp_path, monkeypatch):
    monkeypatch.setattr("test_doc_citations.REPO", tmp_path)
    bad = tmp_path / "bad.py"
    bad.write_text('"""See docs/contracts.md#nowhere."""\n# as SPEC 3 says\n'
                   "x = 1  # docs/missing.md\n")  # fmt: skip
    problems = citation_problems(bad, {"contracts.md": {"scorer"}})
    assert len(problems) == 3, problems
    assert any("#nowhere" in p for p in problems)
    assert any("as SPEC 3 says" in p for p in problems)
    assert any("docs/missing.md" in p for p in problems)


def test_the_configuration_cites_existing_documents():
    """Schema descriptions become docs/configuration.md; they cite like comments do."""
    known = known_documents()
    problems = []
    for path in (REPO / "config").glob("*.yaml"):
        text = path.read_text()
        if FOREIGN.search(text):
            problems.append(f"{path.name}: cites a document the repository lacks")
        for name, anchor in CITATION.findall(text):
            if name not in known or (anchor and anchor not in known[name]):
                problems.append(f"{path.name}: cites docs/{name}#{anchor}, which does not exist")
    assert not problems, "\n".join(problems)


def test_links_between_documents_resolve():
    known = known_documents()
    problems = []
    for doc in [*sorted(DOCS.glob("*.md")), REPO / "README.md"]:
        base = doc.parent
        for target, anchor in LINK.findall(doc.read_text()):
            path = (base / target).resolve() if target else doc
            name = path.name
            if target and not path.exists():
                problems.append(f"{doc.name}: links to {target}, which does not exist")
            elif anchor and path.parent == DOCS.resolve() and anchor not in known.get(name, set()):
                problems.append(f"{doc.name}: links to {target}#{anchor}, no such heading")
            elif anchor and path == doc and anchor not in anchors(doc.read_text()):
                problems.append(f"{doc.name}: links to #{anchor}, no such heading")
    assert not problems, "\n".join(problems)

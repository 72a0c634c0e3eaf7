"""The scorers the README and docs/contracts.md show judge any output a program can write:
what they cannot read is an invalid output, never a scorer that fails (a failing scorer
is the task's failure and stops the ring)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from ringtools import REPO

EXAMPLES = {
    "README.md": re.compile(r"cat > my-task/scorer.py <<'EOF'\n(.*?)\nEOF\n", re.S),
    "docs/contracts.md": re.compile(r"A minimal scorer[^\n]*\n\n```python\n(.*?)```\n", re.S),
}
TRUTH = "id,label\n" + "".join(f"{i},{i % 2}\n" for i in range(20))
WRITTEN = {
    "the right answers": TRUTH.encode(),
    "a field past the csv module's limit": b'id,label\n"' + b"x" * 200_000 + b'",1\n',
    "bytes that are not UTF-8": b"id,label\n\xff\xfe,1\n",
    "a missing column": b"id\n1\n",
    "nothing": b"",
}


@pytest.mark.parametrize("doc", sorted(EXAMPLES))
@pytest.mark.parametrize("what", sorted(WRITTEN))
def test_the_example_scorer_judges_any_output_without_failing(tmp_path, doc, what):
    scorer = tmp_path / "scorer.py"
    scorer.write_text(EXAMPLES[doc].search((REPO / doc).read_text()).group(1))
    (tmp_path / "labels").mkdir()
    (tmp_path / "labels" / "test.csv").write_text(TRUTH)
    (tmp_path / "pred").mkdir()
    (tmp_path / "pred" / "predictions.csv").write_bytes(WRITTEN[what])
    out = tmp_path / "score.json"
    argv = [sys.executable, str(scorer), "--pred", str(tmp_path / "pred"), "--labels",
            str(tmp_path / "labels"), "--seed", "0", "--out", str(out)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    if what == "the right answers":
        assert record["valid"] is True and record["score"] == 1.0
    else:
        assert record["valid"] is False and record["score"] is None
        assert record["reason"].startswith("unusable predictions: ")

"""A plan the Candidate model refuses says which field and why, in one line (the coverage report's
reason), not only that validation failed."""

from __future__ import annotations

import pytest

from solforge.candidate import Candidate
from solforge.compiler.api import _one_line


def test_validation_error_names_its_field():
    with pytest.raises(ValueError) as e:
        Candidate(problem="p", language="cuda", sources={"kernel.cu": "x"},
                  launches=[{"kernel": "k", "grid": ["1"], "block": ["32"], "args": []}],
                  workspace="+".join(["n"] * 9000))
    line = _one_line(e.value)
    assert "\n" not in line and "workspace" in line and "16000" in line, line


def test_plain_error_is_its_first_line():
    assert _one_line(ValueError("first\nsecond")) == "first"

"""Small problems on disk written by the security tests: a normal elementwise one, and the same
definition with a hostile reference."""

from __future__ import annotations

import json
from pathlib import Path

ADV = Path(__file__).resolve().parents[1] / "adversarial" / "problem"

NORMAL_REFERENCE = "import torch\n\n\n@torch.no_grad()\ndef run(x, y):\n    return torch.sin(x) + y\n"


def write_problem(root: Path, name: str, reference: str = NORMAL_REFERENCE, subset: str = "S",
                  sizes=(4096, 8192)) -> Path:
    d = Path(root) / subset / name
    d.mkdir(parents=True)
    defn = json.loads((ADV / "definition.json").read_text())
    defn["name"], defn["reference"] = name, reference
    (d / "definition.json").write_text(json.dumps(defn))
    line = json.loads((ADV / "workload.jsonl").read_text().splitlines()[0])
    (d / "workload.jsonl").write_text("".join(json.dumps(dict(line, uuid=f"{name}-{n}", axes={"n": n}))
                                              + "\n" for n in sizes))
    return d

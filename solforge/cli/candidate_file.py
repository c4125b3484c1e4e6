"""Reading a candidate file for `compile` and `evaluate`: a candidate (solforge/candidate.py format)
or a saved result that carries one under "candidate" (kernels_cuda/<family>/best/<problem>.json,
`solforge best` output). Bad input is one InputError naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path


def load_candidate(path: Path | str):
    from pydantic import ValidationError

    from ..candidate import Candidate
    from ..errors import InputError

    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError("file not found", file=path) from None
    except IsADirectoryError:
        raise InputError("is a folder, not a candidate JSON file", file=path) from None
    except json.JSONDecodeError as e:
        raise InputError(f"not JSON: {e.msg}", file=path, line=e.lineno) from None
    prefix = ""
    if isinstance(data, dict) and "sources" not in data and isinstance(data.get("candidate"), dict):
        data, prefix = data["candidate"], "candidate."  # a saved best/ result: its candidate
    try:
        return Candidate.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(err["msg"], file=path,
                         field=prefix + ".".join(str(x) for x in err["loc"])) from None

"""Regenerates the broken-input corpus: one folder per case, each with an expect.json naming the one
InputError ingest must report (file relative to the case folder, line, field, a message fragment).

Run from the repo root: .venv/bin/python tests/corpus/broken/_make_corpus.py
The folders are committed; this script only documents how they were made and lets them be rebuilt.
"""

from __future__ import annotations

import copy
import json
import shutil
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
REF = "import torch\n\n\ndef run(x, y):\n    return x + y\n"


def base_def(name: str) -> dict:
    return {
        "name": name, "description": "tiny add, for the broken-input corpus",
        "axes": {"n": {"type": "var"}, "d": {"type": "const", "value": 4}},
        "inputs": {"x": {"shape": ["n", "d"], "dtype": "float32"},
                   "y": {"shape": ["n", "d"], "dtype": "float32"}},
        "outputs": {"z": {"shape": ["n", "d"], "dtype": "float32"}},
        "reference": REF,
    }


def wl(uuid: str, n: int = 8, **over) -> dict:
    w = {"uuid": uuid, "axes": {"n": n},
         "inputs": {"x": {"type": "random"}, "y": {"type": "random"}}}
    w.update(over)
    return w


def safetensors_bytes(tensors: dict[str, tuple[str, list[int]]]) -> bytes:
    header, off, body = {}, 0, b""
    for key, (dtype, shape) in tensors.items():
        n = 4
        for s in shape:
            n *= s
        header[key] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + n]}
        body += b"\0" * n
        off += n
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + body


CASES: dict[str, dict] = {}


def case(name, *, defn=None, workloads=None, files=None, expect, raw_def=None, raw_wl=None,
         skip_def=False, good=0, inp="."):
    CASES[name] = dict(defn=defn, workloads=workloads, files=files or {}, expect=expect,
                       raw_def=raw_def, raw_wl=raw_wl, skip_def=skip_def, good=good, inp=inp)


def d(name, mutate=None):
    x = base_def(name)
    if mutate:
        mutate(x)
    return x


W2 = [wl("u1", 1), wl("u2", 8)]
E = lambda file, line, field, msg: {"file": file, "line": line, "field": field, "message": msg}

# ---- definition.json -------------------------------------------------------------------------
case("bad_json_definition", raw_def='{"name": "bad_json_definition",\n "axes": {\n', workloads=W2,
     expect=E("definition.json", 3, None, "invalid JSON"))
case("definition_not_object", raw_def='["a", "list"]\n', workloads=W2,
     expect=E("definition.json", None, None, "expected a JSON object"))
case("missing_name", defn=d("missing_name", lambda x: x.pop("name")), workloads=W2,
     expect=E("definition.json", None, "name", "Field required"))
case("missing_outputs", defn=d("missing_outputs", lambda x: x.pop("outputs")), workloads=W2,
     expect=E("definition.json", None, "outputs", "Field required"))
case("unknown_dtype", defn=d("unknown_dtype", lambda x: x["inputs"]["x"].update(dtype="float33")),
     workloads=W2, expect=E("definition.json", None, "inputs.x.dtype", "unknown dtype"))
case("unknown_axis_type", defn=d("unknown_axis_type", lambda x: x["axes"].update(n={"type": "dyn"})),
     workloads=W2, expect=E("definition.json", None, "axes.n", "tag"))
case("bad_axis_expression", defn=d("bad_axis_expression", lambda x: x["axes"].update(
    m={"type": "expr", "expression": "n +* 2"})), workloads=W2,
     expect=E("definition.json", None, "axes.m.expression", "cannot parse"))
case("expr_import", defn=d("expr_import", lambda x: x["axes"].update(
    m={"type": "expr", "expression": "__import__('os').getpid()"})), workloads=W2,
     expect=E("definition.json", None, "axes.m.expression", "may be called"))
case("expr_attribute", defn=d("expr_attribute", lambda x: x["axes"].update(
    m={"type": "expr", "expression": "n.bit_length()"})), workloads=W2,
     expect=E("definition.json", None, "axes.m.expression", "may be called"))
case("expr_dunder_attribute", defn=d("expr_dunder_attribute", lambda x: x["axes"].update(
    m={"type": "expr", "expression": "n.__class__"})), workloads=W2,
     expect=E("definition.json", None, "axes.m.expression", "Attribute is not allowed"))
case("constraint_attribute", defn=d("constraint_attribute", lambda x: x.update(
    constraints=["n > 0", "x.__class__ == 1"])), workloads=W2,
     expect=E("definition.json", None, "constraints.1", "Attribute is not allowed"))
case("constraint_lambda", defn=d("constraint_lambda", lambda x: x.update(
    constraints=["(lambda: 1)() == 1"])), workloads=W2,
     expect=E("definition.json", None, "constraints.0", "may be called"))
case("expr_unknown_axis", defn=d("expr_unknown_axis", lambda x: x["axes"].update(
    m={"type": "expr", "expression": "n * k"})), workloads=W2,
     expect=E("definition.json", None, "axes.m", "unknown axes"))
case("cyclic_exprs", defn=d("cyclic_exprs", lambda x: x["axes"].update(
    a={"type": "expr", "expression": "b + 1"}, b={"type": "expr", "expression": "a + 1"})),
     workloads=W2, expect=E("definition.json", None, "axes", "cyclic"))
case("shape_unknown_axis", defn=d("shape_unknown_axis", lambda x: x["inputs"]["x"].update(
    shape=["n", "k"])), workloads=W2, expect=E("definition.json", None, "inputs.x.shape", "unknown axis"))
case("negative_const_axis", defn=d("negative_const_axis", lambda x: x["axes"].update(
    d={"type": "const", "value": -4})), workloads=W2,
     expect=E("definition.json", None, "axes.d.value", "greater than or equal to 0"))
case("reference_without_run", defn=d("reference_without_run", lambda x: x.update(
    reference="def forward(x, y):\n    return x + y\n")), workloads=W2,
     expect=E("definition.json", None, "reference", "`run`"))
case("reference_syntax_error", defn=d("reference_syntax_error", lambda x: x.update(
    reference="def run(x, y:\n    return x + y\n")), workloads=W2,
     expect=E("definition.json", None, "reference", "syntax error"))
case("reference_py_syntax_error", defn=d("reference_py_syntax_error", lambda x: x.pop("reference")),
     workloads=W2, files={"reference.py": "def run(x, y)\n    return x + y\n"},
     expect=E("reference.py", None, "reference", "syntax error"))
case("entrypoint_not_defined", defn=d("entrypoint_not_defined", lambda x: x.update(
    custom_inputs_entrypoint="make_inputs")), workloads=W2,
     expect=E("definition.json", None, "custom_inputs_entrypoint", "not a function"))
case("output_named_like_input", defn=d("output_named_like_input", lambda x: x["outputs"].update(
    x={"shape": ["n"], "dtype": "float32"})), workloads=W2,
     expect=E("definition.json", None, "outputs", "also used as inputs"))
case("non_utf8_definition", raw_def=b'{"name": "caf\xe9"}\n', workloads=W2,
     expect=E("definition.json", 1, None, "not UTF-8"))
case("non_utf8_workload_line", defn=d("non_utf8_workload_line"),
     raw_wl=(json.dumps(wl("u1")) + "\n" + json.dumps(wl("u2", 2)) + "\n").encode()[:-30] + b"\xff\xfe\"}}}\n",
     expect=E("workload.jsonl", 2, None, "not UTF-8"))
case("missing_definition_file", skip_def=True, workloads=W2,
     expect=E("definition.json", None, None, "file not found"))

# ---- workload.jsonl ---------------------------------------------------------------------------
case("bad_json_workload_line", defn=d("bad_json_workload_line"),
     raw_wl=json.dumps(wl("u1")) + "\n{oops\n", expect=E("workload.jsonl", 2, None, "invalid JSON"))
case("workload_line_not_object", defn=d("workload_line_not_object"),
     raw_wl=json.dumps(wl("u1")) + "\n[1, 2]\n", expect=E("workload.jsonl", 2, None, "JSON object"))
case("empty_workload_file", defn=d("empty_workload_file"), raw_wl="\n",
     expect=E("workload.jsonl", None, None, "no workloads"))
case("workload_unknown_axis", defn=d("workload_unknown_axis"),
     workloads=[wl("u1"), wl("u2", axes={"n": 2, "bogus": 3})],
     expect=E("workload.jsonl", 2, "axes.bogus", "unknown axis"))
case("var_axis_missing", defn=d("var_axis_missing"), workloads=[wl("u1", axes={})],
     expect=E("workload.jsonl", 1, "axes.n", "missing"))
case("negative_axis_value", defn=d("negative_axis_value"), workloads=[wl("u1", axes={"n": -3})],
     expect=E("workload.jsonl", 1, "axes.n", "negative"))
case("const_axis_mismatch", defn=d("const_axis_mismatch"), workloads=[wl("u1", axes={"n": 2, "d": 5})],
     expect=E("workload.jsonl", 1, "axes.d", "const axis"))
case("duplicate_uuid", defn=d("duplicate_uuid"), workloads=[wl("u1", 1), wl("u2", 2), wl("u1", 3)],
     expect=E("workload.jsonl", 3, "uuid", "duplicate uuid"))
case("negative_tolerance", defn=d("negative_tolerance"),
     workloads=[wl("u1", tolerance={"max_atol": -1.0})],
     expect=E("workload.jsonl", 1, "tolerance.max_atol", ">= 0"))
case("nan_tolerance", defn=d("nan_tolerance"), raw_wl=json.dumps(
    wl("u1", tolerance={"max_rtol": float("nan")})) + "\n",
     expect=E("workload.jsonl", 1, "tolerance.max_rtol", "finite"))
case("inf_tolerance", defn=d("inf_tolerance"), raw_wl=json.dumps(
    wl("u1", tolerance={"max_error_cap": float("inf")})) + "\n",
     expect=E("workload.jsonl", 1, "tolerance.max_error_cap", "finite"))
case("ratio_above_one", defn=d("ratio_above_one"),
     workloads=[wl("u1", tolerance={"required_matched_ratio": 1.5})],
     expect=E("workload.jsonl", 1, "tolerance.required_matched_ratio", "[0, 1]"))
case("custom_input_without_entrypoint", defn=d("custom_input_without_entrypoint"),
     workloads=[wl("u1", inputs={"x": {"type": "custom"}, "y": {"type": "custom"}})],
     expect=E("workload.jsonl", 1, "inputs.x", "custom_inputs_entrypoint"))
case("scalar_input_as_random", defn=d("scalar_input_as_random", lambda x: x["inputs"].update(
    eps={"shape": None, "dtype": "float32"}) or x.update(reference="def run(x, y, eps):\n    return x\n")),
     workloads=[wl("u1", inputs={"x": {"type": "random"}, "y": {"type": "random"},
                                 "eps": {"type": "random"}})],
     expect=E("workload.jsonl", 1, "inputs.eps", "needs type 'scalar'"))
case("tensor_input_as_scalar", defn=d("tensor_input_as_scalar"),
     workloads=[wl("u1", inputs={"x": {"type": "scalar", "value": 1.0}, "y": {"type": "random"}})],
     expect=E("workload.jsonl", 1, "inputs.x", "cannot be a scalar"))
case("unknown_input_type", defn=d("unknown_input_type"),
     workloads=[wl("u1", inputs={"x": {"type": "zeros"}, "y": {"type": "random"}})],
     expect=E("workload.jsonl", 1, "inputs.x", "tag"))
case("workload_unknown_input", defn=d("workload_unknown_input"),
     workloads=[wl("u1", inputs={"x": {"type": "random"}, "y": {"type": "random"},
                                 "w": {"type": "random"}})],
     expect=E("workload.jsonl", 1, "inputs.w", "unknown input"))
case("workload_missing_input", defn=d("workload_missing_input"),
     workloads=[wl("u1", inputs={"x": {"type": "random"}})],
     expect=E("workload.jsonl", 1, "inputs.y", "missing"))
case("constraint_violated", defn=d("constraint_violated", lambda x: x.update(constraints=["n % 2 == 0"])),
     workloads=[wl("u1", 2), wl("u2", 3)], expect=E("workload.jsonl", 2, "axes", "does not hold"))
case("tensor_constraint_violated", defn=d("tensor_constraint_violated", lambda x: x.update(
    constraints=["x.shape[1] == 8"])), workloads=[wl("u1", 2)],
     expect=E("workload.jsonl", 1, "axes", "does not hold"))
case("safetensors_wrong_rank", defn=d("safetensors_wrong_rank"),
     workloads=[wl("u1", 2, inputs={"x": {"type": "safetensors", "path": "x.safetensors",
                                          "tensor_key": "x"}, "y": {"type": "random"}})],
     files={"x.safetensors": safetensors_bytes({"x": ("F32", [8])})},
     expect=E("workload.jsonl", 1, "inputs.x", "rank 1"))
case("safetensors_missing_key", defn=d("safetensors_missing_key"),
     workloads=[wl("u1", 2, inputs={"x": {"type": "safetensors", "path": "x.safetensors",
                                          "tensor_key": "x"}, "y": {"type": "random"}})],
     files={"x.safetensors": safetensors_bytes({"other": ("F32", [2, 4])})},
     expect=E("workload.jsonl", 1, "inputs.x.tensor_key", "no tensor"))
case("safetensors_wrong_dtype", defn=d("safetensors_wrong_dtype"),
     workloads=[wl("u1", 2, inputs={"x": {"type": "safetensors", "path": "x.safetensors",
                                          "tensor_key": "x"}, "y": {"type": "random"}})],
     files={"x.safetensors": safetensors_bytes({"x": ("F16", [2, 4])})},
     expect=E("workload.jsonl", 1, "inputs.x", "float16"))
case("expr_division_by_zero", defn=d("expr_division_by_zero", lambda x: x["axes"].update(
    m={"type": "expr", "expression": "d // (n - n)"})), workloads=[wl("u1", 2)],
     expect=E("workload.jsonl", 1, "axes", "division by zero"))
case("lone_definition_bad", files={"op.json": json.dumps(d("lone_definition_bad", lambda x: x[
    "inputs"]["y"].update(dtype="complex64")), indent=1)}, skip_def=True, inp="op.json",
     expect=E("op.json", None, "inputs.y.dtype", "unknown dtype"))


# ---- FlashInfer-Trace trees -------------------------------------------------------------------
def trace_line(defname, w, solution=None, evaluation=None):
    return json.dumps({"definition": defname, "solution": solution, "workload": w,
                       "evaluation": evaluation})


def fi_case(name, defs: dict[str, dict], lines: dict[str, str], expect, good=0):
    files = {f"definitions/op/{k}.json": json.dumps(v, indent=1) for k, v in defs.items()}
    files.update({f"workloads/op/{k}.jsonl": v for k, v in lines.items()})
    case(name, files=files, skip_def=True, expect=expect, good=good)


fi_case("trace_unknown_definition", {"trace_unknown_definition_ok": d("trace_unknown_definition_ok")},
        {"trace_unknown_definition_ok": trace_line("trace_unknown_definition_ok", wl("u1")) + "\n"
         + trace_line("no_such_definition", wl("u2")) + "\n"},
        # the line's file is named after a good definition, so that definition carries the error
        E("workloads/op/trace_unknown_definition_ok.jsonl", 2, "definition", "unknown definition"))
fi_case("trace_orphan_line", {"trace_orphan_line": d("trace_orphan_line")},
        {"stray": trace_line("not_defined_anywhere", wl("u1")) + "\n"},
        E("workloads/op/stray.jsonl", 1, "definition", "unknown definition"), good=1)
fi_case("trace_bad_json", {"trace_bad_json": d("trace_bad_json")},
        {"trace_bad_json": trace_line("trace_bad_json", wl("u1")) + "\n{\"definition\": \n"},
        E("workloads/op/trace_bad_json.jsonl", 2, None, "invalid JSON"))
fi_case("trace_workload_bad_axis", {"trace_workload_bad_axis": d("trace_workload_bad_axis")},
        {"trace_workload_bad_axis": trace_line("trace_workload_bad_axis", wl("u1", axes={"q": 1})) + "\n"},
        E("workloads/op/trace_workload_bad_axis.jsonl", 1, "workload.axes.q", "unknown axis"))
fi_case("trace_evaluation_incomplete", {"trace_evaluation_incomplete": d("trace_evaluation_incomplete")},
        {"trace_evaluation_incomplete": trace_line(
            "trace_evaluation_incomplete", wl("u1"), solution="s1",
            evaluation={"status": "PASSED", "environment": {"hardware": "H200"},
                        "timestamp": "2026-01-01T00:00:00Z",
                        "correctness": {"max_relative_error": 0.0, "max_absolute_error": 0.0}}) + "\n"},
        E("workloads/op/trace_evaluation_incomplete.jsonl", 1, "evaluation.performance", "present"))
fi_case("trace_duplicate_uuid", {"trace_duplicate_uuid": d("trace_duplicate_uuid")},
        {"trace_duplicate_uuid": trace_line("trace_duplicate_uuid", wl("u1", 1)) + "\n"
         + trace_line("trace_duplicate_uuid", wl("u1", 2)) + "\n"},
        E("workloads/op/trace_duplicate_uuid.jsonl", 2, "workload.uuid", "duplicate uuid"))
fi_case("trace_definition_tensor_constraint", {"trace_definition_tensor_constraint": d(
    "trace_definition_tensor_constraint", lambda x: x.update(constraints=["y.shape[5] == n"]))},
        {"trace_definition_tensor_constraint": trace_line(
            "trace_definition_tensor_constraint", wl("u1")) + "\n"},
        E("definitions/op/trace_definition_tensor_constraint.json", None, "constraints.0", "rank 2"))


def write_case(name: str, c: dict) -> None:
    root = HERE / name
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    if not c["skip_def"]:
        raw = c["raw_def"] if c["raw_def"] is not None else json.dumps(c["defn"], indent=2) + "\n"
        (root / "definition.json").write_bytes(raw if isinstance(raw, bytes) else raw.encode())
    if c["raw_wl"] is not None:
        raw = c["raw_wl"]
        (root / "workload.jsonl").write_bytes(raw if isinstance(raw, bytes) else raw.encode())
    elif c["workloads"] is not None:
        (root / "workload.jsonl").write_text("".join(json.dumps(w) + "\n" for w in c["workloads"]))
    for rel, content in c["files"].items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
    expect = dict(c["expect"], good_problems=c["good"], input=c["inp"])
    (root / "expect.json").write_text(json.dumps(expect, indent=2) + "\n")


if __name__ == "__main__":
    for name, c in CASES.items():
        write_case(name, copy.deepcopy(c))
    print(f"{len(CASES)} cases written under {HERE}")

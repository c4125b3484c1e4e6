"""The whole optimize loop against a hostile model: LiteLLM over real HTTP to a scripted server on
127.0.0.1, real compiles, a real DuckDB store. Nothing the candidates reach for ends up in the store,
the compile cache, the logs or the prompts sent back to the model."""

from __future__ import annotations

import json
import logging

import pytest

from tests.agents.llm_server import ScriptedLLM

from .conftest import MARK, leaks_in_duckdb, leaks_in_files
from .problems import write_problem

KEY = "sk-loopback-0123456789abcdef"  # the provider key the loop itself uses

GOOD = r'''
extern "C" __global__ void add_sin(const float* x, const float* y, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = sinf(x[i]) + y[i];
}
'''
CUTE_LEAK = '''
import os
seen = [repr(dict(os.environ))]
for p in ["/proc/self/environ", "/proc/1/environ"]:
    try: seen.append(open(p, "rb").read().decode("latin1"))
    except OSError as e: seen.append(str(e))
raise RuntimeError(" ".join(seen))
'''


def cand(source: str, language: str = "cuda") -> dict:
    name = "kernel.cu" if language == "cuda" else "kernel.py"
    return {"problem": "hostile_target", "language": language, "sources": {name: source},
            "params": {"BLOCK": 256},
            "launches": [{"kernel": "add_sin", "grid": ["ceil_div(n, BLOCK)"], "block": ["BLOCK"],
                          "smem": "0", "args": ["x", "y", "out", "int32:n"]}]}


def reply(c: dict) -> str:
    return f"Here it is.\n\n```json\n{json.dumps(c)}\n```\n"


@pytest.mark.slow
def test_hostile_model_leaks_nothing_anywhere(tmp_path, monkeypatch, caplog):
    from solforge.agents.lab import Lab
    from solforge.agents.llm import LlmWorker
    from solforge.agents.llm_client import LlmConfig
    from solforge.orchestrate.loop import LoopConfig, OptimizeLoop
    from solforge.agents.planner import Budget, PlannerConfig
    from solforge.problem.loader import load_problem_dir
    from solforge.store import Store

    caplog.set_level(logging.DEBUG)
    cache = tmp_path / "cache"
    monkeypatch.setenv("SOLFORGE_CACHE_DIR", str(cache))
    problem = load_problem_dir(write_problem(tmp_path / "problems", "hostile_target",
                                             sizes=(4096,)), subset="S")
    db = tmp_path / "loop.duckdb"
    store = Store(db)
    lab = Lab(arch="sm_90a", gpu_profile="h200", has_gpu=False, store=store)
    script = [{"content": reply(cand('#include "/proc/self/environ"\n' + GOOD))},
              {"content": reply(cand("#define F </proc/self/environ>\n#include F\n" + GOOD))},
              {"content": reply(cand(CUTE_LEAK, "cute"))},  # asked for CUDA, answers with Python
              {"content": reply(cand(GOOD))}]
    with ScriptedLLM(script) as server:
        cfg = LoopConfig(budget=Budget(attempts=4), planner=PlannerConfig(attempts_per_round=4),
                         model="openai/scripted")
        loop = OptimizeLoop(store, [problem], lab, {}, cfg, progress=lambda m: None)
        worker = LlmWorker(LlmConfig(model="openai/scripted", api_base=server.api_base, api_key=KEY,
                                     backoff_s=0.01, backoff_max_s=0.05, timeout_s=30),
                           lab, on_call=loop.on_llm_call, sleep=lambda s: None)
        loop.workers["llm"] = worker
        loop.cfg.planner.llm_available = True
        report = loop.run()
    outcomes = [r["outcome"] for r in store.query(
        "SELECT outcome FROM attempts WHERE run_id = ? ORDER BY created_at", [report.run_id])]
    store.close()
    # two refused includes, a "cute" answer to a CUDA request refused before anything runs, then a
    # real kernel
    assert outcomes == ["compile_error", "compile_error", "invalid", "compiled"], outcomes
    assert len(server.requests) == 4
    prompts = json.dumps(server.requests)
    assert MARK not in prompts                     # nothing sent back to the provider
    assert "/proc/self/environ" in prompts         # ... though the refusal itself was explained
    assert "asked for a 'cuda' candidate" in prompts  # the language refusal, one line back to the model
    assert not leaks_in_duckdb(db)                 # every text column, by SQL
    assert not leaks_in_files(cache, tmp_path / "problems")
    assert MARK not in caplog.text

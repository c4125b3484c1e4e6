"""The GPU evaluator: correctness and timing of candidates against the PyTorch reference.

Bare-box code: stdlib, pydantic (problem model), numpy, torch and cuda-python only. The parent side
(runner.py) never imports torch; each candidate runs in its own spawned driver process (driver.py).
Importing this package imports nothing heavy.
"""

from .results import EvalResult, EvalStatus, Guard, HardwareInfo, RunReport

__all__ = ["EvalResult", "EvalStatus", "Guard", "HardwareInfo", "RunReport"]

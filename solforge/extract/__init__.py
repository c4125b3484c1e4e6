"""Problem extraction from a model zoo: configs in data/models/ -> SOL-ExecBench problems.

    from solforge.extract import extract_model, extract_all, load_model_config
    problems = extract_model(load_model_config("llama-3.1-8b"))    # list[ExtractedProblem]
    report = extract_all(zoo_dir, out_dir)                           # ExtractReport
"""

from .check import CheckResult, CheckStatus, check_spec
from .extract import ExtractedProblem, ExtractReport, check_model, extract_all, extract_model
from .zoo import ModelConfig, default_zoo_dir, load_model_config, load_zoo

__all__ = ["CheckResult", "CheckStatus", "ExtractReport", "ExtractedProblem", "ModelConfig", "check_model",
           "check_spec", "default_zoo_dir", "extract_all", "extract_model", "load_model_config", "load_zoo"]

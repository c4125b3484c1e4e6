"""The DuckDB store: schema (SCHEMA.md), migrations, and the Store API every stage writes through."""

from .lease import StoreBusy
from .migrate import MigrationError
from .status import (ATTEMPT_TRANSITIONS, AttemptStatus, BaselineVariant, CompileStatus, EvalStatus,
                     LlmCallStatus, RunStatus)
from .store import InvalidTransition, Store, StoreError, new_id, utcnow

__all__ = [
    "Store", "StoreError", "StoreBusy", "InvalidTransition", "MigrationError", "new_id", "utcnow",
    "AttemptStatus", "RunStatus", "CompileStatus", "EvalStatus", "BaselineVariant", "LlmCallStatus",
    "ATTEMPT_TRANSITIONS",
]

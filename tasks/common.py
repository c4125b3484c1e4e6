"""What every task module shares: opening the store a flow names, and task defaults."""

from __future__ import annotations

from typing import Optional

from solforge.store import Store


def open_store(db: Optional[str]) -> Store:
    """The store a flow run writes to: its `db` parameter, else settings (SOLFORGE_DB_PATH)."""
    return Store(db) if db else Store()


# Deterministic failures (compile errors, wrong answers, bad input) must not be retried: the same
# input gives the same failure. Only transient errors are worth another try: these, plus what
# solforge.orchestrate.errors.is_transient names (LLM provider errors by class, a lost GPU worker).
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, OSError)


def retry_transient(task, old_state, new_state) -> bool:
    """Prefect retry_condition_fn: retry only when the task raised a transient error."""
    from solforge.orchestrate.errors import is_transient

    try:
        new_state.result()
    except TRANSIENT_ERRORS:
        return True
    except BaseException as e:  # noqa: BLE001 - anything else is deterministic unless named
        return is_transient(e)
    return False

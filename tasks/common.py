"""What every task module shares: opening the store a flow names, and task defaults."""

from __future__ import annotations

from typing import Optional

from solforge.store import Store


def open_store(db: Optional[str]) -> Store:
    """The store a flow run writes to: its `db` parameter, else settings (SOLFORGE_DB_PATH)."""
    return Store(db) if db else Store()


# Deterministic failures (compile errors, wrong answers, bad input) must not be retried: the same
# input gives the same failure. Only these transient errors are worth another try.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (ConnectionError, TimeoutError, OSError)


def retry_transient(task, old_state, new_state) -> bool:
    """Prefect retry_condition_fn: retry only when the task raised a transient error."""
    try:
        new_state.result()
    except TRANSIENT_ERRORS:
        return True
    except BaseException:  # noqa: BLE001 - any other exception is deterministic
        return False
    return False

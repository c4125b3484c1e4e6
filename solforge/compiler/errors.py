"""The compiler's two refusals, in a module of their own so that any part of the compiler can raise
them without importing the tracer or the lowering (no import cycles)."""


class TraceError(Exception):
    """The reference could not be traced (one line: why)."""


class Unsupported(Exception):
    """The traced graph could not be lowered (one line: the op or pattern)."""

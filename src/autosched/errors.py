"""One error hierarchy for the whole project.

Every error that autosched raises on purpose derives from `AutoschedError`; the command line
catches that base class once, with an `OSError` about a named file (a file that cannot be opened,
read or written), and prints its message as one line (exit code 2). Anything else that escapes is
a bug and keeps its traceback.

- `InputError`: input that cannot be used (a file, a trace row, a config, an option value). The
  message names the file, row, column and rule where there is one.
- `SimulationError`: the simulation cannot go on (a policy broke a rule of the engine).
- `LiveError`: talking to a live scheduler or the agent's state failed (timeouts, refusals,
  a value that did not take effect). Its class says whether the failure is `temporary` (the
  scheduler did not answer: time may end it), so a caller decides a retry by the error's type,
  never by its message.

This module imports nothing from the project: every layer may use it.
"""

from __future__ import annotations

from typing import ClassVar


class AutoschedError(Exception):
    """Base class of the errors autosched raises on purpose; the message is for the user."""


class InputError(AutoschedError, ValueError):
    """Bad input: a file, a row, a config, an option value. (A `ValueError` too, for callers
    that catch that.)"""


class SimulationError(AutoschedError, RuntimeError):
    """The simulation cannot go on (a policy broke a rule of the engine)."""


class LiveError(AutoschedError, RuntimeError):
    """A live scheduler or the agent's state did not do what was asked."""

    # Whether time may end the failure (the scheduler did not answer), so that the same action
    # is worth trying again soon; False: it needs an operator or new data. A property of the
    # class, never of one error: an error that wraps a temporary one is of a class that derives
    # from the temporary class too (`live.errors.ApplyUnreachable`), so the decision survives.
    temporary: ClassVar[bool] = False

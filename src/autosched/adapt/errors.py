"""The adaptive loop's own error: settings that cannot run (checked once, where they are held)."""

from __future__ import annotations

from ..errors import InputError


class AdaptError(InputError):
    """Settings of the loop or the replay experiment that cannot be used (a period of 0, a
    budget of 0, an unknown strategy, an empty trace). Messages name the setting, not a CLI
    option: the same settings come from Python, the CLI and the live agent."""

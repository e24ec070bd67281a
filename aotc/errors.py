"""One error family for everything aotc reports to users.

The CLI prints `str(err)` as one line and exits 1; compiler logs (NVRTC, cc)
ride along in `err.log` and are shown with --debug.
"""
from __future__ import annotations


class AotcError(Exception):
    """Base of every error aotc raises on purpose."""

    def __init__(self, message: str, log: str = ""):
        super().__init__(message)
        self.log = log


class UnsupportedError(AotcError):
    """An op, attribute value or dtype that aotc does not support.

    The importer's pre-scan raises one for a whole model: `details` lists every
    unsupported item (one line each) and `summary` is a short first line; the
    CLI prints the summary and the list instead of the one long message.
    """

    def __init__(self, message: str, log: str = "", details=(), summary: str = ""):
        super().__init__(message, log)
        self.details = list(details)
        self.summary = summary


class ModelError(AotcError):
    """A model that is malformed (fails the checker, bad shapes, cycles)."""


class VerifyError(AotcError):
    """A graph that breaks an IR invariant; names the node, op and rule."""


class CompileError(AotcError):
    """Kernel compilation (NVRTC or the host compiler) failed; `log` has the compiler output."""


class EngineFormatError(AotcError):
    """An engine file that is truncated, corrupt, or from an incompatible version."""


class RuntimeFailure(AotcError):
    """The runtime reported an error status while loading or running an engine."""


class InputError(AotcError):
    """Inputs given to run an engine do not match its signature (name, dtype, shape)."""

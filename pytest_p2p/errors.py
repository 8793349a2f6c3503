"""Errors that a user reads.

Every error raised for bad input names *what* is wrong and *where* it came from
(a file and a field path, a log line, an environment variable), in one paragraph,
so that the plugin can print it instead of a traceback from deep inside.
"""

from __future__ import annotations


class P2PError(Exception):
    """Base class: a problem the user can fix, with a message that says how."""


class ConfigError(P2PError):
    """A rig file, option, ini value or environment variable is wrong.

    ``source`` says where the value came from (``rig.yaml``, ``--p2p-rig``,
    ``PYTEST_P2P_RIG``), ``path`` the field path inside it (``expect.pcie.gen``).
    """

    def __init__(self, source: str, path: str, message: str) -> None:
        self.source = source
        self.path = path
        self.message = message
        where = f"{source}: {path}: " if path else f"{source}: "
        super().__init__(where + message)


class SnapshotError(P2PError):
    """A recorded evidence snapshot is unreadable, of another schema version, or inconsistent."""


class EvidenceError(P2PError):
    """Live evidence could not be gathered (no driver, NVML missing, a GPU that is not there)."""


class ProbeError(P2PError):
    """A probe (all-reduce, P2P copy) failed, hung or produced wrong results."""


class ServerError(P2PError):
    """A server (vLLM or the stand-in) did not start, died, or left processes behind."""


class ResultsError(P2PError):
    """A results directory is missing, not a results directory, or holds a missing or corrupt file."""


class StoreError(P2PError):
    """The baseline database is corrupt, of a future schema, or cannot be written."""


class WriteError(P2PError, OSError):
    """A file could not be written (disk full, read-only file system, no permission).

    Also an :class:`OSError` (same ``errno``), so code that already tolerates a failed
    write keeps doing so; its message is one paragraph naming the file and what to do.
    Nothing already written is touched: every write is atomic (``util.atomic_write_*``).
    """

    def __init__(self, path: str, errno_: int | None, message: str) -> None:
        super().__init__(errno_ or 0, message)
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return self.message


class CampaignError(P2PError):
    """A campaign could not run (bad plan, a scenario over its time limit, a server that never came up)."""


class RepFailed(CampaignError):
    """One rep is not a measurement (its server died or was replaced, or no request completed).

    The runner sets the rep's data aside (never aggregated, never a baseline) and re-runs it
    on a fresh server; the message is the cause (exit code or signal, likely cause, log tail).
    ``data`` is what the rep measured anyway (kept on disk beside the rep, never aggregated).
    """

    def __init__(self, cause: str, data: dict[str, object] | None = None) -> None:
        super().__init__(cause)
        self.data = data

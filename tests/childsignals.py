"""For tests that signal a child process: its signals at their defaults, whatever this suite inherited.

``nohup`` leaves SIGHUP ignored and a background job of a non-interactive shell leaves SIGINT
ignored; the plugin (rightly) keeps an ignored signal ignored, and Python installs its
KeyboardInterrupt handler only over a default SIGINT. A test of what a signal does must not
depend on how the suite was launched.
"""

from __future__ import annotations

import signal


def default_signals() -> None:
    """``preexec_fn`` for ``subprocess.Popen``: SIGINT, SIGTERM and SIGHUP back to SIG_DFL in the child."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)

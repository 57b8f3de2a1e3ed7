"""Start a process the way a terminal would, so that a test's SIGINT is a user's Ctrl-C.

A shell that starts a command in the background without job control (``make test &``,
``nohup … &``, some CI runners) starts it with SIGINT ignored, every descendant inherits
that, and Python then installs no KeyboardInterrupt handler: the SIGINT a test sends is
silently dropped and the command runs to its end (seen: ``assay run`` finishing all 240 cases
and exiting 0 where the test expected 130). ``preexec_fn=interruptible`` gives the child the
default disposition a terminal's foreground job has.
"""

from __future__ import annotations

import signal


def interruptible() -> None:
    """``preexec_fn`` for :class:`subprocess.Popen`: SIGINT back to its default action."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

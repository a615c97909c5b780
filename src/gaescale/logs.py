"""gaescale's log lines go through :mod:`logging`: the ``gaescale`` logger, whose own handler writes each message as
it is, one plain line on standard error (the lines the CLI has always printed). Configure it as any logger:
``logging.getLogger("gaescale").setLevel(logging.WARNING)`` silences the progress lines, removing
:data:`HANDLER` from it and letting it propagate hands them to your own handlers. Under torchrun, only rank 0's
lines are written (:class:`MainRank`, installed by :func:`gaescale.parallel.runtime.from_torchrun`). Every
function that logs also takes ``log=``, a callable that receives each line instead."""
from __future__ import annotations

import logging
import sys

logger = logging.getLogger("gaescale")


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is when a line is written (tests and notebooks replace it)."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(message)s"))

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):  # StreamHandler.__init__ sets it; the property reads sys.stderr instead
        pass


class MainRank(logging.Filter):
    """Keep the records of rank 0 only (the others of a torchrun group write nothing)."""

    def __init__(self, rank: int):
        super().__init__()
        self.rank = rank

    def filter(self, record: logging.LogRecord) -> bool:
        return self.rank == 0


HANDLER = _Stderr()
logger.addHandler(HANDLER)
logger.setLevel(logging.INFO)
logger.propagate = False  # its own handler writes the lines; remove it and set propagate to use yours


def info(message: str) -> None:
    """Log one line at INFO on the ``gaescale`` logger (the default ``log=`` of the library's functions)."""
    logger.info(message)


def only_rank(rank: int) -> None:
    """From now on, the ``gaescale`` logger writes rank 0's lines only (this process is rank ``rank``)."""
    for f in list(logger.filters):
        if isinstance(f, MainRank):
            logger.removeFilter(f)
    logger.addFilter(MainRank(rank))

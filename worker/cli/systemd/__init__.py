"""``backlog-worker systemd-unit``: write hardened systemd units for a worker or a served rail.

Its modules may touch the install's paths, the ``--config`` files (read, never written) and stdout
(the units are printed); they never write a file or call systemd. This package's own module holds
only what a running worker reads too (:data:`STOP_MARGIN_S`), so ``backlog-worker run`` does not
import the unit renderer.
"""

__all__ = ["STOP_MARGIN_S"]

#: Time allowed beyond ``shutdown_grace_s`` for cancelling executors and the final reports: the
#: rendered unit's ``TimeoutStopSec`` and the ``EXTEND_TIMEOUT_USEC`` a draining worker sends.
STOP_MARGIN_S = 30

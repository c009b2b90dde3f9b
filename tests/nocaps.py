"""Root without the capabilities that let it read and write anywhere, for a test's child process.

CI runs as root, and root passes every permission check; a test of "this directory is not
writable" or "another user's directory is closed" then has nothing to see. Passed as a
subprocess's ``preexec_fn``, :func:`drop_dac_override` takes ``CAP_DAC_OVERRIDE`` and
``CAP_DAC_READ_SEARCH`` out of the bounding set before the exec, so the child root keeps only
an owner's rights on files, as an ordinary user does.
"""

from __future__ import annotations

import ctypes

__all__ = ["drop_dac_override"]

_PR_CAPBSET_DROP, _CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 24, 1, 2


def drop_dac_override() -> None:
    """Drop the two capabilities from this process's bounding set (effective after its exec)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")

"""Run a command under the kernel mechanisms behind two unit settings, without systemd.

``python -m tests.systemd.sandbox_exec [--mdwe] [--seccomp FILE] -- ARGV...`` sets them up in
this process and ``exec``s ARGV, so the command and everything it starts inherit them:

- ``--mdwe``: ``prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN)`` (Linux >= 6.3), the lock systemd
  >= 255 sets for ``MemoryDenyWriteExecute=yes`` (older versions build a seccomp filter with
  the same effect): no writable+executable mapping, no mapping made executable later.
- ``--seccomp FILE``: ``NoNewPrivileges=yes`` plus a seccomp filter like the one
  ``SystemCallFilter=<the syscalls in FILE>``, ``SystemCallErrorNumber=EPERM``,
  ``SystemCallArchitectures=native`` and ``RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6``
  install: a syscall not listed fails with EPERM, ``socket()`` of another family with
  EAFNOSUPPORT. FILE holds one syscall number per line (x86_64).

Exit 125 when the kernel refuses the setting (so a test can tell "unsupported" from "broke").
"""

from __future__ import annotations

import ctypes
import os
import struct
import sys

PR_SET_SECCOMP, PR_SET_NO_NEW_PRIVS, PR_SET_MDWE = 22, 38, 65
PR_MDWE_REFUSE_EXEC_GAIN = 1
SECCOMP_MODE_FILTER = 2
AUDIT_ARCH_X86_64 = 0xC000003E
RET_ALLOW, RET_KILL = 0x7FFF0000, 0x80000000
EPERM, EAFNOSUPPORT = 1, 97
LD_ABS, JEQ, JGE, RET = 0x20, 0x15, 0x35, 0x06
SOCKET_NR = 41
FAMILIES = (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6


def _errno(code: int) -> int:
    return 0x00050000 | code


def _program(allowed: list[int]) -> list[tuple[int, int, int, int]]:
    prog = [
        (LD_ABS, 0, 0, 4),  # seccomp_data.arch
        (JEQ, 1, 0, AUDIT_ARCH_X86_64),
        (RET, 0, 0, RET_KILL),
        (LD_ABS, 0, 0, 0),  # seccomp_data.nr
        (JGE, 0, 1, 0x40000000),  # x32 ABI: not native
        (RET, 0, 0, _errno(EPERM)),
        (JEQ, 0, 6, SOCKET_NR),
        (LD_ABS, 0, 0, 16),  # args[0] (low half): the address family
        (JEQ, 3, 0, FAMILIES[0]),
        (JEQ, 2, 0, FAMILIES[1]),
        (JEQ, 1, 0, FAMILIES[2]),
        (RET, 0, 0, _errno(EAFNOSUPPORT)),
        (RET, 0, 0, RET_ALLOW),
    ]
    for nr in sorted(set(allowed) - {SOCKET_NR}):
        prog += [(JEQ, 0, 1, nr), (RET, 0, 0, RET_ALLOW)]
    prog.append((RET, 0, 0, _errno(EPERM)))
    return prog


def main(argv: list[str]) -> None:
    """Parse the options, set the mechanisms up, exec the command."""
    libc = ctypes.CDLL(None, use_errno=True)
    split = argv.index("--")
    opts, command = argv[:split], argv[split + 1 :]
    if "--mdwe" in opts and libc.prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0:
        print(f"PR_SET_MDWE: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
        sys.exit(125)
    if "--seccomp" in opts:
        with open(opts[opts.index("--seccomp") + 1]) as fh:
            allowed = [int(line) for line in fh if line.strip()]
        code = b"".join(struct.pack("=HBBI", *ins) for ins in _program(allowed))
        buf = ctypes.create_string_buffer(code, len(code))
        fprog = struct.pack("=HxxxxxxQ", len(code) // 8, ctypes.addressof(buf))
        fbuf = ctypes.create_string_buffer(fprog, len(fprog))
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            sys.exit(125)
        if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, fbuf, 0, 0) != 0:
            print(f"PR_SET_SECCOMP: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
            sys.exit(125)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])

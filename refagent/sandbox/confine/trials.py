"""What this machine can confine, tried piece by piece in throwaway children: :func:`probe`, what the
launcher's ``--probe`` prints (``key=value`` lines) for :mod:`refagent.sandbox.confine.confinement` to read once.
Some restrictions (AppArmor, seccomp in containers) show only when a piece is tried.

Standard library only: the launcher runs this in a fresh ``python -I -S``.
"""

from __future__ import annotations

import os

from refagent.sandbox.confine import landlock, namespaces


def probe() -> str:
    """Try each piece in a throwaway child; ``landlock=ABI``, ``namespaces=0|1``, ``netns=0|1`` and, for a
    piece that failed, ``why.PIECE=message`` lines."""
    lines = [f"landlock={landlock.abi_version()}"]
    for piece, extra in (("namespaces", 0), ("netns", namespaces.CLONE_NEWNET)):
        problem = _try_in_child(extra)
        lines.append(f"{piece}={0 if problem else 1}")
        if problem:
            lines.append(f"why.{piece}={problem}")
    return "".join(line + "\n" for line in lines)


def _try_in_child(extra_flags: int) -> str:
    """'' if a child can unshare (with ``extra_flags``) and its init can mount; else what failed."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        try:
            uid, gid = os.getuid(), os.getgid()
            flags = namespaces.CLONE_NEWUSER | namespaces.CLONE_NEWNS | namespaces.CLONE_NEWPID | extra_flags
            namespaces.unshare(flags)
            namespaces.map_ids(uid, gid)
            init = os.fork()
            if init == 0:
                try:
                    namespaces.make_private()
                    namespaces.mount_setattr("/", read_only=True)
                    namespaces.private_dev()
                    namespaces.fresh_proc()
                    namespaces.protect_proc()
                    namespaces.drop_privileges()
                except OSError as exc:
                    os.write(write, str(exc).encode()[:500])
                    os._exit(1)
                os._exit(0)
            _, status = os.waitpid(init, 0)
            os._exit(0 if status == 0 else 1)
        except OSError as exc:
            os.write(write, str(exc).encode()[:500])
            os._exit(1)
    os.close(write)
    message = b""
    while chunk := os.read(read, 4096):
        message += chunk
    os.close(read)
    _, status = os.waitpid(child, 0)
    if status == 0:
        return ""
    return message.decode("utf-8", "replace").replace("\n", " ") or "failed"

"""One-node launches listen on loopback only: a tiny preloaded shim turns mpirun's wildcard
binds into loopback ones, since no MCA parameter can (docs/distributed.md)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import sysconfig

# PRRTE's prterun (Open MPI 5's mpirun) binds its out-of-band listeners to INADDR_ANY and
# in6addr_any whatever oob_tcp_if_include says (its listener code takes no address; an include
# list of "lo" is refused outright when the node has another interface). On one node nothing
# outside the node needs those ports, so graphc launch compiles the shim below with the
# system's C compiler into a private temporary directory and preloads it into mpirun; each
# rank's wrapper removes it again before starting the script (rank.py), whose own sockets bind
# where the script says.
SHIM_ENV = "GRAPHC_LAUNCH_LOOPBACK_SHIM"  # the shim's path, for the wrappers to remove it
OPT_OUT_ENV = "GRAPHC_LAUNCH_LOOPBACK"  # "0": one-node jobs listen where mpirun wants

# bind() on a wildcard address binds loopback instead; every other bind is untouched
SOURCE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    static bind_fn real;
    if (!real)
        real = (bind_fn)dlsym(RTLD_NEXT, "bind");
    if (addr && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in a;
        memcpy(&a, addr, sizeof a);
        if (a.sin_addr.s_addr == htonl(INADDR_ANY)) {
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            return real(fd, (const struct sockaddr *)&a, sizeof a);
        }
    } else if (addr && addr->sa_family == AF_INET6
               && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 a;
        memcpy(&a, addr, sizeof a);
        if (IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr)) {
            a.sin6_addr = in6addr_loopback;
            return real(fd, (const struct sockaddr *)&a, sizeof a);
        }
    }
    return real(fd, addr, len);
}
"""


def _compiler() -> list[str] | None:
    cc = sysconfig.get_config_var("CC") or ""
    cmd = shlex.split(cc) if cc else []
    if cmd and shutil.which(cmd[0]):
        return cmd
    found = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    return [found] if found else None


def build(directory: str) -> tuple[str | None, str]:
    """Compile the shim into ``directory`` (private to this launch): (its path, "") or
    (None, why not)."""
    if not sys.platform.startswith("linux"):
        return None, "the loopback shim is for Linux (LD_PRELOAD)"
    cc = _compiler()
    if cc is None:
        return None, "no C compiler (cc) to build the loopback shim"
    src, out = os.path.join(directory, "bind_loopback.c"), os.path.join(directory,
                                                                        "bind_loopback.so")
    with open(src, "w") as f:
        f.write(SOURCE)
    try:
        done = subprocess.run([*cc, "-shared", "-fPIC", "-O2", "-o", out, src, "-ldl"],
                              capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"the loopback shim did not compile: {exc}"
    if done.returncode != 0:
        return None, f"the loopback shim did not compile: {done.stderr.strip()[-300:]}"
    return out, ""


def preload(env: dict, shim: str) -> None:
    """Preload ``shim`` into the processes started with ``env`` (before what was there)."""
    before = env.get("LD_PRELOAD", "")
    env["LD_PRELOAD"] = f"{shim}:{before}" if before else shim
    env[SHIM_ENV] = shim


def remove(env: dict) -> None:
    """Take the shim out of ``env`` again (a script's own binds are its business)."""
    shim = env.pop(SHIM_ENV, None)
    if not shim or "LD_PRELOAD" not in env:
        return
    kept = [p for p in env["LD_PRELOAD"].replace(" ", ":").split(":") if p and p != shim]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        del env["LD_PRELOAD"]

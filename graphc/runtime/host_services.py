"""Host services: what a step's host side talks to outside the XLA program (a parameter
server's channel, a server's all-server sum, a collective deadline, feeds for ``feed=None``).

One ``HostServices`` object holds them. An Executor runs with one (``Executor(services=...)``,
``exe.services``) and hands it to the steps it builds, whose lowering rules read it as
``c.services`` while they are traced (backends/lowering.py): nothing lives in module slots,
so two Executors given their own services share nothing, and a test swaps a fake channel in
by making an Executor with it instead of patching a global. An Executor made without one
uses this process's services (``process_services()``): the roles a process takes on join
them there (graphc.distributed's collective deadline, a parameter-server trainer's channel,
graphc.io's bound DataLoaders), as in Paddle, where a process has one role in one job.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

__all__ = ["HostServices", "process_services"]


class HostServices:
    """``channel``: a parameter-server trainer's channel (the send/recv/pull rules call it);
    ``server``: a parameter server's state, whose ``server_sum(array)`` the ps_server_sum
    rule calls; ``collective_wait``: ``wait(label) -> context manager`` entered around every
    run and multi-process step (a deadline watchdog; None: nothing to enter);
    ``feed_providers``: ``provider(program_or_compiled) -> feed or None``, asked in order
    by a run given ``feed=None``; ``run_timer``: ``timer(label) -> context manager`` entered
    around every run (fluid.profiler's per-step timings; None: nothing to enter);
    ``join_job``: ``join() -> job`` (``.size``, ``.rank``, ``.launcher``), which joins the
    collective job this process's environment describes, called where a data-parallel program
    first needs the job (graphc.distributed sets it; None: the process is alone)."""

    __slots__ = ("channel", "server", "collective_wait", "feed_providers", "run_timer",
                 "join_job")

    def __init__(self, channel=None, server=None, collective_wait: Callable | None = None,
                 feed_providers: tuple = (), run_timer: Callable | None = None,
                 join_job: Callable | None = None):
        self.channel, self.server, self.collective_wait = channel, server, collective_wait
        self.feed_providers: tuple = tuple(feed_providers)
        self.run_timer = run_timer
        self.join_job = join_job

    def replace(self, **changes) -> HostServices:
        """A copy with some services replaced (``serve`` adds its server this way)."""
        fields = {name: getattr(self, name) for name in self.__slots__}
        fields.update(changes)
        return HostServices(**fields)

    def add_feed_provider(self, provider: Callable) -> None:
        """Ask ``provider(program_or_compiled)`` for a feed when a run is given none (None:
        it has nothing for that program). graphc.io adds its non-iterable DataLoaders."""
        if provider not in self.feed_providers:
            self.feed_providers = (*self.feed_providers, provider)

    def provided_feed(self, program):
        """The first feed a provider has for ``program``; None when none has one."""
        for provider in self.feed_providers:
            feed = provider(program)
            if feed is not None:
                return feed
        return None

    def waiting(self, label: str):
        """The context a run (or a multi-process step) runs in: the collective deadline."""
        wait = self.collective_wait
        return contextlib.nullcontext() if wait is None else wait(label)

    def joined_job(self):
        """The collective job this process is part of, joined now if it has not been; None
        when nothing can join one (graphc.distributed not set up)."""
        return None if self.join_job is None else self.join_job()

    def timing(self, label: str):
        """The context a run is timed in (fluid.profiler), or a null context."""
        timer = self.run_timer
        return contextlib.nullcontext() if timer is None else timer(label)

    def __repr__(self) -> str:
        held = [n for n in self.__slots__ if getattr(self, n)]
        return f"HostServices({', '.join(held) or 'none'})"


# process: the services of this OS process's own roles (one job, one parameter-server role,
# one set of bound DataLoaders); Executors made without services= share exactly this object
_PROCESS = HostServices()


def process_services() -> HostServices:
    """This process's services: the default of every ``Executor()`` made without its own.
    graphc.distributed.init sets the collective deadline here, start_trainer the channel."""
    return _PROCESS

"""``fluid.incubate.fleet.parameter_server``: importable so Fluid 1.x scripts load, but
parameter-server training is a later graphc issue: using it raises MissingAPIError."""

from . import distribute_transpiler  # noqa: F401

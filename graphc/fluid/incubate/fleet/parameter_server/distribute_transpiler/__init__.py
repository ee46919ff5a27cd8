"""Paddle 1.8's parameter-server ``fleet`` (``...parameter_server.distribute_transpiler``):
it imports, and every use raises MissingAPIError pointing to collective training."""

from ....._missing import missing
from .._unsupported import Unsupported

fleet = Unsupported("parameter_server.distribute_transpiler.fleet")
FleetTranspiler = Unsupported("FleetTranspiler")


def __getattr__(name: str):
    raise missing("graphc.fluid.transpiler", name)

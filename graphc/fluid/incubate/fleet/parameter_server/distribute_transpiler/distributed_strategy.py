"""Paddle 1.8's parameter-server strategies (StrategyFactory, SyncStrategy, ...): importable,
refused with MissingAPIError when used."""

from .._unsupported import Unsupported

StrategyFactory = Unsupported("StrategyFactory")
SyncStrategy = Unsupported("SyncStrategy")
AsyncStrategy = Unsupported("AsyncStrategy")
HalfAsyncStrategy = Unsupported("HalfAsyncStrategy")
GeoStrategy = Unsupported("GeoStrategy")
TrainerRuntimeConfig = Unsupported("TrainerRuntimeConfig")

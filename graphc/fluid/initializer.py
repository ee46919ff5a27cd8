"""``fluid.initializer``: graphc's initialisers under Paddle's names, including the
``...Initializer`` spellings (``fluid.initializer.XavierInitializer``)."""

from ..build import initializer as _base
from ._missing import delegating_getattr

__getattr__ = delegating_getattr(__name__, _base, {
    "ConstantInitializer": "Constant", "UniformInitializer": "Uniform",
    "NormalInitializer": "Normal", "TruncatedNormalInitializer": "TruncatedNormal",
    "XavierInitializer": "Xavier", "MSRAInitializer": "MSRA",
    "BilinearInitializer": "Bilinear"})

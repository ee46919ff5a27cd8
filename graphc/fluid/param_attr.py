"""``fluid.param_attr``: ParamAttr (graphc.param_attr); WeightNormParamAttr is refused
with advice."""

from ..build.param_attr import ParamAttr
from ._missing import missing

__all__ = ["ParamAttr"]


def __getattr__(name: str):
    raise missing(__name__, name)

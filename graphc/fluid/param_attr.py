"""``fluid.param_attr``: ParamAttr and WeightNormParamAttr (graphc.build.param_attr); other
names raise graphc's missing-API error."""

from ..build.param_attr import ParamAttr, WeightNormParamAttr
from ._missing import missing

__all__ = ["ParamAttr", "WeightNormParamAttr"]


def __getattr__(name: str):
    raise missing(__name__, name)

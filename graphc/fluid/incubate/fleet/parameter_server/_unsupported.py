"""A stand-in for a parameter-server object: importing it works, touching or calling it
raises MissingAPIError with the advice for parameter-server training."""

from ...._missing import MissingAPIError

_ADVICE = ("parameter-server fleet is not supported yet; use "
           "fluid.DistributeTranspiler (docs/parameter_server.md) or collective training")


class Unsupported:
    def __init__(self, what: str):
        self._what = what

    def _refuse(self, detail: str):
        return MissingAPIError(f"{detail}: graphc lacks this on purpose. "
                               f"{_ADVICE}")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise self._refuse(f"{self._what}.{name}")

    def __call__(self, *args, **kwargs):
        raise self._refuse(f"{self._what}()")

    def __repr__(self) -> str:
        return f"<unsupported {self._what} (parameter-server mode)>"

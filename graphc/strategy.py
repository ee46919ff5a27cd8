"""BuildStrategy and ExecutionStrategy: the seeds' fields, types and defaults, validated on
construction and on every assignment (pydantic), saved and loaded as TOML or JSON."""

from __future__ import annotations

import difflib
import enum
import json
import logging
import os
import tomllib
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from .ir.errors import GraphcError

log = logging.getLogger("graphc.strategy")
PRESETS_DIR = Path(__file__).resolve().parent.parent / "strategies"


class StrategyError(GraphcError):
    """A strategy field got a bad value, or a strategy file could not be read."""


class ReduceStrategy(enum.IntEnum):
    """How gradients are aggregated across devices (the seeds' two modes)."""

    AllReduce = 0  # every device gets every summed gradient and updates every parameter
    Reduce = 1  # each parameter's gradient is reduced to one owner, which broadcasts it back


class GradientScaleStrategy(enum.IntEnum):
    CoeffNumDevice = 0  # the loss gradient is 1/num_devices on each device (mean)
    One = 1  # 1 on each device (sum)
    Customized = 2  # the user feeds loss@GRAD


class _Strategy(BaseModel):
    """Shared behaviour: validated assignment, clear errors, TOML/JSON files, presets."""

    # strict: "yes" is not a bool and 1.5 not an int; a wrong value is an error, not a guess
    model_config = ConfigDict(validate_assignment=True, extra="forbid", strict=True)
    kind: ClassVar[str] = ""

    def __init__(self, **data: Any):
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise StrategyError(_explain(type(self).__name__, exc)) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in type(self).model_fields:
            raise StrategyError(f"{type(self).__name__} has no field '{name}'; fields are: "
                                f"{', '.join(type(self).model_fields)}")
        try:
            super().__setattr__(name, value)
        except ValidationError as exc:
            raise StrategyError(_explain(type(self).__name__, exc)) from None
        except (AttributeError, ValueError) as exc:
            raise StrategyError(f"{type(self).__name__}.{name}: {exc}") from None

    # -- files ---------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        out = {}
        for name, value in self.model_dump().items():
            out[name] = value.name if isinstance(value, enum.Enum) else value
        return out

    def changed_fields(self) -> dict[str, Any]:
        """Fields that differ from the defaults (what a preset file needs to say)."""
        default = type(self)().to_dict()
        return {k: v for k, v in self.to_dict().items() if default[k] != v}

    def to_toml(self) -> str:
        import tomli_w
        return tomli_w.dumps({self.kind: self.to_dict()})

    def to_json(self) -> str:
        return json.dumps({self.kind: self.to_dict()}, indent=2)

    def save(self, path: str | os.PathLike) -> None:
        path = Path(path)
        text = self.to_json() if path.suffix == ".json" else self.to_toml()
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # ranks may save one file
        tmp.write_text(text)
        os.replace(tmp, path)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "dict"):
        """From a table of fields, or a file's tables (its own is taken)."""
        return cls._from_fields(_own_table(cls, data, source), source)

    @classmethod
    def _from_fields(cls, data: dict[str, Any], source: str):
        for name, field in cls.model_fields.items():
            ann = field.annotation
            if isinstance(ann, type) and issubclass(ann, enum.Enum) and name in data:
                try:
                    raw = data[name]
                    data[name] = ann[raw] if isinstance(raw, str) else ann(raw)
                except (KeyError, ValueError):
                    raise StrategyError(f"{source}: {cls.__name__}.{name} must be one of "
                                        f"{[m.name for m in ann]}, got {data[name]!r}") from None
        try:
            return cls(**data)
        except StrategyError as exc:
            raise StrategyError(f"{source}: {exc}") from None

    @classmethod
    def load(cls, name_or_path: str | os.PathLike):
        """Load a preset by name (``strategies/NAME.toml``) or a .toml/.json file path."""
        path = Path(name_or_path)
        # a bare name is a preset; anything with a directory part (or a suffix) is a path
        if not path.suffix and os.sep not in str(name_or_path):
            path = PRESETS_DIR / f"{name_or_path}.toml"
            if not path.exists():
                names = sorted(p.stem for p in PRESETS_DIR.glob("*.toml"))
                raise StrategyError(f"no strategy preset '{name_or_path}'; presets: {names}")
        return cls.from_dict(read_strategy_file(path), str(path))


# the top-level tables a strategy file may hold (presets and DistributedStrategy files)
STRATEGY_TABLES = ("build_strategy", "execution_strategy", "distributed_strategy")


def read_strategy_text(path: str | os.PathLike) -> str:
    """A strategy file's text; StrategyError for a missing file, a directory, unreadable or
    undecodable bytes."""
    path = Path(path)
    if not path.exists():
        raise StrategyError(f"strategy file '{path}' does not exist")
    if path.is_dir():
        raise StrategyError(f"strategy file '{path}' is a directory")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        line = path.read_bytes()[:exc.start].count(b"\n") + 1
        raise StrategyError(f"{path}:{line}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise StrategyError(f"cannot read strategy file '{path}': {exc.strerror or exc}"
                            ) from None


def read_strategy_file(path: str | os.PathLike) -> dict[str, Any]:
    """Parse a .toml or .json strategy file into a table (a JSON object at the top)."""
    path = Path(path)
    text = read_strategy_text(path)
    kind = "JSON" if path.suffix == ".json" else "TOML"
    try:
        data = json.loads(text) if kind == "JSON" else tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise StrategyError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except tomllib.TOMLDecodeError as exc:
        raise StrategyError(f"{path}: not valid TOML: {exc}") from None
    except ValueError as exc:  # a number past Python's int digit limit (not a decode error)
        raise StrategyError(f"{path}: not a valid {kind} value: {exc}") from None
    except RecursionError:
        raise StrategyError(f"{path}: not valid {kind}: nested too deeply") from None
    if not isinstance(data, dict):
        raise StrategyError(f"{path}: a strategy file holds tables (a {kind} object at the "
                            f"top), got a {type(data).__name__}")
    return data


def _own_table(cls, data, source: str) -> dict[str, Any]:
    """The fields of ``cls`` in ``data``: its own table (``[build_strategy]``) when ``data``
    is a file of strategy tables, else ``data`` itself. In a file of tables every table must
    be a table of fields and have a known name: a misspelt one is an error, not ignored."""
    if not isinstance(data, dict):
        raise StrategyError(f"{source}: {cls.__name__} needs a table of fields, got "
                            f"{type(data).__name__} {data!r:.60}")
    if cls.kind not in data and not (data and all(
            k in STRATEGY_TABLES or _near_table(k) for k in data)):
        return dict(data)  # a table of fields
    for name, value in data.items():
        if name not in STRATEGY_TABLES:
            near = _near_table(name)
            hint = f" (did you mean '{near}'?)" if near else ""
            raise StrategyError(f"{source}: unknown table '{name}'{hint}; a strategy file holds "
                                f"{', '.join(STRATEGY_TABLES)}")
        if not isinstance(value, dict):
            raise StrategyError(f"{source}: '{name}' must be a table of fields, got "
                                f"{type(value).__name__} {value!r:.60}")
    return dict(data.get(cls.kind, {}))


def _near_table(name) -> str | None:
    near = difflib.get_close_matches(str(name), STRATEGY_TABLES, n=1, cutoff=0.8)
    return near[0] if near else None


def _explain(cls: str, exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err["loc"]) or "(strategy)"
        parts.append(f"{cls}.{field}: {err['msg']} (got {err.get('input')!r})")
    return "; ".join(parts)


class AmpConfigs(_Strategy):
    """Automatic mixed precision settings: the seeds' ``amp_configs`` keys with Paddle's
    defaults, plus graphc's ``dtype`` (bfloat16 by default: it has float32's range, so the
    CPU needs no loss scaling to train; float16 is what GPUs speed up). The ``amp`` pass
    documents what each one does."""

    kind: ClassVar[str] = "amp_configs"

    dtype: Literal["bfloat16", "float16"] = "bfloat16"
    init_loss_scaling: float = Field(32768.0, gt=0)
    use_dynamic_loss_scaling: bool = True
    incr_every_n_steps: int = Field(1000, ge=1)
    decr_every_n_nan_or_inf: int = Field(2, ge=1)
    incr_ratio: float = Field(2.0, gt=1)
    decr_ratio: float = Field(0.8, gt=0, lt=1)
    custom_white_list: list[str] = []
    custom_black_list: list[str] = []

    @model_validator(mode="after")
    def _lists_disjoint(self) -> AmpConfigs:
        both = sorted(set(self.custom_white_list) & set(self.custom_black_list))
        if both:
            raise ValueError(f"ops {both} are in both custom_white_list and custom_black_list")
        return self


class BuildStrategy(_Strategy):
    """How graphc builds the step: which passes run (the seeds' BuildStrategy table)."""

    kind: ClassVar[str] = "build_strategy"
    ReduceStrategy: ClassVar = ReduceStrategy
    GradientScaleStrategy: ClassVar = GradientScaleStrategy

    reduce_strategy: ReduceStrategy = ReduceStrategy.AllReduce
    gradient_scale_strategy: GradientScaleStrategy = GradientScaleStrategy.CoeffNumDevice
    enable_sequential_execution: bool = False
    fuse_elewise_add_act_ops: bool = False
    # graphc's own: roll runs of repeated layers into one lax.scan (roll-repeated-layers),
    # their parameters kept stacked in the scope; exact (1e-6 under XLA), so on by default
    roll_repeated_layers: bool = True
    # graphc's own: the sum-pooled LoD lookups of one table (CTR slots) as one gather and one
    # segment sum (fuse-embedding-seq-pool); exact, so on by default
    fuse_embedding_seq_pool: bool = True
    fuse_bn_act_ops: bool = False
    fuse_relu_depthwise_conv: bool = False
    fuse_broadcast_ops: bool = False
    fuse_all_optimizer_ops: bool = False
    fuse_all_reduce_ops: bool = False
    enable_inplace: bool = False
    memory_optimize: bool = False  # Paddle's None ("framework decides") reads as False
    enable_backward_optimizer_op_deps: bool = True
    enable_auto_fusion: bool = False
    cache_runtime_context: bool = False
    sync_batch_norm: bool = False
    fuse_grad_size_in_MB: float = Field(32.0, gt=0)
    fuse_grad_size_in_TFLOPS: float = Field(50.0, ge=0)
    use_hierarchical_allreduce: bool = False
    hierarchical_allreduce_inter_nranks: int = Field(0, ge=0)
    num_trainers: int = Field(1, ge=1)
    trainer_id: int = Field(0, ge=0)
    debug_graphviz_path: str = ""
    # Paddle 1.6-1.8 fields for NCCL, MKL-DNN, parameter servers and its own executor:
    # accepted so scripts port, without effect here (NO_EFFECT, docs/strategies.md)
    remove_unnecessary_lock: bool = True
    nccl_comm_num: int = Field(1, ge=1)
    trainers_endpoints: list[str] = []
    is_distribution: bool = False
    async_mode: bool = False
    mkldnn_enabled_op_types: list[str] = []
    # graphc's own: verify the graph after every pass (the debug preset turns it on)
    verify_each_pass: bool = False
    # automatic mixed precision (the ``amp`` pass); DistributedStrategy.amp maps onto these
    amp: bool = False
    amp_configs: AmpConfigs = Field(default_factory=AmpConfigs)

    NO_EFFECT: ClassVar[dict[str, str]] = {
        "enable_auto_fusion": "XLA fuses elementwise ops itself in every compiled step",
        "cache_runtime_context": "there is no per-op runtime context; a step is one XLA call",
        "debug_graphviz_path": "draw graphs with graphc.viz.draw or dump IR with "
                               "PassManager(dump_dir=...)",
        "remove_unnecessary_lock": "a step is one XLA call; there are no op locks",
        "nccl_comm_num": "XLA chooses its communicators",
        "trainers_endpoints": "the launcher (graphc launch / mpirun) tells the processes apart",
        "is_distribution": "several processes are set up by graphc.distributed (fleet)",
        "async_mode": "parameter-server training is not supported; collectives are synchronous",
        "mkldnn_enabled_op_types": "XLA compiles every op; there are no MKL-DNN kernels",
    }

    @field_validator("memory_optimize", mode="before")
    @classmethod
    def _none_means_off(cls, value):
        return False if value is None else value

    @field_validator("mkldnn_enabled_op_types", "trainers_endpoints", mode="before")
    @classmethod
    def _any_collection(cls, value):  # Paddle takes a set of op types; keep a stable order
        if isinstance(value, set | frozenset):
            return sorted(value)
        return list(value) if isinstance(value, tuple) else value

    @model_validator(mode="after")
    def _log_fields_without_effect(self) -> BuildStrategy:
        warn_no_effect(self)
        return self

    def pass_options(self, pass_name: str) -> dict[str, Any]:
        """The options this strategy gives the pass ``pass_name`` ({} for most passes)."""
        if pass_name == "amp":
            return self.amp_configs.model_dump()
        return {}

    def resolve(self, num_devices: int = 1) -> BuildStrategy:
        """A copy with conflicting options settled by the documented rules; each rule that
        fires is logged as a warning (logger ``graphc.strategy``)."""
        s = self.model_copy()
        for rule in CONFLICT_RULES:
            message = rule(s, num_devices)
            if message:
                log.warning(message)
        return s


def _rule_broadcast_needs_reduce(s: BuildStrategy, n: int) -> str | None:
    if s.fuse_broadcast_ops and s.reduce_strategy != ReduceStrategy.Reduce:
        object.__setattr__(s, "fuse_broadcast_ops", False)
        return ("fuse_broadcast_ops applies only with ReduceStrategy.Reduce; turned off for "
                "AllReduce")
    return None


def _rule_allreduce_fusion_needs_devices(s: BuildStrategy, n: int) -> str | None:
    if s.fuse_all_reduce_ops and n <= 1 and s.num_trainers <= 1:
        object.__setattr__(s, "fuse_all_reduce_ops", False)
        return "fuse_all_reduce_ops has nothing to fuse on one device; turned off"
    return None


def _rule_memory_optimize_implies_inplace(s: BuildStrategy, n: int) -> str | None:
    if s.memory_optimize and not s.enable_inplace:
        object.__setattr__(s, "enable_inplace", True)
        return ("memory_optimize reuses buffers through the in-place plan; enable_inplace "
                "turned on")
    return None


def _rule_amp_needs_allreduce(s: BuildStrategy, n: int) -> str | None:
    # amp decides to skip a step from the gradients its check reads; in Reduce mode those are
    # each device's own (only the optimizer's input is reduce-scattered), so devices could
    # decide differently and their parameters drift apart.
    if s.amp and s.reduce_strategy == ReduceStrategy.Reduce and n > 1:
        object.__setattr__(s, "reduce_strategy", ReduceStrategy.AllReduce)
        return ("amp needs every device to see the aggregated gradients before its overflow "
                "check; reduce_strategy set to AllReduce")
    return None


CONFLICT_RULES = [_rule_amp_needs_allreduce, _rule_broadcast_needs_reduce,
                  _rule_allreduce_fusion_needs_devices, _rule_memory_optimize_implies_inplace]


class ExecutionStrategy(_Strategy):
    """How the step runs (the seeds' ExecutionStrategy table).

    ``num_iteration_per_run`` defaults to 1 as in Paddle's ExecutionStrategy; the fleet
    guide's table shows 3, but the seeds' examples pass one feed dict per run, which only
    makes sense with 1.
    """

    kind: ClassVar[str] = "execution_strategy"

    num_threads: int = Field(1, ge=1)
    num_iteration_per_drop_scope: int = Field(10, ge=1)
    num_iteration_per_run: int = Field(1, ge=1)
    use_thread_barrier: bool = False
    allow_op_delay: bool = False
    use_cuda: bool = True  # Paddle overrides it from the executor's place; so does graphc
    use_experimental_executor: bool = True
    dry_run: bool = False  # Paddle's ``_dry_run`` (a private-looking name pydantic refuses)

    NO_EFFECT: ClassVar[dict[str, str]] = {
        "num_iteration_per_drop_scope": "a step's temporaries live inside one XLA call and "
                                        "are freed when it returns",
        "use_thread_barrier": "there are no executor threads to synchronise",
        "allow_op_delay": "XLA schedules the ops of a step",
        "use_cuda": "the place given to the executor decides the device",
        "use_experimental_executor": "there is one executor: the compiled XLA step",
        "dry_run": "every run executes its step",
    }
    _ALIASES: ClassVar[dict[str, str]] = {"_dry_run": "dry_run"}

    @model_validator(mode="after")
    def _log_fields_without_effect(self) -> ExecutionStrategy:
        warn_no_effect(self)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(self._ALIASES.get(name, name), value)

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._ALIASES:
            return getattr(self, type(self)._ALIASES[name])
        return super().__getattr__(name)


# -- fields accepted for porting, without effect on XLA: logged once per field per process ---
# process: a no-effect field is logged once
_WARNED_NO_EFFECT: set[tuple[str, str]] = set()


def warn_no_effect(strategy: _Strategy) -> None:
    """Log (logger ``graphc.strategy``) each field of ``strategy.NO_EFFECT`` set to a value
    other than its default, once per class and field per process."""
    cls = type(strategy)
    for name, reason in getattr(cls, "NO_EFFECT", {}).items():
        if (cls.__name__, name) in _WARNED_NO_EFFECT:
            continue
        value = getattr(strategy, name)
        if value == cls.model_fields[name].get_default(call_default_factory=True):
            continue
        _WARNED_NO_EFFECT.add((cls.__name__, name))
        log.warning("%s.%s = %r has no effect on graphc's XLA backend: %s "
                    "(docs/strategies.md; logged once per process)", cls.__name__, name,
                    value, reason)

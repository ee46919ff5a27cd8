"""What each strategy field does to the program XLA runs: for every BuildStrategy and
ExecutionStrategy field, the optimised HLO (names normalised) with the field on and off.

``XLA_EFFECT`` is the one table of claims: the tests hold each one true, and the "effect on
XLA" column of docs/strategies.md must say the same for every field.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

import graphc
from graphc import layers, models, optimizer
from graphc.ir.text import print_graph
from graphc.runtime import hlo_text
from graphc.strategy import AmpConfigs, BuildStrategy, ExecutionStrategy, ReduceStrategy

CHANGES, IR_ONLY, NONE = "changes XLA", "IR only", "none"
DOC = Path(__file__).resolve().parent.parent / "docs" / "strategies.md"

class Claim(NamedTuple):
    """What ``field`` does to XLA's program, shown on ``model`` with ``off`` and ``on`` as
    the strategy's fields for each (optimizer, devices) of ``where``; ``check`` (off's and
    on's summaries) says what must differ where that matters. ``off``/``on`` name
    BuildStrategy fields, or ``exec.`` + an ExecutionStrategy field.

    CHANGES: the optimised HLO differs. IR_ONLY: a pass changes the IR (or makes its plan)
    and XLA's optimised HLO is the same up to names. NONE: neither the IR nor the HLO."""

    effect: str
    model: str
    off: dict
    on: dict
    where: tuple = (("momentum", 1),)
    check: Callable[[dict, dict], bool] | None = None


def _operands(op: str, more: bool):
    def check(off: dict, on: dict) -> bool:
        a, b = off["collective_operands"].get(op, 0), on["collective_operands"].get(op, 0)
        return b > a if more else b < a
    return check


def _fewer_all_gathers(off, on):
    return on["collectives"].get("all-gather", 0) < off["collectives"].get("all-gather", 0)


def _more_all_reduces(off, on):
    return on["collectives"].get("all-reduce", 0) > off["collectives"].get("all-reduce", 0)


def _low_precision(off, on):
    return "bf16" in on["types"] and "bf16" not in off["types"]


def _while_loops(off, on):
    return on["while_loops"] > off["while_loops"]


def _stacked_state(off, on):  # -- hlo28: fewer, stacked state arrays; no loop when short
    return on["aliased_outputs"] < off["aliased_outputs"] and on["while_loops"] == 0


def _scatter_and_gather(off, on):
    return on["collectives"].get("reduce-scatter", 0) > 0 and \
        on["collectives"].get("all-gather", 0) > 0 and "reduce-scatter" not in off["collectives"]


DP = (("momentum", 4),)
BOTH = (("momentum", 1), ("momentum", 4))
REDUCE = {"reduce_strategy": ReduceStrategy.Reduce}
FUSED_AR = {"fuse_all_reduce_ops": True}
HIER = {"use_hierarchical_allreduce": True}


def _on(field: str, value=True, effect=NONE, model="mlp", where=(("momentum", 1),),
        check=None) -> Claim:
    return Claim(effect, model, {}, {field: value}, where, check)


XLA_EFFECT: dict[str, Claim] = {
    # -- BuildStrategy ------------------------------------------------------------------
    "reduce_strategy": _on("reduce_strategy", ReduceStrategy.Reduce, CHANGES, where=DP,
                           check=_scatter_and_gather),
    "gradient_scale_strategy": _on("gradient_scale_strategy",
                                   BuildStrategy.GradientScaleStrategy.One, CHANGES, where=DP),
    "enable_sequential_execution": _on("enable_sequential_execution", True, IR_ONLY, "mlp_bn",
                                       BOTH),
    "fuse_elewise_add_act_ops": _on("fuse_elewise_add_act_ops", True, IR_ONLY, where=BOTH),
    # on by default: the claim compares it off against on
    # -- hlo28: a short rolled stack compiles unrolled (no loop), its state stacked
    "roll_repeated_layers": Claim(CHANGES, "deep_mlp", {"roll_repeated_layers": False},
                                  {"roll_repeated_layers": True}, (("sgd", 1),),
                                  _stacked_state),
    # -- issue 28 (on by default: off against on; the slots' scatters become one)
    "fuse_embedding_seq_pool": Claim(CHANGES, "ctr", {"fuse_embedding_seq_pool": False},
                                     {"fuse_embedding_seq_pool": True}, (("sgd", 1),),
                                     lambda off, on: on["opcodes"].get("scatter", 0)
                                     < off["opcodes"].get("scatter", 0)),
    "fuse_bn_act_ops": _on("fuse_bn_act_ops", True, IR_ONLY, "mlp_bn", BOTH),
    "fuse_relu_depthwise_conv": _on("fuse_relu_depthwise_conv", True, IR_ONLY, "depthwise"),
    "fuse_broadcast_ops": Claim(CHANGES, "mlp", REDUCE, {**REDUCE, "fuse_broadcast_ops": True},
                                DP, _fewer_all_gathers),
    "fuse_all_optimizer_ops": _on("fuse_all_optimizer_ops", True, IR_ONLY,
                                  where=(("momentum", 1), ("adam", 1), ("adam", 4))),
    "fuse_all_reduce_ops": _on("fuse_all_reduce_ops", True, CHANGES, where=DP,
                               check=_operands("all-reduce", more=False)),
    "enable_inplace": _on("enable_inplace", True, IR_ONLY, "mlp_bn", BOTH),
    "memory_optimize": _on("memory_optimize", True, IR_ONLY, "mlp_bn"),
    "enable_backward_optimizer_op_deps": Claim(
        IR_ONLY, "mlp", {"enable_backward_optimizer_op_deps": False},
        {"enable_backward_optimizer_op_deps": True}, DP),
    "enable_auto_fusion": _on("enable_auto_fusion"),
    "cache_runtime_context": _on("cache_runtime_context"),
    "sync_batch_norm": _on("sync_batch_norm", True, CHANGES, "mlp_bn", DP, _more_all_reduces),
    "fuse_grad_size_in_MB": Claim(CHANGES, "mlp", FUSED_AR,
                                  {**FUSED_AR, "fuse_grad_size_in_MB": 1e-4}, DP,
                                  _operands("all-reduce", more=True)),
    "fuse_grad_size_in_TFLOPS": Claim(CHANGES, "mlp", FUSED_AR,
                                      {**FUSED_AR, "fuse_grad_size_in_TFLOPS": 1.0}, DP,
                                      _operands("all-reduce", more=True)),
    "use_hierarchical_allreduce": Claim(CHANGES, "mlp", {},
                                        {**HIER, "hierarchical_allreduce_inter_nranks": 2}, DP),
    # 2 forms groups; 8 on 4 devices forms none: the pass declines (a flat all-reduce)
    "hierarchical_allreduce_inter_nranks": Claim(
        CHANGES, "mlp", {**HIER, "hierarchical_allreduce_inter_nranks": 8},
        {**HIER, "hierarchical_allreduce_inter_nranks": 2}, DP),
    "num_trainers": _on("num_trainers", 2),
    "trainer_id": _on("trainer_id", 1),
    "debug_graphviz_path": _on("debug_graphviz_path", "g.dot"),
    "remove_unnecessary_lock": _on("remove_unnecessary_lock", False),
    "nccl_comm_num": _on("nccl_comm_num", 2, where=DP),
    "trainers_endpoints": _on("trainers_endpoints", ["127.0.0.1:6170"]),
    "is_distribution": _on("is_distribution"),
    "async_mode": _on("async_mode"),
    "mkldnn_enabled_op_types": _on("mkldnn_enabled_op_types", ["conv2d"]),
    "verify_each_pass": Claim(NONE, "mlp_bn", {"fuse_bn_act_ops": True},
                              {"fuse_bn_act_ops": True, "verify_each_pass": True}),
    "amp": _on("amp", True, CHANGES, where=BOTH, check=_low_precision),
    "amp_configs": Claim(CHANGES, "mlp", {"amp": True},
                         {"amp": True, "amp_configs": AmpConfigs(custom_black_list=["mul"])}),
    # -- ExecutionStrategy --------------------------------------------------------------
    "num_threads": _on("exec.num_threads", 4),
    "num_iteration_per_drop_scope": _on("exec.num_iteration_per_drop_scope", 1),
    "num_iteration_per_run": _on("exec.num_iteration_per_run", 2, CHANGES, check=_while_loops),
    "use_thread_barrier": _on("exec.use_thread_barrier"),
    "allow_op_delay": _on("exec.allow_op_delay"),
    "use_cuda": _on("exec.use_cuda", False),
    "use_experimental_executor": _on("exec.use_experimental_executor", False),
    "dry_run": _on("exec.dry_run"),
}
# IR-only fields whose IR rewrite does not even reach JAX: graphc hands XLA the very same
# StableHLO (locations aside), e.g. a fused op's rule applies the unfused ops' rules. The
# other IR-only fields change the StableHLO and XLA's optimisations undo the difference.
SAME_STABLEHLO = {"enable_sequential_execution", "fuse_elewise_add_act_ops", "fuse_bn_act_ops",
                  "fuse_all_optimizer_ops", "enable_inplace", "memory_optimize",
                  "enable_backward_optimizer_op_deps"}
BUILD_FIELDS = set(BuildStrategy.model_fields)
EXEC_FIELDS = set(ExecutionStrategy.model_fields)
BATCH = 8


# -- models: tiny, so that XLA compiles each in well under a second -----------------------
def _optimizer(name: str):
    return {"sgd": lambda: optimizer.SGD(0.1), "momentum": lambda: optimizer.Momentum(0.1, 0.9),
            "adam": lambda: optimizer.Adam(0.01)}[name]()


def _depthwise() -> models.Model:
    main, startup = graphc.Program(), graphc.Program()
    with graphc.program_guard(main, startup), graphc.unique_name.guard():
        image = layers.data("image", [-1, 2, 6, 6], "float32")
        label = layers.data("label", [-1, 1], "int64")
        h = layers.conv2d(image, 4, 3, padding=1, act="relu", bias_attr=False)
        h = layers.conv2d(h, 4, 3, padding=1, groups=4, bias_attr=False)  # depthwise
        loss = layers.mean(layers.softmax_with_cross_entropy(layers.fc(h, 4), label))
    return models.Model(main, startup, [image, label], loss)


MODELS = {
    "mlp": lambda: models.mlp(16, (8, 8), 4, batch_norm=False),
    "mlp_bn": lambda: models.mlp(16, (8, 8), 4, batch_norm=True),
    "deep_mlp": lambda: models.mlp(16, (8,) * 6, 4, batch_norm=False),
    "depthwise": _depthwise,
    "ctr": lambda: models.ctr_dnn(3, 20, 4, (8,)),  # issue 28: LoD slots of one table
}


def _feed(model: models.Model) -> dict:
    rng = np.random.default_rng(0)
    out = {}
    for var in model.feeds:
        if var.lod_level:  # issue 28: one sequence of 1-3 ids per sample
            lens = rng.integers(1, 4, BATCH).tolist()
            out[var.name] = graphc.fluid.create_lod_tensor(
                rng.integers(0, 4, (sum(lens), 1)), [lens], None)
            continue
        shape = [BATCH if d < 0 else d for d in var.shape]
        out[var.name] = (rng.integers(0, 4, shape) if var.dtype == "int64"
                         else rng.standard_normal(shape)).astype(var.dtype)
    return out


_COMPILED: dict[tuple, dict] = {}  # shared by every case: one compilation per configuration


def compiled(model_name: str, opt: str, devices: int, options: dict) -> dict:
    """IR text, optimised HLO text, its summary and the pipeline report of one configuration."""
    key = (model_name, opt, devices, repr(sorted(options.items())))
    if key in _COMPILED:
        return _COMPILED[key]
    model = MODELS[model_name]()
    with graphc.program_guard(model.main, model.startup), graphc.unique_name.guard():
        _optimizer(opt).minimize(model.loss)
    build = {k: v for k, v in options.items() if not k.startswith("exec.")}
    execution = {k[5:]: v for k, v in options.items() if k.startswith("exec.")}
    cp = graphc.CompiledProgram(model.main, build_strategy=BuildStrategy(**build),
                                exec_strategy=ExecutionStrategy(**execution))
    if devices > 1:
        cp = cp.with_data_parallel(loss_name=model.loss.name, places=graphc.cpu_places(devices))
    feed = _feed(model)
    iterations = execution.get("num_iteration_per_run", 1)
    if iterations > 1:
        feed = [feed] * iterations
    step = graphc.Executor().compile(cp, feed=feed, fetch_list=[model.loss])
    text = step.compiled_text()
    summary = hlo_text.summary(text)
    summary["types"] = set(re.findall(r"\b(bf16|f16|f32|f64)\[", hlo_text.normalize(text)))
    _COMPILED[key] = {"ir": print_graph(step.graph), "hlo": text, "summary": summary,
                      "stablehlo": hlo_text.strip_locations(step.lowered_text()),
                      "report": cp.last_report, "fingerprint": hlo_text.fingerprint(text)}
    return _COMPILED[key]


def _acted(off: dict, on: dict) -> bool:
    """Whether the IR differs, or a pass that only ``on`` runs did something (the in-place
    and memory plans annotate the graph without rewriting it)."""
    ran_off = {p.name for p in off["report"].passes}
    return off["ir"] != on["ir"] or any(
        p.changed or any(not k.startswith("skipped") for k in p.stats)
        for p in on["report"].passes if p.name not in ran_off)


CASES = [(f, opt, n) for f, claim in sorted(XLA_EFFECT.items()) for opt, n in claim.where]


@pytest.mark.parametrize("field,opt,devices", CASES, ids=[f"{f}-{o}-{n}" for f, o, n in CASES])
def test_claim_holds(field, opt, devices):
    claim = XLA_EFFECT[field]
    off = compiled(claim.model, opt, devices, claim.off)
    on = compiled(claim.model, opt, devices, claim.on)
    same_hlo = off["fingerprint"] == on["fingerprint"]
    if claim.effect == CHANGES:
        assert not same_hlo, f"{field}: documented to change XLA's program, but it is the same"
        if claim.check is not None:
            assert claim.check(off["summary"], on["summary"]), (
                f"{field}: not the expected change\n{hlo_text.hlo_diff(off['hlo'], on['hlo'])}")
        return
    assert same_hlo, (f"{field}: documented to leave XLA's program alone, but\n"
                      f"{hlo_text.hlo_diff(off['hlo'], on['hlo'])}")
    if claim.effect == IR_ONLY:
        assert _acted(off, on), f"{field}: no pass changed the IR, so this case shows nothing"
        same_input = off["stablehlo"] == on["stablehlo"]
        assert same_input == (field in SAME_STABLEHLO), (
            f"{field}: the StableHLO given to XLA is {'the same' if same_input else 'different'}"
            f", but SAME_STABLEHLO (and docs/strategies.md) say otherwise")
    else:
        assert not _acted(off, on), f"{field}: documented as no effect, but the IR changed"


@pytest.mark.parametrize("inter", [0, 1, 3, 4, 8])
def test_hierarchical_allreduce_declines_to_the_flat_program(inter):
    """0, 1, nranks or more, or a k not dividing nranks: the pass declines and XLA runs the
    very program of a flat all-reduce; the report says why."""
    flat = compiled("mlp", "momentum", 4, {})
    hier = compiled("mlp", "momentum", 4, {**HIER, "hierarchical_allreduce_inter_nranks": inter})
    assert hier["fingerprint"] == flat["fingerprint"]
    reasons = hier["report"].stats()["hierarchical-allreduce"]
    assert reasons and all(k.startswith("skipped: ") for k in reasons), reasons


def test_state_is_donated_with_or_without_enable_inplace():
    """XLA aliases every updated state buffer to its output either way: enable_inplace and
    memory_optimize plan the IR's buffers, they do not decide donation."""
    off = compiled("mlp_bn", "momentum", 1, {})["summary"]
    on = compiled("mlp_bn", "momentum", 1, {"enable_inplace": True})["summary"]
    # 3 fc weights + 3 biases, 2 x batch_norm's (scale, bias, mean, variance), and a
    # velocity for each of the 10 trainable parameters
    assert off["aliased_outputs"] == on["aliased_outputs"] == 6 + 8 + 10


def test_table_covers_every_field():
    assert set(XLA_EFFECT) == BUILD_FIELDS | EXEC_FIELDS


def _documented_claims(section: str) -> dict[str, str]:
    text = DOC.read_text()
    body = re.search(rf"^## {section}\n(.*?)(?=^## |\Z)", text, re.S | re.M).group(1)
    return {m.group(1): m.group(2).strip().strip("*")
            for m in re.finditer(r"^\| `(\w+)` \| [^|]* \| ([^|]+) \|", body, re.M)}


@pytest.mark.parametrize("section,fields", [("BuildStrategy", BUILD_FIELDS),
                                            ("ExecutionStrategy", EXEC_FIELDS)])
def test_docs_state_the_tested_claims(section, fields):
    documented = _documented_claims(section)
    wrong = {f: (documented.get(f), XLA_EFFECT[f].effect) for f in fields
             if documented.get(f) != XLA_EFFECT[f].effect}
    assert not wrong, f"docs/strategies.md '## {section}' effect column (doc, tested): {wrong}"


def test_normalised_text_ignores_names_and_metadata():
    text = compiled("mlp", "momentum", 1, {})["hlo"]
    def rename(name: str) -> str:
        return "x_" + name[::-1]

    # instruction and computation references, and the parameter names computations declare
    renamed = re.sub(r"%([\w.\-]+)", lambda m: "%" + rename(m.group(1)), text)
    renamed = "\n".join(re.sub(r"([\w.\-]+)(?=: )", lambda m: rename(m.group(1)), line)
                        if " -> " in line and line.endswith("{") else line
                        for line in renamed.splitlines())
    renamed = renamed.replace('op_name="', 'op_name="other/')
    assert hlo_text.normalize(renamed) == hlo_text.normalize(text)
    assert hlo_text.same_hlo(renamed, text)
    # a real change (a different constant) is seen
    changed = text.replace("constant(0.9)", "constant(0.8)", 1)
    assert "constant(0.9)" in text and not hlo_text.same_hlo(changed, text)


_SMALL = """HloModule jit_f, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

%fused_computation.7 (param_0.1: f32[4]) -> f32[4] {
  %param_0.1 = f32[4]{0} parameter(0)
  ROOT %negate.2 = f32[4]{0} negate(%param_0.1), metadata={op_name="jit(f)/neg"}
}

ENTRY %main.9 (x.1: f32[4]) -> f32[4] {
  %x.1 = f32[4]{0} parameter(0)
  %exp.3 = f32[4]{0} exponential(%x.1), metadata={op_name="jit(f)/exp" stack_frame_id=3}
  %neg_fusion = f32[4]{0} fusion(%x.1), kind=kLoop, calls=%fused_computation.7
  ROOT %add.5 = f32[4]{0} add(%exp.3, %neg_fusion)
}
"""


def test_fingerprint_ignores_the_order_of_independent_instructions():
    lines = _SMALL.splitlines()
    i = next(n for n, line in enumerate(lines) if "exp.3 =" in line)
    lines[i], lines[i + 1] = lines[i + 1], lines[i]
    swapped = "\n".join(lines)
    assert hlo_text.same_hlo(swapped, _SMALL)
    assert hlo_text.normalize(swapped) != hlo_text.normalize(_SMALL)  # the order is kept
    assert "metadata" not in hlo_text.normalize(_SMALL) and "{0}" not in hlo_text.normalize(
        _SMALL)
    other_operand = _SMALL.replace("add(%exp.3, %neg_fusion)", "add(%exp.3, %x.1)")
    assert not hlo_text.same_hlo(other_operand, _SMALL)
    s = hlo_text.summary(_SMALL)
    assert (s["fusions"], s["computations"], s["opcodes"]["negate"]) == (1, 2, 1)
    assert s["unfused_opcodes"] == {"add": 1, "exponential": 1, "fusion": 1, "parameter": 1}


def test_summary_counts_and_buffer_sizes():
    model = MODELS["mlp"]()
    with graphc.program_guard(model.main, model.startup), graphc.unique_name.guard():
        _optimizer("momentum").minimize(model.loss)
    step = graphc.Executor().compile(graphc.CompiledProgram(model.main), feed=_feed(model),
                                     fetch_list=[model.loss])
    s = hlo_text.compiled_summary(step)
    assert s["fusions"] == s["opcodes"]["fusion"] > 0
    assert s["opcodes"]["dot"] >= 3  # three fc layers' forward matmuls at least
    # weights (16x8, 8x8, 8x4) + biases + their velocities, all float32 and donated
    params = (16 * 8 + 8 + 8 * 8 + 8 + 8 * 4 + 4) * 4
    assert s["bytes"]["argument"] >= 2 * params and s["bytes"]["alias"] >= 2 * params
    assert s["aliased_outputs"] == 12

"""The `graphc` command: `graphc demo`, `graphc passes`, `graphc compile`, `graphc
explain-buckets`, `graphc launch` (several processes), `graphc fleetrun` (fleetrun's flags).

Errors print as one line and exit non-zero; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from ..ir.errors import GraphcError

MODEL_EPILOG = """\
MODEL.py convention (graphc compile / explain-buckets):
  the file defines build() returning (main_program, startup_program, loss), the training
  program built with graphc's layers and optimizer.minimize(loss); loss is the loss Variable
  (or its name). Optionally feed(batch_size) returning {name: numpy array}, used where a
  step is compiled (explain-buckets --hlo). Example: examples/mlp_model.py

--strategy takes a preset name from strategies/ (default, debug, fast-single-device,
cpu-reduce, inference, collective-resnet50) or a path to a .toml file.
"""


class CliError(GraphcError):
    """A command-line argument or model file is unusable."""


def _load_model(path: str):
    """Import MODEL.py and call its build(): (main, startup, loss, module)."""
    file = Path(path)
    if not file.is_file():
        raise CliError(f"model file '{path}' does not exist")
    spec = importlib.util.spec_from_file_location(f"graphc_model_{file.stem}", file)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(file.resolve().parent))  # the model may import its neighbours
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(file.resolve().parent))
    build = getattr(module, "build", None)
    if not callable(build):
        raise CliError(f"{path} defines no build() function; it must define build() "
                       "returning (main_program, startup_program, loss) (see graphc --help)")
    result = build()
    if not (isinstance(result, tuple) and len(result) == 3):
        raise CliError(f"{path}: build() must return (main_program, startup_program, loss), "
                       f"got {type(result).__name__}")
    main, startup, loss = result
    from ..ir.program import Program
    if not isinstance(main, Program) or not isinstance(startup, Program):
        raise CliError(f"{path}: build() must return graphc Programs as its first two items")
    loss_name = getattr(loss, "name", loss)
    if not isinstance(loss_name, str) or not main.global_block().has_var(loss_name):
        raise CliError(f"{path}: build()'s loss {loss!r} is not a variable of the main program")
    return main, startup, loss_name, module


def _set_devices(n: int | None) -> None:
    """Give JAX's CPU backend ``n`` devices; must run before anything touches JAX devices."""
    if n is None:
        return
    if n < 1:
        raise CliError(f"--devices must be >= 1, got {n}")
    from ..runtime.devices import DeviceError, configure_cpu_devices
    try:
        configure_cpu_devices(n)
    except DeviceError:
        # JAX already started (graphc.cli.main called in a process that ran something):
        # the first n devices do, if there are that many
        import jax
        if len(jax.devices("cpu")) < n:
            raise
        return
    os.environ["CPU_NUM"] = str(n)  # for anything the model starts (it reads CPU_NUM)


def _compile(args) -> int:
    """Lower MODEL.py's program and run the strategy's pass pipeline on it, with
    instrumentation; print what the pipeline did."""
    _set_devices(args.devices)
    from ..backends.interpreter import resolve_fetch
    from ..ir.graph import lower
    from ..passes import pipeline_for
    from .presets import load_preset
    preset = load_preset(args.strategy)
    main, _, loss_name, _ = _load_model(args.model)
    num_devices = args.devices or 1
    graph = lower(main).verify()
    before = graph.num_ops
    manager = pipeline_for(preset.build_strategy, preset.execution_strategy, num_devices,
                           loss_name=loss_name, stream=sys.stdout,
                           print_ir_after="all" if args.print_ir_after_all else None,
                           print_after_change=args.print_ir_after_change,
                           dump_dir=args.dump_dir, show_source=args.source)
    report = manager.run(graph, keep=[resolve_fetch(graph, loss_name)],
                         num_devices=num_devices)
    print(f"strategy: {preset.name} ({preset.kind} preset, {preset.path})")
    print(f"pipeline: {manager}")
    print(f"ops: {before} -> {graph.num_ops} ({num_devices} device"
          f"{'s' if num_devices > 1 else ''}); changed by: "
          f"{', '.join(p.spec for p in report.passes if p.changed) or 'none'}")
    if args.dump_dir:
        print(f"IR dumps: {args.dump_dir}/00-input.ir ... "
              f"{len(report.passes):02d}-{report.passes[-1].name if report.passes else ''}.ir")
    if args.timing:
        print(report.table())
    return 0


def _explain_buckets(args) -> int:
    """Print the gradient buckets MODEL.py's program exchanges on --devices CPU devices."""
    _set_devices(args.devices)
    from ..runtime.compiled_program import CompiledProgram
    from ..runtime.devices import cpu_places
    from .presets import load_preset
    preset = load_preset(args.strategy)
    main, startup, loss_name, module = _load_model(args.model)
    compiled = CompiledProgram(main, build_strategy=preset.build_strategy).with_data_parallel(
        loss_name=loss_name, exec_strategy=preset.execution_strategy,
        places=cpu_places(args.devices))
    bs = preset.build_strategy
    print(f"strategy: {preset.name}; {compiled.num_devices} devices; "
          f"reduce_strategy={bs.reduce_strategy.name}, fuse_all_reduce_ops="
          f"{bs.fuse_all_reduce_ops}, fuse_grad_size_in_MB={bs.fuse_grad_size_in_MB:g}, "
          f"fuse_grad_size_in_TFLOPS={bs.fuse_grad_size_in_TFLOPS:g} (layers per bucket)")
    print(compiled.bucket_plan([loss_name]).table())
    if args.hlo:
        feed = getattr(module, "feed", None)
        if not callable(feed):
            raise CliError(f"--hlo compiles the step and needs {args.model} to define "
                           "feed(batch_size)")
        from ..runtime.executor import Executor
        from ..runtime.scope import Scope, scope_guard
        with scope_guard(Scope()):
            exe = Executor()
            exe.run(startup)
            step = exe.compile(compiled, feed=feed(8 * compiled.num_devices),
                               fetch_list=[loss_name])
            text = step.lowered_text()
        print(f"collectives in the lowered step: "
              f"{text.count('stablehlo.all_reduce')} stablehlo.all_reduce, "
              f"{text.count('stablehlo.reduce_scatter')} stablehlo.reduce_scatter, "
              f"{text.count('stablehlo.all_gather')} stablehlo.all_gather")
    return 0


def _demo(args) -> int:
    """Print the demo CNN's IR and op statistics, then train it on the bundled digits."""
    from ..ir.graph import lower
    from .models import demo_cnn

    model = demo_cnn(image_shape=(1, 8, 8), data_layout=args.layout)
    graph = lower(model.main).verify()
    if args.ir:
        print("# The demo CNN (conv + batch_norm + relu + pool, twice; fc; softmax cross-entropy)")
        print("# in graphc's SSA IR. Parameters are graph inputs; the moving statistics that")
        print("# batch_norm updates come back as new versions (#1) in the outputs.\n")
        print(graph.to_text(show_source=args.source))
    print("op statistics (forward program):")
    for op_type, n in graph.stats().items():
        print(f"  {op_type:<28}{n:>5}")
    params = model.main.all_parameters()
    print(f"{graph.num_ops} ops, {len(params)} parameters "
          f"({sum(p.type.numel() for p in params):,} weights)\n")
    if args.epochs == 0:
        return 0
    from .demo import train_demo
    print(f"training on scikit-learn's 8x8 digits for {args.epochs} epochs "
          "(Momentum 0.9, lr 0.05, batch 64)")
    result = train_demo(epochs=args.epochs, progress=not args.no_progress)
    print(f"test accuracy {result.test_accuracy:.4f} after {result.steps} steps "
          f"({result.seconds:.1f} s, {result.steps / result.seconds:.0f} steps/s)")
    return 0


def _passes(args) -> int:
    """List the registered passes with one-line descriptions and their options."""
    from ..passes import ORDER, all_passes
    fields = {name: field for field, name in ORDER if field}
    for name, cls in all_passes().items():
        options = ", ".join(f"{k}={f.default!r}" for k, f in cls.model_fields.items())
        strategy = f"  [BuildStrategy.{fields[name]}]" if name in fields else ""
        print(f"{name:<28}{cls.summary()}{strategy}")
        if options:
            print(f"{'':<28}options: {options}")
    return 0


def _launch(args) -> int:
    """Run a training script on several processes/nodes (mpirun), like Paddle's fleetrun."""
    from ..distributed.launch import launch
    return launch(args)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    at = 1 if argv[:1] == ["--debug"] else 0
    if argv[at:at + 1] == ["fleetrun"]:  # fleetrun's own flags, parsed (and refused) there
        from ..distributed.fleetrun import main as fleetrun_main
        return fleetrun_main(argv[at + 1:])
    parser = argparse.ArgumentParser(
        prog="graphc", description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=MODEL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train the demo CNN on the bundled digits dataset")
    demo.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW")
    demo.add_argument("--ir", action="store_true", help="print the model's IR first")
    demo.add_argument("--source", action="store_true", help="with --ir: show source lines")
    demo.add_argument("--epochs", type=int, default=8, help="0: build and inspect only")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.set_defaults(run=_demo)
    passes = sub.add_parser("passes", help="list the graph passes")
    passes.set_defaults(run=_passes)
    compile_ = sub.add_parser("compile", help="run a strategy's pass pipeline on MODEL.py's "
                              "program and show what it did", epilog=MODEL_EPILOG,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    compile_.add_argument("model", metavar="MODEL.py")
    compile_.add_argument("--strategy", default="default", metavar="NAME|PATH",
                          help="preset name (strategies/NAME.toml) or .toml path")
    show = compile_.add_mutually_exclusive_group()
    show.add_argument("--print-ir-after-all", action="store_true",
                      help="print the IR after every pass")
    show.add_argument("--print-ir-after-change", action="store_true",
                      help="print the IR after each pass that changed it")
    show.add_argument("--dump-dir", metavar="D",
                      help="write numbered IR files (00-input.ir, 01-<pass>.ir, ...) to D")
    compile_.add_argument("--timing", action="store_true",
                          help="per-pass timing and statistics table")
    compile_.add_argument("--source", action="store_true", help="show source lines in IR")
    compile_.add_argument("--devices", type=int, default=None, metavar="N",
                          help="compile data-parallel for N CPU devices")
    compile_.set_defaults(run=_compile)
    buckets = sub.add_parser("explain-buckets", help="print the gradient buckets MODEL.py's "
                             "program exchanges when data-parallel", epilog=MODEL_EPILOG,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    buckets.add_argument("model", metavar="MODEL.py")
    buckets.add_argument("--strategy", default="default", metavar="NAME|PATH")
    buckets.add_argument("--devices", type=int, default=4, metavar="N",
                         help="number of CPU devices (sets CPU_NUM; default 4)")
    buckets.add_argument("--hlo", action="store_true", help="also compile the step and count "
                         "the collectives in its StableHLO (needs feed() in MODEL.py)")
    buckets.set_defaults(run=_explain_buckets)
    from ..distributed.launch import add_arguments
    launch = sub.add_parser("launch", help="run a training script on several processes "
                            "(mpirun), like fleetrun")
    add_arguments(launch)
    launch.set_defaults(run=_launch)
    # listed for --help only: main() hands `graphc fleetrun ...` to fleetrun.main first
    sub.add_parser("fleetrun", add_help=False, help="Paddle's fleetrun flags (--server_num, "
                   "--workers, --ips, ...), run as graphc launch")
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (GraphcError, OSError, ImportError, SyntaxError, ValueError, TypeError,
            AttributeError, KeyError) as exc:
        # a user's model file can raise anything ordinary; graphc's own errors are typed
        if args.debug:
            raise
        first = (str(exc).splitlines() or [""])[0]
        print(f"graphc: error: {type(exc).__name__}: {first}"
              + ("" if isinstance(exc, GraphcError) else " (--debug for the traceback)"),
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The `graphc` command: `graphc demo`, `graphc passes`, `graphc launch` (several processes).

Errors print as one line and exit non-zero; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys

from .ir.errors import GraphcError


def _demo(args) -> int:
    """Print the demo CNN's IR and op statistics, then train it on the bundled digits."""
    from .ir.graph import lower
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
    from .passes import ORDER, all_passes
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
    from .distributed.launch import launch
    return launch(args)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="graphc", description=__doc__.splitlines()[0])
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
    from .distributed.launch import add_arguments
    launch = sub.add_parser("launch", help="run a training script on several processes "
                            "(mpirun), like fleetrun")
    add_arguments(launch)
    launch.set_defaults(run=_launch)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except GraphcError as exc:
        if args.debug:
            raise
        first = str(exc).splitlines()[0]
        print(f"graphc: error: {type(exc).__name__}: {first}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""The `graphc` command: `graphc demo` today; compile, passes and launch in later issues.

Errors print as one line and exit non-zero; `--debug` shows the traceback.
"""

from __future__ import annotations

import argparse
import sys
import time

from .ir.errors import GraphcError


def _demo(args) -> int:
    from .ir.graph import lower
    from .models import demo_cnn

    t0 = time.perf_counter()
    model = demo_cnn(data_layout=args.layout)
    graph = lower(model.main)
    graph.verify()
    startup = lower(model.startup).verify()
    elapsed = time.perf_counter() - t0
    print("# The demo CNN (conv + batch_norm + relu + pool, twice; fc; softmax cross-entropy)")
    print("# lowered to graphc's SSA IR. Parameters are graph inputs; the moving statistics")
    print("# batch_norm updates come back as new versions (#1) in the outputs.\n")
    print(graph.to_text(show_source=args.source))
    print("# startup program (parameter initialisers)\n")
    print(startup.to_text())
    print("op statistics (main program):")
    for op_type, n in graph.stats().items():
        print(f"  {op_type:<28}{n:>5}")
    params = model.main.all_parameters()
    n_weights = sum(p.type.numel() for p in params)
    print(f"\n{graph.num_ops} ops, {len(graph.values)} values, {len(params)} parameters "
          f"({n_weights:,} weights); built, lowered and verified in {elapsed * 1e3:.1f} ms")
    print("(Training arrives with the JAX backend; see README.)")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="graphc", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build the demo CNN and print its IR and op statistics")
    demo.add_argument("--layout", choices=("NCHW", "NHWC"), default="NCHW")
    demo.add_argument("--source", action="store_true", help="show each op's source line")
    demo.set_defaults(run=_demo)
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

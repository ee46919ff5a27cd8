"""``import graphc.fluid`` leaves out what building a program does not need (issue 28: a cold
process reaches its first step sooner); each lazily loaded module still loads on first use."""

import subprocess
import sys
import textwrap

# modules graphc loads on first use only: networkx with the first lowered graph, protobuf with
# Paddle's file formats (ProgramDesc, tensor streams, a DistributedStrategy's prototxt)
LAZY = ("networkx", "google.protobuf", "graphc.distributed.strategy_proto")

_SCRIPT = textwrap.dedent("""
    import sys
    import graphc.fluid as fluid
    lazy = {lazy!r}
    print("AFTER_IMPORT", sorted(m for m in lazy if m in sys.modules))
    main, start = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, start):
        x = fluid.data("x", [-1, 3], "float32")
        y = fluid.layers.fc(x, 2)
    print("AFTER_BUILD", sorted(m for m in lazy if m in sys.modules))
    desc = main.desc.serialize_to_string()  # a ProgramDesc: protobuf loads now
    back = fluid.Program.parse_from_string(desc)
    print("ROUNDTRIP", [op.type for op in back.global_block().ops])
    import graphc
    graphc.lower(main)
    print("AFTER_LOWER", sorted(m for m in lazy if m in sys.modules))
""")


def _run() -> dict[str, str]:
    out = subprocess.run([sys.executable, "-c", _SCRIPT.format(lazy=LAZY)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def test_import_and_build_leave_lazy_modules_out_and_first_use_loads_them():
    got = _run()
    assert got["AFTER_IMPORT"] == "[]", got["AFTER_IMPORT"]
    assert got["AFTER_BUILD"] == "[]", got["AFTER_BUILD"]
    assert got["ROUNDTRIP"] == "['mul', 'elementwise_add']", got["ROUNDTRIP"]
    after = got["AFTER_LOWER"]
    for name in ("networkx", "google.protobuf"):
        assert repr(name) in after, (name, after)

"""The notebooks in notebooks/ run from top to bottom in a fresh kernel (nbclient), with no
error output, and their key cells show what the text around them promises."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# notebook -> texts its outputs must contain (in any cell)
EXPECTED = {
    "01_compile_and_run.ipynb": [
        "graph @main {", "= batch_norm(", "training: 100%", "92/92", "test accuracy",
        "image/png",
    ],
    "02_debugging_a_pass.ipynb": [
        "// ----- IR after fuse-elewise-add-act -----", "--- before fuse-elewise-add-act",
        "+++ after fuse-elewise-add-act", "= fused_elemwise_activation(",
        "after fuse-elewise-add-act: 23 ops", "* fused_elemwise_activation ",
        'subgraph "cluster_fc_0"', "statistics", "(verify)",
        "skipped: intermediate has 2 users: 1", "pass 'break-mul' (pass 3 of 4",
        "left a graph that does not verify", "// graphc reproducer: run `break-mul`",
        "reproduced: pass 'break-mul'",
    ],
    "03_data_parallel_and_bucketing.ipynb": [
        "devices: [CPUPlace(), CPUPlace(1), CPUPlace(2), CPUPlace(3)]",
        "c_fused_allreduce", "4 buckets, 10 tensors", "stablehlo.all_reduce",
        "off                   10                    10", "Reduce keeps", "image/png",
    ],
    "04_writing_and_testing_a_pass.ipynb": [
        "+  %scale_1.tmp_0: f32[-1,4] = scale(X=%x) {scale=6.0, bias=3.5}",
        "fold-scale passed 60 random programs", "hypothesis found, and shrank",
        "steps=['scale', 'scale']", "Not equal to tolerance",
    ],
}


def test_every_notebook_is_checked():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(EXPECTED)


def _outputs_text(nb) -> str:
    parts = []
    for cell in nb.cells:
        stream = False
        for out in cell.get("outputs", []):
            if out.output_type == "stream":
                # one print can arrive as several stream messages (the kernel flushes when it
                # likes, more often under load): glue them back as the notebook shows them
                if stream:
                    parts[-1] += out.text
                else:
                    parts.append(out.text)
                stream = True
                continue
            stream = False
            if out.output_type in ("execute_result", "display_data"):
                parts.extend(out.get("data", {}).keys())
                parts.append(str(out.get("data", {}).get("text/plain", "")))
                parts.append(str(out.get("data", {}).get("image/svg+xml", "")))
    return "\n".join(parts)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_notebook_runs_cleanly(name, tmp_path):
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=180, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()  # raises CellExecutionError naming the cell on any error
    errors = [out for cell in nb.cells for out in cell.get("outputs", [])
              if out.output_type == "error"]
    assert not errors, errors
    text = _outputs_text(nb)
    missing = [t for t in EXPECTED[name] if t not in text]
    assert not missing, f"{name}: outputs lack {missing}; its outputs end:\n{text[-4000:]}"
    assert "Traceback" not in text

"""fluid.incubate.data_generator writes Paddle's MultiSlot text protocol; a Dataset pipes each
file through the user's generator command (set_pipe_command) with per-thread readers and
trains a CTR-like program; failing, hanging and early-stopped commands leave no process
behind; DataFeedDesc and the rest of fluid.dataset's InMemoryDataset/QueueDataset surface."""

from __future__ import annotations

import io
import os
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import graphc
import graphc.fluid as fluid
import graphc.fluid.incubate.data_generator as dg
from graphc.dataio.multislot import DatasetError

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.timeout(240)


# -- the generator classes ---------------------------------------------------------------------

class Words(dg.MultiSlotDataGenerator):
    def generate_sample(self, line):
        def local_iter():
            if line is None:  # run_from_memory
                yield [("words", [1, 2, 3]), ("label", [1])]
                return
            values = line.split()
            if values:
                yield [("words", [int(v) for v in values[1:]]), ("label", [int(values[0])])]
        return local_iter


def _run(gen, text, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    gen.run_from_stdin()
    return out.getvalue()


def test_multislot_generator_writes_paddles_protocol(monkeypatch):
    assert _run(Words(), "1 7 8 9\n0 5\n\n", monkeypatch) == "3 7 8 9 1 1\n1 5 1 0\n"
    gen = Words()
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    gen.run_from_memory()
    assert out.getvalue() == "3 1 2 3 1 1\n"
    assert gen._proto_info == [("words", "uint64"), ("label", "uint64")]
    assert gen._gen_str([("words", [1, 0.5]), ("label", [np.int64(2)])]) == "2 1 0.5 1 2\n"
    assert gen._proto_info[0] == ("words", "float")
    strings = dg.MultiSlotStringDataGenerator()
    assert strings._gen_str([("a", ["x1", "7"]), ("b", ["1"])]) == "2 x1 7 1 1\n"


def test_set_batch_hands_generate_batch_whole_batches(monkeypatch):
    class Padded(Words):
        def generate_batch(self, samples):
            width = max(len(s[0][1]) for s in samples)

            def local_iter():
                for (name, words), label in samples:
                    yield [(name, words + [0] * (width - len(words))), label]
            return local_iter

    gen = Padded()
    gen.set_batch(2)
    out = _run(gen, "1 7 8 9\n0 5\n1 4\n", monkeypatch)
    assert out == "3 7 8 9 1 1\n3 5 0 0 1 0\n1 4 1 1\n"


@pytest.mark.parametrize("sample,match", [
    ("words 1", "must be a list or tuple"),
    ([("words", []), ("label", [1])], "is empty: pad it"),
    ([("words", [1, "2"]), ("label", [1])], "must be an int or a float"),
    ([("words", (1, 2)), ("label", [1])], "must be a list"),
    ([("other", [1]), ("label", [1])], "named 'other'; the first sample named it 'words'"),
    ([("words", [1])], "has 1 slots, the first had 2"),
])
def test_a_bad_sample_is_a_typed_error(sample, match):
    gen = Words()
    gen._gen_str([("words", [1]), ("label", [0])])
    with pytest.raises(dg.DataGeneratorError, match=match) as err:
        gen._gen_str(sample)
    assert isinstance(err.value, ValueError) and isinstance(err.value, graphc.GraphcError)
    with pytest.raises(NotImplementedError):
        dg.DataGenerator().generate_sample("x")


# -- a generator script as the Dataset's pipe command, feeding a CTR-like program --------------

GENERATOR = textwrap.dedent('''
    import graphc.fluid.incubate.data_generator as dg

    class CTR(dg.MultiSlotDataGenerator):
        def generate_sample(self, line):
            def reader():
                label, dense, ids = line.strip().split(";")
                yield [("dense", [float(v) for v in dense.split(",")]),
                       ("C1", [int(v) for v in ids.split(",")]),
                       ("label", [int(label)])]
            return reader

    CTR().run_from_stdin()
''')


def _raw_files(tmp_path, n_files=2, lines=48, seed=0):
    """Raw CTR logs (label;dense;ids), not MultiSlot: the generator converts them."""
    rng = np.random.default_rng(seed)
    files = []
    for f in range(n_files):
        rows = []
        for _ in range(lines):
            ids = rng.integers(0, 20, rng.integers(1, 5))
            label = int((ids < 10).mean() > 0.5)
            dense = rng.standard_normal(2).round(3)
            rows.append(f"{label};{dense[0]},{dense[1]};{','.join(map(str, ids))}")
        path = tmp_path / f"raw-{f}.log"
        path.write_text("\n".join(rows) + "\n")
        files.append(str(path))
    return files


def _command(tmp_path, source=GENERATOR):
    script = tmp_path / "ctr_generator.py"
    script.write_text(source)
    return f"PYTHONPATH={ROOT} {sys.executable} {script}"


def _ctr_program():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        dense = fluid.data("dense", [-1, 2], "float32")
        c1 = fluid.data("C1", [-1, 1], "int64", lod_level=1)
        label = fluid.data("label", [-1, 1], "int64")
        emb = fluid.layers.embedding(c1, size=[20, 8])
        pooled = fluid.layers.sequence_pool(emb, "average")
        hidden = fluid.layers.fc(fluid.layers.concat([pooled, dense], axis=1), 16, act="relu")
        predict = fluid.layers.fc(hidden, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(predict, label))
        fluid.optimizer.Adam(0.05).minimize(loss)
    return main, startup, [dense, c1, label], loss


def test_pipe_command_generator_trains_a_ctr_program(tmp_path):
    files = _raw_files(tmp_path)
    main, startup, use_vars, loss = _ctr_program()
    ds = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    assert isinstance(ds, fluid.dataset.InMemoryDataset)
    ds.set_use_var(use_vars)
    ds.set_pipe_command(_command(tmp_path))
    ds.set_filelist(files)
    ds.set_batch_size(16)
    ds.set_thread(2)  # two readers, each piping its own file
    ds.load_into_memory()
    assert ds.get_memory_data_size() == 96
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = []
    for _ in range(8):
        last = exe.train_from_dataset(main, ds, scope=scope, fetch_list=[loss],
                                      print_period=1000)
        losses.append(float(np.asarray(last[0]).reshape(())))
    assert losses[-1] < 0.6 * losses[0], losses
    # a QueueDataset pipes the files each epoch and reads the same samples in the same order
    queue = fluid.DatasetFactory().create_dataset("QueueDataset")
    queue.set_use_var(use_vars)
    queue.set_pipe_command(ds.pipe_command)
    queue.set_filelist(files)
    queue.set_batch_size(16)
    queue.set_thread(2)
    got = list(queue._batches())
    want = list(ds._batches())
    assert len(got) == len(want) == 6
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(np.asarray(a[1]), np.asarray(b[1]))
        assert a[1].recursive_sequence_lengths() == b[1].recursive_sequence_lengths()


def _gone(pid_file: Path, wait_s: float = 5.0) -> bool:
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _simple_dataset(kind, files, command, timeout=None):
    x = fluid.data("x", [-1, 1], "int64", lod_level=1)
    ds = fluid.DatasetFactory().create_dataset(kind)
    ds.set_use_var([x])
    ds.set_filelist(files)
    ds.set_pipe_command(command)
    if timeout is not None:
        ds.set_pipe_command_timeout(timeout)
    return ds


@pytest.mark.parametrize("kind", ["InMemoryDataset", "QueueDataset"])
def test_a_failing_pipe_command_names_command_and_file(tmp_path, kind):
    data = tmp_path / "part-0.txt"
    data.write_text("1 5\n")
    pid_file = tmp_path / "child.pid"
    # the shell starts a child that would outlive it, then fails
    command = (f"sleep 60 & echo $! > {pid_file}; echo 'bad record' >&2; exit 3")
    ds = _simple_dataset(kind, [str(data)], command)
    with pytest.raises(DatasetError) as err:
        if kind == "InMemoryDataset":
            ds.load_into_memory()
        else:
            list(ds._batches())
    message = str(err.value)
    assert command in message and str(data) in message
    assert "exit status 3" in message and "bad record" in message
    assert _gone(pid_file)


def test_a_failure_stops_the_other_readers_silent_commands(tmp_path):
    files = []
    for i in range(2):
        (tmp_path / f"part-{i}.txt").write_text(f"{i}\n")
        files.append(str(tmp_path / f"part-{i}.txt"))
    pid_file = tmp_path / "child.pid"
    # file 0's command fails at once; file 1's (another reader thread) prints nothing
    command = (f"read n; if [ $n = 0 ]; then exit 5; fi; echo $$ > {pid_file}; exec sleep 60")
    ds = _simple_dataset("QueueDataset", files, command)
    ds.set_thread(2)
    t0 = time.monotonic()
    with pytest.raises(DatasetError, match="exit status 5"):
        list(ds._batches())
    assert time.monotonic() - t0 < 20
    deadline = time.monotonic() + 5
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(pid_file)
    assert not [t for t in threading.enumerate() if t.name.startswith("graphc-")]


def test_a_hanging_pipe_command_times_out_and_is_killed(tmp_path):
    data = tmp_path / "part-0.txt"
    data.write_text("1 5\n")
    pid_file = tmp_path / "child.pid"
    ds = _simple_dataset("InMemoryDataset", [str(data)],
                         f"sleep 60 & echo $! > {pid_file}; wait", timeout=0.5)
    t0 = time.monotonic()
    with pytest.raises(DatasetError, match=r"still running after 0.5 s"):
        ds.load_into_memory()
    assert time.monotonic() - t0 < 10
    assert _gone(pid_file)


def test_bad_generator_output_and_an_early_stop_leave_nothing_running(tmp_path):
    data = tmp_path / "part-0.txt"
    data.write_text("x\n" * 5)
    pid_file = tmp_path / "child.pid"
    # a line whose id is 2**70 does not fit int64; the command keeps running after it
    command = (f"echo $$ > {pid_file}; echo '1 {2 ** 70}'; exec sleep 60")
    ds = _simple_dataset("QueueDataset", [str(data)], command)
    with pytest.raises(DatasetError, match=rf"part-0.txt \| .*output line 1: variable 'x': "
                                           rf"the id {2 ** 70} does not fit int64"):
        list(ds._batches())
    assert _gone(pid_file)
    # an early stop (the consumer closes the stream) stops the command too
    command = f"echo $$ > {pid_file}; while true; do echo '1 5'; done"
    ds = _simple_dataset("QueueDataset", [str(data)], command)
    batches = ds._batches()
    next(batches)
    batches.close()
    assert _gone(pid_file)


def test_a_huge_integer_in_a_multislot_line_is_a_dataset_error(tmp_path):
    data = tmp_path / "part-0.txt"
    data.write_text(f"1 {'9' * 5000}\n")
    ds = _simple_dataset("InMemoryDataset", [str(data)], "cat")
    with pytest.raises(DatasetError, match=r"part-0.txt:1: variable 'x': a value is not an "
                                           r"integer"):
        ds.load_into_memory()


# -- DataFeedDesc ------------------------------------------------------------------------------

PROTO = '''
name: "MultiSlotDataFeed"
batch_size: 2
multi_slot_desc {
    slots {
         name: "words"
         type: "uint64"
         is_dense: false
         is_used: false
     }
     slots {
         name: "label"
         type: "uint64"
         is_dense: false
         is_used: false
    }
}
'''


def test_data_feed_desc_reads_and_edits_paddles_prototxt(tmp_path):
    path = tmp_path / "data.proto"
    path.write_text(PROTO)
    desc = fluid.DataFeedDesc(str(path))
    desc.set_batch_size(128)
    desc.set_dense_slots(["words"])
    desc.set_use_slots(["words", "label"])
    text = desc.desc()
    assert "batch_size: 128" in text and 'pipe_command: "cat"' in text
    slots = desc.proto_desc.multi_slot_desc.slots
    assert [(s.name, s.is_dense, s.is_used) for s in slots] == [("words", True, True),
                                                                ("label", False, True)]
    from google.protobuf import text_format
    again = type(desc.proto_desc)()
    text_format.Parse(text, again)
    assert again == desc.proto_desc
    with pytest.raises(DatasetError, match="has no slot 'title'"):
        desc.set_use_slots(["title"])
    path.write_text("name: 'MultiSlotDataFeed'\nbatch_size: many\n")
    with pytest.raises(DatasetError, match="data.proto: not a DataFeedDesc prototxt"):
        fluid.DataFeedDesc(str(path))
    assert fluid.data_feed_desc.DataFeedDesc is fluid.DataFeedDesc


# -- the rest of fluid.dataset -----------------------------------------------------------------

def test_in_memory_dataset_settings(tmp_path):
    data = tmp_path / "part-0.txt"
    data.write_text("1 ins-1 1 page-a 2 4 5\n1 ins-2 1 page-b 1 6\n")
    ds = _simple_dataset("InMemoryDataset", [str(data)], "cat")
    ds.set_parse_ins_id(True)
    ds.set_parse_content(True)
    ds.set_queue_num(4)
    ds.set_fleet_send_batch_size(512)
    ds.set_fleet_send_sleep_seconds(1)
    ds.set_feed_type("MultiSlotInMemoryDataFeed")
    ds.set_current_phase(0)
    ds.set_batch_size(2)
    ds.preload_into_memory(thread_num=2)
    ds.wait_preload_done()
    ds.preprocess_instance()
    ds.postprocess_instance()
    assert ds.get_memory_data_size() == ds.get_pv_data_size() == 2
    (batch,) = list(ds._batches())
    assert np.asarray(batch[0]).ravel().tolist() == [4, 5, 6]
    assert batch[0].recursive_sequence_lengths() == [[2, 1]]
    for call, match in ((lambda: ds.set_merge_by_lineid([]), "line id"),
                        (lambda: ds.set_generate_unique_feasigns(True, 4), "PSLib"),
                        (lambda: ds.generate_local_tables_unlock(0, 8, 1, 1, 4), "PSLib"),
                        (lambda: ds.set_feed_type("SlotRecordInMemoryDataFeed"), "MultiSlot"),
                        (lambda: ds.set_queue_num(0), "queue_num"),
                        (ds.wait_preload_done, "no preload")):
        with pytest.raises(DatasetError, match=match):
            call()
    ds.set_enable_pv_merge(True)
    with pytest.raises(DatasetError, match="page views"):
        ds.preprocess_instance()
    # a preload that fails raises in wait_preload_done
    data.write_text("1 5\n")
    ds.preload_into_memory()
    with pytest.raises(DatasetError, match=r"part-0.txt:1: expected '1 <id>'"):
        ds.wait_preload_done()


def test_queue_dataset_cannot_shuffle_as_in_paddle():
    ds = fluid.DatasetFactory().create_dataset("QueueDataset")
    for call in (ds.local_shuffle, ds.global_shuffle):
        with pytest.raises(NotImplementedError, match="use InMemoryDataset") as err:
            call()
        assert isinstance(err.value, graphc.GraphcError)


def test_fluid_names_resolve():
    assert fluid.DatasetFactory is fluid.dataset.DatasetFactory is graphc.DatasetFactory
    assert fluid.incubate.data_generator is dg
    assert dg.MultiSlotDataGenerator.__module__ == "graphc.fluid.incubate.data_generator"
    with pytest.raises(DatasetError, match="shell command string"):
        fluid.dataset.QueueDataset().set_pipe_command(["cat"])


def test_download_cmd_fea_eval_and_the_recorded_settings(tmp_path):
    data = tmp_path / "remote-0.txt"
    data.write_text("5\n6\n7\n8\n")
    x = fluid.data("x", [-1, 1], "int64")
    y = fluid.data("y", [-1, 1], "int64")
    ds = fluid.DatasetFactory().create_dataset("InMemoryDataset")
    ds.set_use_var([x, y])
    ds.set_filelist([str(data)])
    ds.set_batch_size(4)
    # Paddle's ``download_cmd file | pipe_command``: here awk prints MultiSlot lines itself
    ds.set_download_cmd("awk '{print 1, $1, 1, $1 * 10}'")
    ds.set_hdfs_config("hdfs://namenode:9000", "user,passwd")
    ds.set_rank_offset("rank_offset")
    ds.set_pv_batch_size(8)
    ds.set_input_type(0)
    ds.load_into_memory()
    ds.slots_shuffle(["x"])  # without set_fea_eval: nothing happens, as in Paddle
    (before,) = list(ds._batches())
    assert before[0].ravel().tolist() == [5, 6, 7, 8]
    ds.set_fea_eval(1000, True)
    ds.slots_shuffle(["x"])
    (after,) = list(ds._batches())
    perm = np.random.default_rng(0).permutation(4)
    assert after[0].ravel().tolist() == [[5, 6, 7, 8][i] for i in perm]
    assert after[1].ravel().tolist() == [50, 60, 70, 80]
    with pytest.raises(DatasetError, match="no slot named"):
        ds.slots_shuffle(["z"])
    ds.set_pipe_command("awk '{print $1, $2, $3, $4 + 1}'")
    ds.load_into_memory()
    assert list(ds._batches())[0][1].ravel().tolist() == [51, 61, 71, 81]
    ds.set_download_cmd("false")
    with pytest.raises(DatasetError, match=r"pipe command .*false .*remote-0.txt \| awk.* "
                                           r"failed for .*remote-0.txt"):
        ds.load_into_memory()

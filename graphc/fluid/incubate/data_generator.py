"""``fluid.incubate.data_generator``: the Python data generators a Dataset's
``set_pipe_command`` runs, writing Paddle's MultiSlot text protocol to stdout."""

from __future__ import annotations

import numbers
import sys

from ...dataio.multislot import DatasetError

# A script subclasses ``MultiSlotDataGenerator``, overrides ``generate_sample(line)`` (a function
# whose iterator yields ``[(slot name, [values]), ...]``) and calls ``run_from_stdin()``; each
# sample becomes one line ``n v1 .. vn m w1 .. wm ...`` in slot order.
__all__ = ["DataGenerator", "DataGeneratorError", "MultiSlotDataGenerator",
           "MultiSlotStringDataGenerator"]


class DataGeneratorError(DatasetError, ValueError):
    """A generator produced a sample the MultiSlot protocol cannot carry (a ValueError too,
    as Paddle raises ValueError for these)."""


class DataGenerator:
    """The base class: batching of samples and the stdin/memory drivers."""

    def __init__(self):
        self._proto_info = None
        self.batch_size_ = 32

    def _set_line_limit(self, line_limit):
        if isinstance(line_limit, bool) or not isinstance(line_limit, int):
            raise DataGeneratorError(f"line_limit {type(line_limit)} must be an int")
        if line_limit < 1:
            raise DataGeneratorError("line_limit can not be less than 1")
        self._line_limit = line_limit

    def set_batch(self, batch_size):
        """How many samples ``generate_batch`` receives at a time."""
        self.batch_size_ = batch_size

    def _emit(self, samples, out):
        for sample in self.generate_batch(samples)():
            out.write(self._gen_str(sample))

    def _drive(self, lines, out):
        batch = []
        for line in lines:
            for parsed in self.generate_sample(line)():
                if parsed is None:
                    continue
                batch.append(parsed)
                if len(batch) == self.batch_size_:
                    self._emit(batch, out)
                    batch = []
        if batch:
            self._emit(batch, out)

    def run_from_memory(self):
        """Samples of ``generate_sample(None)`` to stdout (debugging, benchmarks)."""
        self._drive([None], sys.stdout)

    def run_from_stdin(self):
        """Each stdin line through ``generate_sample``, the samples to stdout."""
        self._drive(sys.stdin, sys.stdout)

    def _gen_str(self, line):
        raise NotImplementedError("pls use MultiSlotDataGenerator or PairWiseDataGenerator")

    def generate_sample(self, line):
        """Override: return a function whose iterator yields ``[(name, [values]), ...]``."""
        raise NotImplementedError(
            "Please rewrite this function to return a list or tuple: "
            "[(name, [feasign, ...]), ...] or ((name, [feasign, ...]), ...)")

    def generate_batch(self, samples):
        """Override to process ``batch_size_`` samples together; yields them unchanged."""
        def local_iter():
            yield from samples
        return local_iter


def _fields(line, example):
    if isinstance(line, zip):  # as Paddle's under Python 3: CTR-DNN yields zip(names, values)
        line = list(line)
    if not isinstance(line, list | tuple):
        raise DataGeneratorError(f"the output of generate_sample must be a list or tuple, got "
                                 f"{type(line).__name__}; example: {example}")
    for item in line:
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise DataGeneratorError(f"each field must be a (name, values) pair, got {item!r}")
        name, elements = item
        if not isinstance(name, str):
            raise DataGeneratorError(f"the slot name {name!r} must be a str")
        if not isinstance(elements, list):
            raise DataGeneratorError(f"slot {name!r}: the values must be a list, got "
                                     f"{type(elements).__name__}")
        if not elements:
            raise DataGeneratorError(f"slot {name!r} is empty: pad it in generate_sample "
                                     "(the MultiSlot format has no empty slots)")
        yield name, elements


class MultiSlotStringDataGenerator(DataGenerator):
    """Values already strings: written as given."""

    def _gen_str(self, line):
        out = []
        for name, elements in _fields(line, "[('words', ['1926', '08', '17']), ('label', "
                                            "['1'])]"):
            for e in elements:
                if not isinstance(e, str) or not e or any(c.isspace() for c in e):
                    raise DataGeneratorError(f"slot {name!r}: {e!r} is not a non-empty str "
                                             "without spaces")
            out.append(" ".join([str(len(elements)), *elements]))
        return " ".join(out) + "\n"


class MultiSlotDataGenerator(DataGenerator):
    """Int or float values; the first sample fixes the slots (names, order), a slot turning
    float once a float appears in it (``_proto_info``)."""

    def _gen_str(self, line):
        fields = list(_fields(line, "[('words', [1926, 8, 17]), ('label', [1])]"))
        first = self._proto_info is None
        if first:
            self._proto_info = [(name, "uint64") for name, _ in fields]
        elif len(fields) != len(self._proto_info):
            raise DataGeneratorError(f"this sample has {len(fields)} slots, the first had "
                                     f"{len(self._proto_info)}: every sample needs the same "
                                     "slots")
        out = []
        for index, (name, elements) in enumerate(fields):
            want = self._proto_info[index][0]
            if name != want:
                raise DataGeneratorError(f"slot {index} is named {name!r}; the first sample "
                                         f"named it {want!r}")
            words = [str(len(elements))]
            for e in elements:
                if isinstance(e, bool) or not isinstance(e, numbers.Real):
                    raise DataGeneratorError(f"slot {name!r}: the value {e!r} must be an int "
                                             "or a float")
                if isinstance(e, numbers.Integral):
                    words.append(str(int(e)))
                else:
                    self._proto_info[index] = (name, "float")
                    words.append(repr(float(e)))
            out.append(" ".join(words))
        return " ".join(out) + "\n"

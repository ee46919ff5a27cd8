"""What stopped real PaddlePaddle/models 1.8 programs ported by the rule alone (port24), each
checked against Paddle's documented behaviour, never against the program itself."""

from __future__ import annotations

import numpy as np
import pytest
from graphc.io import DataLoader

import graphc.fluid as fluid
from graphc.dataio.loader_epoch import pack_lod_batches
from graphc.runtime.lod import LoDError

pytestmark = pytest.mark.timeout(120)


def test_a_loaders_lod_feed_reads_as_the_lod_tensor_it_packs():
    """Paddle's loaders yield LoDTensors: scripts call ``.lod()`` and ``np.array`` on them
    before (or instead of) a step, as lexical_analysis's predict does."""
    words = fluid.data("words", [-1, 1], "int64", lod_level=1)
    seqs = [[3, 4, 5], [6], [7, 8]]
    loader = DataLoader.from_generator(feed_list=[words], capacity=4, iterable=True)
    loader.set_sample_list_generator(lambda: iter([[(s,) for s in seqs]]),
                                     places=[fluid.CPUPlace()])
    (item,) = list(loader())
    t = item[0]["words"]
    assert t.lod() == [[0, 3, 4, 6]]
    assert t.recursive_sequence_lengths() == [[3, 1, 2]]
    assert t.has_valid_recursive_sequence_lengths()
    assert t.shape() == [6, 1]
    np.testing.assert_array_equal(np.array(t), np.array([3, 4, 5, 6, 7, 8]).reshape(6, 1))
    np.testing.assert_array_equal(t.numpy(), np.array(t))


def test_a_packed_feed_without_its_source_unpacks_each_devices_sequences():
    a = fluid.data("a", [-1, 1], "int64", lod_level=1)
    first = fluid.create_lod_tensor(np.arange(5).reshape(5, 1), [[2, 3, 0, 0]], None)
    (packed,) = pack_lod_batches([a], [(first,)], 2)
    packed.source = None  # as a batch placed on the devices holds only its packed array
    assert packed.recursive_sequence_lengths() == [[2, 3, 0, 0]]
    np.testing.assert_array_equal(np.array(packed), np.arange(5).reshape(5, 1))
    (stacked,) = pack_lod_batches([a], [(first,), (first,)], 1)
    stacked.source = None
    with pytest.raises(LoDError, match="2 stacked batches"):
        stacked.lod()

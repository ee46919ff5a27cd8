"""Where layers.embedding and fc refuse shapes at build time, as Paddle 1.8 does: ids without a
trailing 1 (similarity_net's mmdnn, PaddlePaddle/models#4923) and inputs fc cannot flatten."""

from __future__ import annotations

import numpy as np
import pytest

import graphc.fluid as fluid
from graphc.ir.errors import ProgramError, ShapeError


@pytest.mark.parametrize("lod_level", [0, 1])
def test_layers_embedding_of_ids_declared_none_is_refused_where_paddle_refuses_it(lod_level):
    ids = fluid.data("ids", [None], "int64", lod_level=lod_level)
    with pytest.raises(ShapeError, match=r"Ids \[-1\] must end in a dimension of 1 \(Paddle's "
                                         r"lookup_table refuses it too\).*fluid.embedding"):
        fluid.layers.embedding(ids, [10, 4])


def test_the_advised_spellings_look_the_ids_up_token_by_token():
    ids = fluid.data("ids", [None], "int64", lod_level=1)
    column = fluid.data("column", [None, 1], "int64", lod_level=1)
    table = fluid.ParamAttr(name="table")
    by_any_shape = fluid.embedding(ids, [10, 4], param_attr=table)
    by_column = fluid.layers.embedding(column, [10, 4], param_attr=table)
    assert by_any_shape.shape == by_column.shape == (-1, 4)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(fluid.default_startup_program())
    tokens = np.array([[3], [1], [4], [1]], "int64")
    feed = {"ids": fluid.create_lod_tensor(tokens, [[3, 1]], fluid.CPUPlace()),
            "column": fluid.create_lod_tensor(tokens, [[3, 1]], fluid.CPUPlace())}
    a, b, w = exe.run(feed=feed, fetch_list=[by_any_shape, by_column, "table"])
    np.testing.assert_array_equal(a, w[tokens[:, 0]])
    np.testing.assert_array_equal(b, w[tokens[:, 0]])


def test_one_id_of_rank_one_still_looks_up_one_row():
    # Paddle's rule is the trailing 1, not the rank: [1] ids give a [width] row
    assert fluid.layers.embedding(fluid.data("one", [1], "int64"), [10, 4]).shape == (4,)


def test_fc_of_a_rank_one_input_names_the_rank_and_the_fix():
    x = fluid.layers.reshape(fluid.data("x", [-1, 8]), [-1])
    with pytest.raises(ProgramError, match=r"has rank 1: num_flatten_dims=1 must be in \[1, 1\)"
                                           r".*has no batch dimension"):
        fluid.layers.fc(x, 3)


def test_fc_of_unknown_dimensions_to_flatten_is_refused():
    # Paddle too: a weight sized by a -1 ("Parameter shape should not be related with
    # batch-size")
    with pytest.raises(ProgramError, match="must leave known dimensions to flatten"):
        fluid.layers.fc(fluid.data("x", [-1, -1]), 3)
    assert fluid.layers.fc(fluid.data("y", [-1, 2, 3]), 5, num_flatten_dims=2).shape == (-1, 2, 5)

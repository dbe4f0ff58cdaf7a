"""Layout-independent initialisation: any shard of a parameter is the same slice of one full value."""

from __future__ import annotations

import math

import pytest
import torch

from executor.init import ROWS_PER_BLOCK, canonical_name, init_weights, initial_value, param_std


@pytest.mark.parametrize(
    ("offset", "local"),
    [((0, 0), (200, 48)), ((63, 0), (2, 48)), ((64, 16), (64, 16)), ((130, 5), (70, 43)), ((199, 47), (1, 1))],
)
def test_any_shard_is_a_slice_of_the_full_value(offset, local) -> None:
    shape = (200, 48)  # rows span several ROWS_PER_BLOCK blocks
    full = initial_value("layers.0.attention.wq.weight", shape, shape, (0, 0), num_layers=4, seed=7)
    shard = initial_value("layers.0.attention.wq.weight", shape, local, offset, num_layers=4, seed=7)
    want = full[offset[0] : offset[0] + local[0], offset[1] : offset[1] + local[1]]
    assert torch.equal(shard, want)


def test_values_depend_on_name_and_seed_only() -> None:
    a = initial_value("w.weight", (8, 8), (8, 8), (0, 0), num_layers=4, seed=1)
    assert torch.equal(a, initial_value("w.weight", (8, 8), (8, 8), (0, 0), num_layers=4, seed=1))
    assert not torch.equal(a, initial_value("v.weight", (8, 8), (8, 8), (0, 0), num_layers=4, seed=1))
    assert not torch.equal(a, initial_value("w.weight", (8, 8), (8, 8), (0, 0), num_layers=4, seed=2))


def test_scheme() -> None:
    assert param_std("layers.3.attention.wq.weight", 4) == 0.02
    assert param_std("layers.3.attention.wo.weight", 8) == pytest.approx(0.02 / math.sqrt(16))
    assert param_std("layers.3.feed_forward.experts.1.w2.weight", 2) == pytest.approx(0.01)
    assert param_std("norm.weight", 4) is None and param_std("layers.0.attention.wq.bias", 4) is None
    big = initial_value("tok_embeddings.weight", (4 * ROWS_PER_BLOCK, 256), (4 * ROWS_PER_BLOCK, 256), (0, 0),
                        num_layers=4, seed=0)
    assert big.std().item() == pytest.approx(0.02, rel=0.02)
    ones = initial_value("layers.0.ffn_norm.weight", (64,), (64,), (0,), num_layers=4, seed=0)
    assert torch.equal(ones, torch.ones(64))


def test_wrapper_prefixes_are_not_part_of_the_name() -> None:
    assert canonical_name("layers.2._checkpoint_wrapped_module.attention.wq.weight") == "layers.2.attention.wq.weight"
    assert canonical_name("layers.2.attention.core._checkpoint_wrapped_module.x") == "layers.2.attention.core.x"


def test_init_weights_fills_plain_modules_and_zeroes_buffers() -> None:
    lin = torch.nn.Linear(4, 3)
    lin.register_buffer("router_bias", torch.full((3,), 5.0))
    init_weights(lin, num_layers=1, seed=0)
    assert torch.equal(lin.bias.detach(), torch.zeros(3)) and torch.equal(lin.router_bias, torch.zeros(3))
    want = initial_value("weight", (3, 4), (3, 4), (0, 0), num_layers=1, seed=0)
    assert torch.equal(lin.weight.detach(), want)

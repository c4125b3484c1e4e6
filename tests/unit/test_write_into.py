"""Correctness rounds and the caching probe write new values into the same input buffers; a custom
input made with .expand() (stride 0) cannot be written element by element."""
import torch

from solforge.evaluate.inputs import write_into


def test_an_expanded_buffer_takes_new_values_through_the_elements_it_has():
    base = torch.arange(6).view(1, 6)
    dst = base.expand(4, 6)                      # position_ids-like: one row seen four times
    src = (torch.arange(6) * 10).view(1, 6).expand(4, 6)
    assert write_into(dst, src)
    assert torch.equal(dst, src) and torch.equal(base, src[:1])


def test_values_that_vary_along_a_repeated_dim_are_refused_not_half_written():
    base = torch.zeros(1, 3)
    dst = base.expand(2, 3)
    src = torch.arange(6.0).view(2, 3)
    assert not write_into(dst, src)
    assert torch.equal(base, torch.zeros(1, 3))


def test_a_dense_buffer_is_copied_and_other_shapes_are_refused():
    dst = torch.zeros(2, 3)
    assert write_into(dst, torch.ones(2, 3)) and torch.equal(dst, torch.ones(2, 3))
    assert not write_into(dst, torch.ones(3, 2))
    assert not write_into(dst, torch.ones(2, 3, dtype=torch.float64))

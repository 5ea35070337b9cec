import pytest
import torch

from radixlab.utils import check_index_list, check_int, is_index_dtype


def test_check_int_names_the_argument():
    assert check_int(3, "n", minimum=1) == 3
    with pytest.raises(TypeError, match="page_size must be an int"):
        check_int(True, "page_size")
    with pytest.raises(TypeError, match="n must be an int"):
        check_int(2.0, "n")
    with pytest.raises(ValueError, match="page_size must be >= 1, got 0"):
        check_int(0, "page_size", minimum=1)
    with pytest.raises(ValueError, match="k must be <= 3, got 4"):
        check_int(4, "k", maximum=3)


def test_check_index_list():
    assert check_index_list(torch.tensor([1, 2]), "slots") == [1, 2]
    assert check_index_list((3, 4), "slots") == [3, 4]
    with pytest.raises(TypeError, match="slots must be a 1-D integer tensor"):
        check_index_list(torch.tensor([1.0]), "slots")
    with pytest.raises(TypeError, match="slots must hold integer indices"):
        check_index_list([1, None], "slots")
    with pytest.raises(TypeError, match="slots must be a sequence"):
        check_index_list("12", "slots")
    assert is_index_dtype(torch.int32) and not is_index_dtype(torch.bool)

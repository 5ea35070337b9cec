"""Small helpers shared by the whole package (argument checks)."""

from .checks import check_int, check_index_list, is_index_dtype

__all__ = ["check_int", "check_index_list", "is_index_dtype"]

"""seqmix ops as torch custom ops (torch.library), with fake kernels and autograd, so
``torch.compile(fullgraph=True)`` traces models that use them without graph breaks.

Import it explicitly or call the functions of ``seqmix`` with torch tensors.
"""

from .gated_scan import gated_scan
from .chains import low_rank_gate, output_chain, projection_chain  # noqa: F401
from .attention import flash_attn_func, flash_attn_varlen_func  # noqa: F401
from .delta_rule import chunk_gated_delta_rule  # noqa: F401
from .gla import chunk_gla  # noqa: F401
from .linear_recurrence import linear_recurrence  # noqa: F401

__all__ = ["gated_scan"]

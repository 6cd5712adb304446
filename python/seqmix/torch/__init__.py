"""seqmix ops for torch tensors: torch.library custom ops with fake kernels and autograd,
so ``torch.compile(fullgraph=True)`` traces models that use them without graph breaks.

Import it explicitly or call the functions of ``seqmix`` with torch tensors.
"""

from .attention import flash_attn_func, flash_attn_varlen_func
from .chains import low_rank_gate, output_chain, projection_chain
from .delta_rule import chunk_gated_delta_rule
from .gated_scan import gated_scan
from .gated_scan_layer import gated_scan_layer
from .gla import chunk_gla
from .linear_recurrence import linear_recurrence

__all__ = ["chunk_gated_delta_rule", "chunk_gla", "flash_attn_func", "flash_attn_varlen_func", "gated_scan", "gated_scan_layer",
           "linear_recurrence", "low_rank_gate", "output_chain", "projection_chain"]

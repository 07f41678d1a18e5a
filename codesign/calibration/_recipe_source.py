"""How a recipe fact is written: its value and the recipe file it was read from.

Each fact is ``{"value", "source"}``, the source naming the file and commit of
NVIDIA-NeMo/Megatron-Bridge (:mod:`codesign.calibration._bridge_recipes`,
:mod:`codesign.calibration._bridge_recipes26`).
"""

from __future__ import annotations

__all__ = ["MB", "PERMUTE_COPIES", "fact", "assumed", "permute_copies"]

MB = "NVIDIA-NeMo/Megatron-Bridge"


def fact(value, source: str) -> dict:
    """A setting read from a recipe file: ``{"value": value, "source": source}``."""
    return {"value": value, "source": source}


def assumed(value, what: str) -> dict:
    """A setting not found in the recipe: the Megatron-Core default, flagged ASSUMED.

    >>> assumed(False, "tp_comm_overlap not set")["source"]
    'not found: ASSUMED Megatron-Core default (tp_comm_overlap not set)'
    """
    return {"value": value, "source": f"not found: ASSUMED Megatron-Core default ({what})"}


PERMUTE_COPIES = {None: 2.0, "alltoall": 2.0, "deepep": 1.0, "hybridep": 1.0}
"""Copies of the routed slots a MoE layer makes beside its communication kernels, each way,
per token dispatcher (:attr:`codesign.specs.Strategy.moe_permute_copies`).  Megatron-LM
``megatron/core/transformer/moe/token_dispatcher.py``: ``MoEAlltoAllTokenDispatcher``
permutes, runs the all-to-all, then sorts the chunks by local expert (``sort_chunks_by_idxs``)
and reverses both on combine; the flex dispatcher's ``_DeepepManager`` permutes once after
``fused_dispatch``; ``_HybridEPManager`` calls ``hybrid_ep_dispatch``, whose
``dispatch_with_permute`` runs the dispatch kernel and then its own ``permute_launcher`` copy
(deepseek-ai/DeepEP, hybrid-ep branch).  A later Megatron-Core option,
``fuse_permute_dispatch``, merges the two kernels; it is not counted here."""


def permute_copies(backend, source: str) -> dict:
    """The ``moe_permute_copies`` fact of a recipe whose flex backend is ``backend`` (None:
    the alltoall dispatcher).

    >>> permute_copies(None, "cfg.py: no moe_flex_dispatcher_backend")["value"]
    2.0
    """
    if backend not in PERMUTE_COPIES:
        raise ValueError(f"MoE dispatcher backend {backend!r}: one of {list(PERMUTE_COPIES)}")
    name = backend or "alltoall"
    n = PERMUTE_COPIES[backend]
    return fact(n, f"{source} -> {name} dispatcher, {n:g} copies of the slots each way")

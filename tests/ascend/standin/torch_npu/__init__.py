"""A stand-in for ``torch_npu`` (Ascend's PyTorch adapter), for machines without CANN.

The real package cannot be imported here (it loads ``libhccl.so`` from CANN), so this one offers
the parts of its documented API that triton_dist touches, with the same names, signatures and
failure modes, backed by the host: kernels run in Triton's interpreter, synchronously, so an
event's timestamp is the host clock at ``record()``.

Like the real package, importing it names PyTorch's PrivateUse1 backend ``npu`` (so that
``torch.device("npu", 0)`` parses) and registers ``torch.npu``. What it cannot provide is NPU
memory: see ``npu_standin.install`` for the one consequence the tests accept.

``calls`` counts every API call, so tests can assert what the project used.
"""

from __future__ import annotations

import torch

from . import npu, profiler

__all__ = ["calls", "npu", "profiler"]
#: the version the Ascend image pins (pyproject's npu extra, deploy/images/Dockerfile.ascend)
__version__ = "2.7.1.post4"
calls = npu.calls

# what torch_npu does on import: PrivateUse1 is named "npu", torch.npu is its module
if torch._C._get_privateuse1_backend_name() != "npu":
    torch.utils.rename_privateuse1_backend("npu")
if not hasattr(torch, "npu"):
    torch._register_device_module("npu", npu)


def _hccl_over_gloo(store, rank, world_size, timeout):
    """torch_npu registers ``hccl`` with torch.distributed on import; here gloo carries it (the
    stand-in's NPU tensors live on the host, see npu_standin), under the name ``hccl``."""
    import torch.distributed as dist

    calls["hccl.process_group"] += 1
    return dist.ProcessGroupGloo(store, rank, world_size, timeout)


def _register_hccl() -> None:
    import torch.distributed as dist

    if "hccl" not in dist.Backend.backend_list:
        dist.Backend.register_backend("hccl", _hccl_over_gloo, devices=["cpu", "npu"])


_register_hccl()

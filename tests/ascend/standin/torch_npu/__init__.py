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

from . import npu

__all__ = ["npu", "calls"]
#: the version the Ascend image pins (pyproject's npu extra, deploy/images/Dockerfile.ascend)
__version__ = "2.7.1.post4"
calls = npu.calls

if torch._C._get_privateuse1_backend_name() != "npu":
    torch.utils.rename_privateuse1_backend("npu")
torch._register_device_module("npu", npu) if not hasattr(torch, "npu") else None

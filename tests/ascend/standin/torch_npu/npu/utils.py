"""``torch_npu.npu.utils`` (stand-in): the CANN version query."""

from __future__ import annotations

#: what torch_npu reports on the CANN the Ascend image starts from (deploy/images/Dockerfile.ascend)
CANN_VERSION = "8.1.RC1"


def get_cann_version(module: str = "CANN") -> str:
    """Documented in torch_npu >= 2.1: the version of a CANN component ("" if unknown)."""
    if not isinstance(module, str):
        raise TypeError(f"module must be a str, got {type(module).__name__}")
    return CANN_VERSION if module == "CANN" else ""

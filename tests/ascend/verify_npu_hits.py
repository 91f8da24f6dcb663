"""``python -m tests.ascend.verify_npu_hits SPEC_JSON``: tests.ray.verify_hits on the NPU stand-in
(a strict cache-only process with TRITON_DIST_DEVICE=npu; W > 1 ranks join over ``hccl``)."""

from __future__ import annotations

import sys

if __name__ == "__main__":
    import npu_standin

    npu_standin.install()
    from tests.ray.verify_hits import main

    sys.exit(main())

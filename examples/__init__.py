"""Runnable examples; also importable (``examples.scale``, ``examples.gemm``) by campaigns and tests."""

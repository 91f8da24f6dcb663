"""The cache command line (`python -m triton_dist.cache`): commands and their rendering.

Entry point: `commands.main`.
"""

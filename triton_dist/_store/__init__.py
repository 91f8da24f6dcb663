"""The disk cache: the entry schema, atomic locked read/write, the hardware/software
fingerprint, reuse when a config space grows, miss diagnosis, admin commands and archives.

Entry point: `files` (read/write); `diagnose` explains misses.
"""

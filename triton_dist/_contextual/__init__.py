"""The scoped takeover of `triton.autotune` for `contextual_autotune`.

Entry point: `session.ContextualAutoTuner`.
"""

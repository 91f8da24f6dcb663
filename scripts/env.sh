# Environment shared by the demo and the tests (sourced). CPU only: Triton's interpreter runs
# the kernels; Ray runs embedded with authentication and usage stats off (a token file written
# by one ray.init() would break a later `ray job submit`).
export TRITON_INTERPRET=${TRITON_INTERPRET:-1}
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled}
export RAY_USAGE_STATS_ENABLED=${RAY_USAGE_STATS_ENABLED:-0}
export TORCH_DEVICE_BACKEND_AUTOLOAD=${TORCH_DEVICE_BACKEND_AUTOLOAD:-0}
export PYTHONDONTWRITEBYTECODE=1

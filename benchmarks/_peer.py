"""The peer every benchmark compares with: NVIDIA Warp, when `warp-lang` is installed."""


def quiet_warp(wp):
    """No init banner and no per-module load lines, on old and new Warp."""
    wp.config.quiet = True                      # Warp < 1.10
    if hasattr(wp, "LOG_WARNING"):
        wp.config.log_level = wp.LOG_WARNING    # newer Warp


def warp_or_none():
    """``warp`` imported, quiet and initialised; None when it is not installed."""
    try:
        import warp as wp
    except ImportError:
        return None
    quiet_warp(wp)
    wp.init()
    return wp

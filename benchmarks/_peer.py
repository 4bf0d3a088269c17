"""The peer every benchmark compares with: NVIDIA Warp, when `warp-lang` is installed."""


def warp_or_none():
    """``warp`` imported, quiet and initialised; None when it is not installed."""
    try:
        import warp as wp
    except ImportError:
        return None
    wp.config.quiet = True
    wp.init()
    return wp

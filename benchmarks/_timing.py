"""Timing helpers shared by every benchmark: samplers, interleaved rounds, ratios, result files.

Benchmarks here compare tapegrad with a peer (Warp, torch, ...) *in the same run*, because the
machines are shared and noisy: the contenders alternate round by round so that load hits all
of them, a statistic (median, or best where only noise can add time) is taken over the rounds,
and the figure that counts is the ratio tapegrad / peer.

Typical use::

    from _timing import compare, interleave, per_call, write_results

    samples = interleave({"tapegrad": per_call(lambda: tg.zeros(16), 10_000),
                          "warp": per_call(lambda: wp.zeros(16), 10_000)}, rounds=7)
    c = compare(samples, "tapegrad", "warp")          # c.ours, c.peer: seconds per call
    print(f"{fmt_time(c.ours)} {fmt_time(c.peer)} {fmt_ratio(c.ratio)}")
    write_results("my_bench", {"device": "cpu", "rows": [...]})

A sampler is any zero-argument callable returning one sample (seconds per call, or a
throughput); `per_call` builds the common one. Peers that are not installed are simply left
out of the dict: `compare` then reports ``peer=None, ratio=None``.
"""
from __future__ import annotations

import json
import math
import pathlib
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

RESULTS = pathlib.Path(__file__).resolve().parent / "results"

Sampler = Callable[[], float]


def per_call(fn: Callable[[], object], calls: int, sync: Optional[Callable[[], object]] = None,
             timed_sync: bool = True) -> Sampler:
    """A sampler timing ``calls`` calls of ``fn``.

    Args:
        fn: the operation, called with no arguments.
        calls: calls per sample (enough to make a sample last milliseconds).
        sync: waits for asynchronous work (e.g. ``torch.cuda.synchronize``); called before the
            timed region and after the calls.
        timed_sync: True: the final ``sync()`` is inside the timed region (execution time);
            False: outside it (host submission time only).

    Returns:
        A callable returning seconds per call.
    """
    def sample() -> float:
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        if sync is not None and timed_sync:
            sync()
        t1 = time.perf_counter()
        if sync is not None and not timed_sync:
            sync()
        return (t1 - t0) / calls
    return sample


def median_time(fn: Callable[[], object], reps: int, sync: Optional[Callable[[], object]] = None) -> float:
    """The median seconds of ``reps`` single calls of ``fn`` (one warm-up call first), each
    sample closed by ``sync`` (a ``per_call`` sampler of one call)."""
    fn()
    if sync is not None:
        sync()
    sample = per_call(fn, 1, sync)
    return statistics.median(sample() for _ in range(reps))


def interleave(samplers: Mapping[str, Sampler], rounds: int, warmup: int = 1,
               rotate: bool = True) -> dict[str, list[float]]:
    """Run every sampler once per round, alternating, so machine noise hits all contenders.

    Args:
        samplers: name -> sampler; None values are skipped (a peer that is not installed).
        rounds: recorded rounds.
        warmup: unrecorded rounds first (compilation, caches, page faults).
        rotate: rotate the order every round, so no contender is always first.

    Returns:
        name -> list of ``rounds`` samples.
    """
    names = [n for n, s in samplers.items() if s is not None]
    for _ in range(warmup):
        for n in names:
            samplers[n]()
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names) if (rotate and names) else 0
        for n in names[k:] + names[:k]:
            samples[n].append(samplers[n]())
    return samples


@dataclass(frozen=True)
class Comparison:
    """One measure for tapegrad and its peer.

    Attributes:
        ours: the statistic of tapegrad's samples.
        peer: the statistic of the peer's samples; None without a peer.
        ratio: ``ours / peer`` (time: lower is better; throughput: higher is better).
        median_ratio: the median of the per-round ratios (robust to drifting load).
    """
    ours: float
    peer: Optional[float] = None
    ratio: Optional[float] = None
    median_ratio: Optional[float] = None


def best(samples: list[float], higher_is_better: bool = False) -> float:
    """The best sample: the minimum time (noise only ever adds time), or the maximum throughput."""
    return max(samples) if higher_is_better else min(samples)


def compare(samples: Mapping[str, list[float]], ours: str, peer: Optional[str], stat: str = "median",
            higher_is_better: bool = False) -> Comparison:
    """Summarise interleaved samples as a `Comparison`.

    Args:
        samples: as returned by `interleave`.
        ours: tapegrad's name in ``samples``.
        peer: the peer's name; None (or a name not in ``samples``) for no peer.
        stat: "median", "best" (see `best`) or "mean".
        higher_is_better: the samples are throughputs (only matters for "best").

    Returns:
        The `Comparison`.

    Raises:
        ValueError: an unknown ``stat``.
    """
    if stat == "median":
        summarise = statistics.median
    elif stat == "mean":
        summarise = statistics.fmean
    elif stat == "best":
        def summarise(s):
            return best(s, higher_is_better)
    else:
        raise ValueError(f"stat must be 'median', 'best' or 'mean', got {stat!r}")
    o = summarise(samples[ours])
    if peer is None or peer not in samples or not samples[peer]:
        return Comparison(o)
    p = summarise(samples[peer])
    med = statistics.median(a / b for a, b in zip(samples[ours], samples[peer]) if b)
    return Comparison(o, p, o / p if p else None, med)


def side_by_side(ours: Callable[[], object], peer: Optional[Callable[[], object]], calls: int, rounds: int,
                 sync: Optional[Callable[[], object]] = None, stat: str = "median") -> Comparison:
    """`per_call` + `interleave` + `compare` for the common case: seconds per call of two callables.

    Args:
        ours: tapegrad's operation.
        peer: the peer's operation, or None.
        calls: calls per sample.
        rounds: interleaved rounds.
        sync: see `per_call` (one function for both sides).
        stat: see `compare`.

    Returns:
        The `Comparison` (seconds per call).
    """
    samplers = {"ours": per_call(ours, calls, sync)}
    if peer is not None:
        samplers["peer"] = per_call(peer, calls, sync)
    return compare(interleave(samplers, rounds), "ours", "peer" if peer is not None else None, stat)


def fmt_time(seconds: Optional[float], unit: str = "us", width: int = 8) -> str:
    """``seconds`` in ``unit`` ("us", "ms" or "s") with the unit appended; "-" for None/NaN."""
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return f"{'-':>{width + len(unit)}s}"
    scale = {"us": 1e6, "ms": 1e3, "s": 1.0}[unit]
    return f"{seconds * scale:{width}.2f}{unit}"


def fmt_ratio(ratio: Optional[float]) -> str:
    """``1.23x``, or "-" without a peer."""
    return f"{ratio:.2f}x" if ratio is not None else "-"


def write_results(name: str, payload: object, path: Optional[str | pathlib.Path] = None) -> pathlib.Path:
    """Write ``payload`` as JSON to ``benchmarks/results/<name>.json`` (or ``path``).

    Args:
        name: file stem under ``benchmarks/results/``.
        payload: anything `json.dumps` accepts.
        path: an explicit destination (a benchmark's ``--out``), overriding ``name``.

    Returns:
        The path written.
    """
    out = pathlib.Path(path) if path else RESULTS / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2))
    return out

"""Definite assignment: whether a Python local is bound on every path that reaches a read.

Python raises ``UnboundLocalError`` at run time when a path reaches a read of a local no
statement on that path assigned (``if c: y = 1.0`` then ``x[i] = y``); a kernel has no such
error at run time, it would read whatever the C++ variable holds (zero). The frontend
(``frontend.Builder``) therefore follows the paths as it builds: ``Paths`` holds the names
bound on the path being built, branches and loops meet their paths' sets where they join, and
a read of a name the builder knows as a local but the current path may not have bound is a
compile-time error naming the variable and the line.

The rules follow Python's semantics over the paths the builder keeps (constant conditions and
unrolled loops are resolved first, as the builder resolves them):

* ``if``/``else``: bound after it when bound at the end of both branches (a branch that ends
  in ``return``/``break``/``continue`` does not reach the join);
* a loop that may run zero times (a dynamic ``range``, ``while``): bound after it only when
  bound before it, or on every exit path when the loop surely runs (a constant ``range``);
  ``break`` and ``continue`` carry their path's set to the loop's exit / next iteration;
* ``while True``: left through ``break`` only.
"""
from __future__ import annotations


def meet(*states):
    """The names bound on every one of ``states`` (None: a path that does not reach here)."""
    live = [s for s in states if s is not None]
    if not live:
        return None
    out = set(live[0])
    for s in live[1:]:
        out &= s
    return out


class Paths:
    """The names bound on the path the builder is building (``bound`` None: unreachable code,
    e.g. after ``return``), with the ``break``/``continue`` sets of the loops being built."""

    def __init__(self, names=()):
        self.bound = set(names)
        self.first: dict = {}        # name -> line of its first assignment (for messages)
        self.exits: list = []        # per loop being built: {"break": [sets], "continue": [sets]}

    def assigned(self, name: str, line: int) -> None:
        self.first.setdefault(name, line)
        if self.bound is not None:
            self.bound.add(name)

    def may_be_unbound(self, name: str) -> bool:
        return self.bound is not None and name not in self.bound

    def snapshot(self):
        return None if self.bound is None else set(self.bound)

    def restore(self, state) -> None:
        self.bound = None if state is None else set(state)

    def leave(self, kind: str) -> None:
        """The current path ends in ``kind`` ("return", "break" or "continue")."""
        if kind != "return" and self.exits and self.bound is not None:
            self.exits[-1][kind].append(set(self.bound))
        self.bound = None

    def enter_loop(self) -> None:
        self.exits.append({"break": [], "continue": []})

    def leave_loop(self) -> tuple:
        """``(break sets, continue sets)`` of the loop body just built."""
        e = self.exits.pop()
        return e["break"], e["continue"]

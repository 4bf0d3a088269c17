"""GraphViz ``dot`` text of a Tape's records (``Tape.visualize``).

Works from what every record says about itself (``accesses()``, ``label()``), so it needs no
knowledge of the record kinds beyond their class names; arrays are nodes keyed by identity.
"""
from __future__ import annotations

__all__ = ["dot"]

_DIRECTIONS = ("LR", "RL", "TB", "BT")


def _quote(text: str) -> str:
    # (a backslash is kept: "\\n" is dot's line break inside a label)
    return '"' + str(text).replace('"', '\\"') + '"'


def _tracked(arrays, names, what):
    if arrays is None:
        if names is not None:
            raise ValueError(f"visualize: track_{what}_names given without track_{what}s")
        return {}
    arrays = list(arrays)
    names = list(names) if names is not None else [f"{what}{k}" for k in range(len(arrays))]
    if len(names) != len(arrays):
        raise ValueError(f"visualize: {len(arrays)} track_{what}s but {len(names)} track_{what}_names")
    return {id(a): n for a, n in zip(arrays, names)}


def _record_label(rec, index: int) -> str:
    kernel = getattr(rec, "kernel", None)
    if kernel is not None:
        return f"{getattr(kernel, 'key', kernel)}\\n#{index}"
    kind = getattr(rec, "what", None) or type(rec).__name__.replace("Record", "").lower() or "record"
    return f"{kind}\\n#{index}"


def _signature(rec):
    # what makes two records the same node when repeated back to back: the same kind, the same
    # kernel and the same arrays passed under the same names for the same accesses
    return (type(rec), getattr(rec, "kernel", None),
            tuple((id(a.array), a.name, a.reads, a.writes) for a in rec.accesses()))


def _repeats(records, breaks) -> list:
    """The first record of the run of identical records each record belongs to (itself when it
    repeats nothing); a run never crosses an index in ``breaks`` (scope boundaries)."""
    first = list(range(len(records)))
    prev = None
    for i, rec in enumerate(records):
        try:
            sig = _signature(rec)
        except (AttributeError, TypeError):   # not a record (something appended by hand)
            sig = None
        if sig is not None and prev is not None and sig == prev[1] and i not in breaks:
            first[i] = prev[0]
        else:
            prev = (i, sig) if sig is not None else None
    return first


def dot(records, scopes, *, hide_readonly_arrays=False, array_labels=None, choose_longest=True,
        ignore_scopes=False, track_inputs=None, track_outputs=None, track_input_names=None,
        track_output_names=None, direction="LR", simplify=False) -> str:
    """The dot text of ``records`` grouped by ``scopes`` (``Tape.scopes`` entries); with
    ``simplify``, a run of identical consecutive records (the same kernel on the same arrays)
    is one node labelled "repeated Nx".

    Raises:
        ValueError: bad ``direction``; tracked arrays and names of different lengths.
        TypeError: ``array_labels`` is not a dict.
    """
    if direction not in _DIRECTIONS:
        raise ValueError(f"visualize(graph_direction): expected one of {_DIRECTIONS}, got {direction!r}")
    if array_labels is not None and not isinstance(array_labels, dict):
        raise TypeError(f"visualize(array_labels): expected a dict {{array: label}}, got {type(array_labels).__name__}")
    labels = {id(a): str(v) for a, v in (array_labels or {}).items()}
    inputs = _tracked(track_inputs, track_input_names, "input")
    outputs = _tracked(track_outputs, track_output_names, "output")

    first = _repeats(records, {s[0] for s in scopes}) if simplify else list(range(len(records)))
    count: dict = {}
    for f in first:
        count[f] = count.get(f, 0) + 1
    names: dict = {}       # id(array) -> names it was passed under
    arrays: dict = {}      # id(array) -> array (keeps the order of first use)
    written: set = set()
    edges: dict = {}       # (src, dst) -> None: ordered, a repeated record's edges once
    for i, rec in enumerate(records):
        for acc in rec.accesses():
            key = id(acc.array)
            arrays.setdefault(key, acc.array)
            names.setdefault(key, [])
            if acc.name not in names[key]:
                names[key].append(acc.name)
            if acc.writes:
                written.add(key)
                edges[(f"r{first[i]}", f"a{key}")] = None
            if acc.reads:
                edges[(f"a{key}", f"r{first[i]}")] = None

    def record_node(j):
        label = _record_label(records[j], j)
        if count[j] > 1:
            label += f" (repeated {count[j]}x)"
        return f"r{j} [label={_quote(label)}, shape=box];"

    shown = {k for k in arrays if not (hide_readonly_arrays and k not in written)} | set(inputs) | set(outputs)
    lines = ["digraph Tape {", f"    rankdir={direction};", '    node [fontname="Helvetica"];']
    for key in arrays:
        if key not in shown:
            continue
        a = arrays[key]
        if key in labels:
            name = labels[key]
        elif key in inputs:
            name = inputs[key]
        elif key in outputs:
            name = outputs[key]
        else:
            cands = names[key]
            name = max(cands, key=len) if choose_longest else cands[0]
        shape = getattr(a, "shape", "")
        dtype = getattr(a, "dtype", "")
        style = ""
        if key in inputs:
            style = ', style=filled, fillcolor="palegreen"'
        elif key in outputs:
            style = ', style=filled, fillcolor="lightcoral"'
        text = _quote(f"{name}\\n{dtype!r} {shape}")
        tip = _quote(f"array: dtype={getattr(dtype, '__name__', dtype)}, shape={shape}")
        lines.append(f"    a{key} [label={text}, tooltip={tip}, shape=ellipse{style}];")

    # records, inside the clusters of the scopes open around them
    open_scopes: list = []
    bounds = []            # (start, end, name, depth)
    for idx, name, _meta in ([] if ignore_scopes else scopes):
        if name is not None:
            open_scopes.append((idx, name))
        elif open_scopes:
            start, sname = open_scopes.pop()
            bounds.append((start, idx, sname, len(open_scopes)))
    for start, sname in open_scopes:      # still open: up to the last record
        bounds.append((start, len(records), sname, 0))

    def emit(lo, hi, nested, indent):
        # nested: the scopes inside [lo, hi); the outermost ones become clusters here
        top = [b for b in nested if not any(c is not b and c[0] <= b[0] and b[1] <= c[1]
                                            and (c[0], -c[1], c[3]) < (b[0], -b[1], b[3]) for c in nested)]
        i = lo
        for b in sorted(top):
            for j in range(i, b[0]):
                if first[j] == j:
                    lines.append(indent + record_node(j))
            lines.append(f"{indent}subgraph cluster_{b[0]}_{b[1]}_{b[3]} {{")
            lines.append(f"{indent}    label={_quote(b[2])}; style=rounded;")
            inside = [c for c in nested if c is not b and b[0] <= c[0] and c[1] <= b[1] and c[3] > b[3]]
            emit(b[0], b[1], inside, indent + "    ")
            lines.append(f"{indent}}}")
            i = b[1]
        for j in range(i, hi):
            if first[j] == j:
                lines.append(indent + record_node(j))

    emit(0, len(records), [b for b in bounds if b[1] > b[0]], "    ")
    for src, dst in edges:
        a_key = src[1:] if src.startswith("a") else dst[1:]
        if int(a_key) in shown:
            lines.append(f"    {src} -> {dst};")
    lines.append("}")
    return "\n".join(lines) + "\n"

"""Node-list syntax, both ways.

Host lists as Torque/Slurm write them (`n[001-128]`, `a,b,c[1-3,7]`, `r[1-2]n[01-02]`) and
PSC's node-id ranges (`10..20,30..60`, the `YOD_NIDLIST` style `pbsyod` passes on).
"""
from __future__ import annotations

import re

from .errors import InvalidRequest

_RANGE = re.compile(r"^([0-9]{1,12})(?:-([0-9]{1,12}))?$")
#: the most names a list may stand for, counted before one is built (`n[1-99999999]` is
#: refused by its size, not by running out of memory)
MAX_NAMES = 1 << 21


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise InvalidRequest(f"unbalanced ']' in node list {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth:
        raise InvalidRequest(f"unbalanced '[' in node list {text!r}")
    parts.append("".join(cur))
    return parts


def _expand_one(token: str, whole: str) -> list[str]:
    start = token.find("[")
    if start < 0:
        if not token or "]" in token:
            raise InvalidRequest(f"bad node list {whole!r}")
        return [token]
    end = token.find("]", start)
    prefix, body, rest = token[:start], token[start + 1:end], token[end + 1:]
    values = []
    for piece in body.split(","):
        m = _RANGE.match(piece.strip())
        if not m:
            raise InvalidRequest(f"bad range {piece!r} in node list {whole!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise InvalidRequest(f"descending range {piece!r} in node list {whole!r}")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        if len(values) + int(hi) - int(lo) + 1 > MAX_NAMES:
            raise InvalidRequest(f"node list {whole!r} names more than {MAX_NAMES} nodes")
        values.extend(f"{i:0{width}d}" for i in range(int(lo), int(hi) + 1))
    tails = _expand_one(rest, whole) if rest else [""]
    if len(values) * len(tails) > MAX_NAMES:
        raise InvalidRequest(f"node list {whole!r} names more than {MAX_NAMES} nodes")
    return [prefix + v + t for v in values for t in tails]


def expand(hostlist: str) -> list[str]:
    """`"n[01-03],x"` -> `["n01", "n02", "n03", "x"]` (order kept, duplicates kept)."""
    text = hostlist.strip()
    if not text:
        return []
    out = []
    for token in _split_top(text):
        out.extend(_expand_one(token.strip(), hostlist))
        if len(out) > MAX_NAMES:
            raise InvalidRequest(f"node list {hostlist!r} names more than {MAX_NAMES} nodes")
    return out


_NAME = re.compile(r"^(.*?)(\d+)$")


def compress(names: list[str]) -> str:
    """The shortest-obvious host list for `names`: runs of `prefix<number>` become ranges.

    Zero padding is kept when all numbers of a run share one width.
    """
    groups: list[tuple[str, int, list[int]]] = []  # (prefix, width, numbers) in order
    for name in names:
        m = _NAME.match(name)
        if not m:
            groups.append((name, -1, []))
            continue
        prefix, digits = m.group(1), m.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        last = groups[-1] if groups else None
        if last and last[0] == prefix and (last[1] == width or (last[1] > 0 and len(digits) == last[1])):
            groups[-1][2].append(int(digits))
        else:
            groups.append((prefix, width, [int(digits)]))
    out = []
    for prefix, width, numbers in groups:
        if width < 0:
            out.append(prefix)
        elif len(numbers) == 1:
            out.append(f"{prefix}{numbers[0]:0{width}d}")
        else:
            out.append(f"{prefix}[{_ranges(numbers, '-', width)}]")
    return ",".join(out)


def _ranges(numbers: list[int], sep: str, width: int = 0) -> str:
    runs = []
    for n in numbers:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ",".join(f"{a:0{width}d}" if a == b else f"{a:0{width}d}{sep}{b:0{width}d}" for a, b in runs)


def expand_nids(text: str) -> list[int]:
    """PSC node-id ranges: `"10..12,30"` -> `[10, 11, 12, 30]`."""
    out = []
    for piece in text.strip().split(","):
        piece = piece.strip()
        lo, dots, hi = piece.partition("..")
        if not re.fullmatch(r"[0-9]{1,12}", lo) or (dots and not re.fullmatch(r"[0-9]{1,12}", hi)):
            raise InvalidRequest(f"bad node-id range {piece!r} in {text!r}")
        a, b = int(lo), int(hi) if dots else int(lo)
        if b < a:
            raise InvalidRequest(f"descending node-id range {piece!r} in {text!r}")
        if len(out) + b - a + 1 > MAX_NAMES:
            raise InvalidRequest(f"node-id list {text!r} names more than {MAX_NAMES} nodes")
        out.extend(range(a, b + 1))
    return out


def compress_nids(nids: list[int]) -> str:
    """`[10, 11, 12, 30]` -> `"10..12,30"` (sorted, duplicates dropped)."""
    return _ranges(sorted(set(nids)), "..")


def exec_host(nodes, cores) -> str:
    """`node01/0-3+node02/0,2`: the cores each node gives a job, as PBS writes exec_host
    (consecutive cores as a range)."""
    parts = []
    for node, cs in zip(nodes, cores):
        cs = sorted(cs) or [0]
        if len(cs) > 1 and cs == list(range(cs[0], cs[-1] + 1)):
            parts.append(f"{node}/{cs[0]}-{cs[-1]}")
        else:
            parts.append(f"{node}/" + ",".join(map(str, cs)))
    return "+".join(parts)


def exec_hosts(text: str) -> list[tuple[str, tuple[int, ...]]]:
    """`exec_host` read back: (host, its cores) per part, in order (a part without cores,
    `node01`, has none).  InvalidRequest for a core that is no number or range."""
    out = []
    for part in filter(None, text.split("+")):
        host, _, spec = part.partition("/")
        cores: list[int] = []
        for item in filter(None, spec.split(",")):
            m = _RANGE.match(item)
            if m is None:
                raise InvalidRequest(f"exec_host {text!r}: {item!r} is no core number or range")
            lo = int(m.group(1))
            cores.extend(range(lo, int(m.group(2) or lo) + 1))
        out.append((host, tuple(cores)))
    return out

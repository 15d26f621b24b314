"""`hpcsched man TOPIC`: the manual page of a command or of the configuration file, from
the checkout's man/ or where `pip install` put it (share/man under the install prefix),
shown by man(1) where the host has it, else as plain text read from the page's roff."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path


def roots() -> list[Path]:
    """Where the pages may be: beside the package (a checkout) and the install's share/man."""
    found = [Path(__file__).resolve().parent.parent / "man"]
    for prefix in dict.fromkeys([sysconfig.get_path("data"), sys.prefix, sys.base_prefix]):
        found.append(Path(prefix) / "share" / "man")
    return [r for r in found if (r / "man1" / "hpcsched.1").is_file()]  # (ours: never another product's qsub.1)


def find(topic: str, section: str | None = None) -> Path | None:
    """The page of `topic` (qsub, hpcsched.toml, ...), in `section` if given, else 1 then 5."""
    for root in roots():
        for sec in [section] if section else ["1", "5"]:
            page = root / f"man{sec}" / f"{topic}.{sec}"
            if page.is_file():
                return page
    return None


def topics() -> list[str]:
    return sorted({p.name.rsplit(".", 1)[0] for root in roots() for p in root.glob("man[15]/*.[15]")})


_FONT = re.compile(r"\\f[BIRP]|\\f\(\w\w|\\f\[\w*\]")
_ESCAPES = [("\\-", "-"), ("\\(em", "--"), ("\\(bu", "*"), ("\\&", ""), ("\\ ", " "), ("\\e", "\\")]
_JOINED = {"BR", "RB", "IR", "RI", "BI", "IB"}  # alternating fonts, no space between the words
_BREAKS = {"PP", "LP", "P", "sp", "br", "RS", "RE", "TP", "IP", "HP", "SH", "SS", "nf", "fi", "EX", "EE"}


def _plain(words: str) -> str:
    words = _FONT.sub("", words)
    for escape, char in _ESCAPES:
        words = words.replace(escape, char)
    return words


def text(roff: str, width: int = 78) -> str:
    """A plain rendering of a man page's roff (the macros these pages use), filled to
    `width`, for a host without man(1)."""
    out: list[str] = []
    words: list[str] = []
    indent, verbatim, tag_next = 7, False, False

    def flush(at: int) -> None:
        nonlocal words
        if words:
            out.extend(textwrap.fill(" ".join(words), width, initial_indent=" " * at,
                                     subsequent_indent=" " * at).splitlines())
        words = []

    for line in roff.splitlines():
        if line.startswith(('.\\"', "'\\\"")):
            continue
        m = re.match(r"[.'](\w+)\s*(.*)", line)
        macro, rest = m.groups() if m else ("", line)
        args = [w[1:-1] if w.startswith('"') else w for w in re.findall(r'"[^"]*"|\S+', rest)]
        if verbatim and macro not in ("fi", "EE"):
            out.append(" " * indent + _plain(line))
            continue
        if macro in _BREAKS:
            flush(indent)
            if macro in ("SH", "SS"):
                out += ["", _plain(" ".join(args)).upper() if macro == "SH" else "   " + _plain(" ".join(args))]
                indent = 7
            elif macro in ("PP", "LP", "P", "sp", "TP", "IP", "HP"):
                out.append("")
                indent = 7
                tag_next = macro == "TP"
                if macro == "IP" and args:
                    out.append(" " * 7 + _plain(args[0]))
                    indent = 11
            verbatim = macro in ("nf", "EX") or (verbatim and macro not in ("fi", "EE"))
            continue
        if macro in ("TH", "ad", "na", "hy", "nh", "in", "ti", "ne", "ft", "ps", "ll"):
            continue
        piece = "".join(args) if macro in _JOINED else " ".join(args) if macro else line
        if tag_next:  # .TP: this line is the tag; the paragraph under it is indented
            out.append(" " * 7 + _plain(piece))
            indent, tag_next = 11, False
            continue
        words.append(_plain(piece))
    flush(indent)
    return "\n".join(out).strip("\n") + "\n"


def show(topic: str, section: str | None = None, out=None) -> int:
    """Show the page: 0, or 1 naming the topics there are."""
    page = find(topic, section)
    if page is None:
        sys.stderr.write(f"hpcsched man: no manual page for {topic!r}; there are: {', '.join(topics())}\n")
        return 1
    if out is None and shutil.which("man") and sys.stdout.isatty():
        return subprocess.call(["man", "-l", str(page)], env=dict(os.environ))
    (out or sys.stdout).write(text(page.read_text(encoding="utf-8")))
    return 0

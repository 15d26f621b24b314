"""The one option parser of every PBS-style command, driven by the command's table.

A table is getopt's: each option letter, followed by ':' when it takes a value
(`"h:W:px"`).  A value is attached (`-lwalltime=1:00`) or the next argument, and may begin
with a space (`"-W depend=afterok:1"` as one argument; values are stripped).  Flags may be
clustered (`-fx`).  `--` ends the options.  With `permute` (GNU getopt, as Torque's commands
on Linux) options may also follow operands; without it the first operand ends them
(qsub's script, pbsyod's program and its own arguments).

The commands' front door reads qsub's options before anything else is loaded, so this
module imports nothing heavier than the commands' errors.
"""
from .errors import UsageError

#: qsub's table (qsub -I and a script operand decide, in the front door, where it runs)
QSUB = "a:A:c:C:d:e:F:hIj:J:k:l:m:M:nN:o:p:q:r:S:t:u:v:Vw:W:z"


def parse(argv: list[str], table: str, permute: bool = True, where: str = "", dashes: bool = False
          ) -> tuple[list[tuple[str, str]], list[str]]:
    """(options in the order given as (letter, value), value "" for a flag; operands).
    With `dashes`, a `--` that ends the options is kept as the first operand (OpenPBS's
    `qsub -- executable args` tells a program to run from a script to read)."""
    takes_value = {c for i, c in enumerate(table) if table[i + 1:i + 2] == ":"}
    flags = set(table) - takes_value - {":"}
    opts: list[tuple[str, str]] = []
    operands: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            operands.extend((["--"] if dashes else []) + argv[i:])
            break
        if not arg.startswith("-") or arg == "-":
            if not permute:
                operands.extend(argv[i - 1:])
                break
            operands.append(arg)
            continue
        for j, letter in enumerate(arg[1:], 2):
            if letter in takes_value:
                value = arg[j:]
                if not value:
                    if i >= len(argv):
                        raise UsageError(f"option requires an argument -- '{letter}'{where}")
                    value = argv[i]
                    i += 1
                if "\0" in value:  # no path, name or list may carry one (open() and exec refuse it)
                    raise UsageError(f"illegal character (NUL) in -{letter} value{where}")
                opts.append((letter, value.strip()))
                break
            if letter not in flags:
                raise UsageError(f"invalid option -- '{letter}'{where}")
            opts.append((letter, ""))
    return opts, operands

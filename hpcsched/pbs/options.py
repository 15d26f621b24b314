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


#: Cobalt qsub's table: each option's spellings, the name it is known by, and whether it
#: takes a value (Cobalt 1.0's POSIX qsub, as Mira ran it; see cobalt.py)
COBALT_QSUB = (
    (("-n", "--nodecount"), "nodecount", True), (("-t", "--time"), "time", True),
    (("-A", "--project"), "project", True), (("-q", "--queue"), "queue", True),
    (("--mode",), "mode", True), (("--proccount",), "proccount", True), (("--cwd",), "cwd", True),
    (("--env",), "env", True), (("-O", "--outputprefix"), "outputprefix", True),
    (("-o", "--output"), "output", True), (("-e", "--error"), "error", True),
    (("-i", "--inputfile"), "inputfile", True), (("--jobname",), "jobname", True),
    (("-M", "--notify"), "notify", True), (("--dependencies",), "dependencies", True),
    (("-u", "--umask"), "umask", True), (("--attrs",), "attrs", True),
    (("--run_users", "--user_list"), "run_users", True), (("--run_project",), "run_project", False),
    (("--debuglog",), "debuglog", True), (("--kernel",), "kernel", True),
    (("-K", "--kerneloptions"), "kerneloptions", True), (("--ion_kernel",), "ion_kernel", True),
    (("--ion_kerneloptions",), "ion_kerneloptions", True), (("--geometry",), "geometry", True),
    (("--disable_preboot",), "disable_preboot", False), (("--preemptable",), "preemptable", False),
    (("-h", "--held"), "held", False), (("-I", "--interactive"), "interactive", False),
    (("-d", "--debug"), "debug", False), (("-v", "--verbose"), "verbose", False))


def parse_long(argv: list[str], table, permute: bool = True) -> tuple[list[tuple[str, str]], list[str]]:
    """(options in the order given as (name, value), value "" for a flag; operands) by a
    table of (spellings, name, takes a value), as Python's optparse reads a command line
    (Cobalt's commands are optparse's): `--name value` or `--name=value`, a long name cut
    to any prefix that names one option, `-n10` or `-n 10`, flags clustered (`-hI`), `--`
    ending the options.  Without `permute` the first operand ends them (qsub's command)."""
    longs = {s[2:]: (name, value) for spellings, name, value in table for s in spellings if s.startswith("--")}
    shorts = {s[1]: (name, value) for spellings, name, value in table for s in spellings if len(s) == 2}
    opts: list[tuple[str, str]] = []
    operands: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg == "--":
            operands.extend(argv[i:])
            break
        if arg.startswith("--"):
            given, eq, value = arg[2:].partition("=")
            found = [given] if given in longs else sorted(n for n in longs if n.startswith(given)) if given else []
            if len(found) != 1:
                raise UsageError(f"no such option: --{given}" if not found else
                                 f"ambiguous option: --{given} ({', '.join('--' + n for n in found)}?)")
            name, takes = longs[found[0]]
            if takes and not eq:
                if i >= len(argv):
                    raise UsageError(f"--{found[0]} option requires an argument")
                value, i = argv[i], i + 1
            elif eq and not takes:
                raise UsageError(f"--{found[0]} option does not take a value")
            if "\0" in value:
                raise UsageError(f"illegal character (NUL) in --{found[0]} value")
            opts.append((name, value if takes else ""))
        elif arg.startswith("-") and arg != "-":
            for j, letter in enumerate(arg[1:], 2):
                if letter not in shorts:
                    raise UsageError(f"no such option: -{letter}")
                name, takes = shorts[letter]
                if not takes:
                    opts.append((name, ""))
                    continue
                value = arg[j:]
                if not value:
                    if i >= len(argv):
                        raise UsageError(f"-{letter} option requires an argument")
                    value, i = argv[i], i + 1
                if "\0" in value:
                    raise UsageError(f"illegal character (NUL) in -{letter} value")
                opts.append((name, value))
                break
        elif permute:
            operands.append(arg)
        else:
            operands.extend(argv[i - 1:])
            break
    return opts, operands

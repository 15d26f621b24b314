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
    shorts = {c: (c, table[i + 1:i + 2] == ":") for i, c in enumerate(table) if c != ":"}
    return _scan(argv, shorts, None, permute, dashes, GETOPT, where)


#: the two ways a malformed command line is said: getopt's (PBS) and optparse's (Cobalt)
GETOPT = {"unknown": "invalid option -- '{c}'", "missing": "option requires an argument -- '{c}'"}
OPTPARSE = {"unknown": "no such option: {opt}", "missing": "{opt} option requires an argument"}


def _scan(argv: list[str], shorts: dict, longs: dict | None, permute: bool, dashes: bool, say: dict,
          where: str = "") -> tuple[list[tuple[str, str]], list[str]]:
    """The one walk over a command line: `shorts` and `longs` map a letter or a long name to
    (the option's name, takes a value); getopt's values are stripped, optparse's kept."""
    opts: list[tuple[str, str]] = []
    operands: list[str] = []
    i = 0

    def value_of(opt: str, attached: str, c: str, given: bool = False) -> str:
        nonlocal i
        value = attached
        if not value and not given:  # (`--name=` gives "": `-n` alone, the next word)
            if i >= len(argv):
                raise UsageError(say["missing"].format(opt=opt, c=c) + where)
            value, i = argv[i], i + 1
        if "\0" in value:  # no path, name or list may carry one (open() and exec refuse it)
            raise UsageError(f"illegal character (NUL) in {opt} value{where}")
        return value if longs is not None else value.strip()
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
        if arg.startswith("--") and longs is not None:
            given, eq, attached = arg[2:].partition("=")
            found = [given] if given in longs else sorted(n for n in longs if n.startswith(given)) if given else []
            if len(found) > 1:
                raise UsageError(f"ambiguous option: --{given} ({', '.join('--' + n for n in found)}?)")
            if not found:
                raise UsageError(say["unknown"].format(opt=f"--{given}", c="-"))
            name, takes = longs[found[0]]
            if eq and not takes:
                raise UsageError(f"--{found[0]} option does not take a value")
            opts.append((name, value_of(f"--{found[0]}", attached, "-", bool(eq)) if takes else ""))
            continue
        for j, letter in enumerate(arg[1:], 2):
            if letter not in shorts:
                raise UsageError(say["unknown"].format(opt=f"-{letter}", c=letter) + where)
            name, takes = shorts[letter]
            if takes:
                opts.append((name, value_of(f"-{letter}", arg[j:], letter)))
                break
            opts.append((name, ""))
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
    return _scan(argv, shorts, longs, permute, False, OPTPARSE)

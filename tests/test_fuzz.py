"""Bad input of every kind, generated from seeds: no traceback, no hang, a documented exit
status, no change to the store by a command that failed, no damaged store taken for a sound
one (tests/fuzz.py says how each is judged; benchmarks/fuzz.py runs many more)."""
import io
import os

import pytest

from fuzz import cases, run_case

N = {"command": 400, "config": 150, "trace": 1000, "store": 200}  # (trace cases are cheap: 0.5 ms)


def _rig(tmp_path):
    from hpcsched.pbs import qctl, qsub
    from hpcsched.store.site import init_site
    home = tmp_path / "home"
    init_site(home, nodes=4, cores=4)
    text = (home / "config.toml").read_text().replace('server_name = "', 'server_name = "headnode" #"')
    (home / "config.toml").write_text(text.replace('managers = ["alice"]', 'managers = ["root"]'))
    for i in range(3):
        qsub.submit(["-N", f"j{i}", "-l", "walltime=60"], stdin=io.StringIO("true\n"), cwd=str(tmp_path), env={})
    qsub.submit(["-t", "1-3", "-l", "walltime=60"], stdin=io.StringIO("true\n"), cwd=str(tmp_path), env={})
    from hpcsched.store.journaled import Batch
    from hpcsched.store.site import load_site
    batch = Batch(load_site(home))
    with batch.open():  # a snapshot too, for the store cases that damage it
        text, changes = batch.source
        batch.store.compact(batch.sched.to_dict(), batch.seq, {"toml": text, "overlay": changes})
    qctl.QHOLD(["2"], out=io.StringIO())
    return home


@pytest.mark.parametrize("kind", sorted(N))
def test_generated_bad_input(tmp_path, monkeypatch, kind):
    monkeypatch.setenv("HPCSCHED_USER", "alice")
    home = tmp_path / "home"
    monkeypatch.setenv("HPCSCHED_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    _rig(tmp_path)
    config = (home / "config.toml").read_text()
    failures = []
    for k, case in enumerate(cases(kind, 1, N[kind])):
        wrong = run_case(case, home)
        if wrong:
            failures.append(f"case {k}: {wrong}: {case}")
        if kind == "config":
            (home / "config.toml").write_text(config)
    os.environ.pop("HPCSCHED_FLAVOR", None)
    assert not failures, "\n".join(failures[:15]) + f"\n({len(failures)} of {N[kind]})"


def test_the_statuses_judged_are_the_man_pages_table():
    from fuzz import STATUSES
    page = open(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "man", "man1",
                             "hpcsched.1")).read()
    rows = page.split(".TS\n", 1)[1].split(".TE", 1)[0].splitlines()[2:]
    table = {flavor: {int(r.split("\t")[0]) for r in rows if r.split("\t")[column] != "\\-"}
             for column, flavor in ((1, "torque"), (2, "openpbs"), (3, "cobalt"))}
    assert table == STATUSES


def test_every_commands_page_has_an_exit_status_section_with_usage_and_site_errors():
    """The fuzzed statuses are checked against each command's own page (fuzz.page_statuses):
    every page has the section, and every command can fail on usage (2) and on a site it
    cannot use (1)."""
    from fuzz import MAN1, page_statuses

    from hpcsched.pbs import front
    pages = [prog for prog in front.COMMANDS if os.path.exists(os.path.join(MAN1, f"{prog}.1"))]
    assert len(pages) > 40
    for prog in pages:
        listed = page_statuses(prog, "torque")
        success = {0} if prog != "pbsyod" else set()  # (pbsyod's is the application's)
        assert listed is not None and success | {1, 2} <= listed, (prog, listed)

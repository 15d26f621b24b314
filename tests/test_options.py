"""The one option parser every PBS-style command uses (getopt tables)."""
import pytest

from hpcsched.pbs.errors import UsageError
from hpcsched.pbs.options import QSUB, parse


def test_values_attached_separate_or_with_a_leading_space():
    opts, rest = parse(["-lwalltime=60", "-N", "job", "-W depend=afterok:1", "script.sh"], QSUB, permute=False)
    assert opts == [("l", "walltime=60"), ("N", "job"), ("W", "depend=afterok:1")] and rest == ["script.sh"]


def test_clustered_flags_then_a_value():
    assert parse(["-fx1", "-uBob"], "fx1u:") == ([("f", ""), ("x", ""), ("1", ""), ("u", "Bob")], [])
    assert parse(["-hNname"], QSUB) == ([("h", ""), ("N", "name")], [])


def test_permute_lets_options_follow_operands_unless_told_not_to():
    assert parse(["1", "-h", "o", "2"], "h:") == ([("h", "o")], ["1", "2"])
    assert parse(["sh", "-c", "x"], "", permute=False) == ([], ["sh", "-c", "x"])
    assert parse(["-h", "--", "-5"], "h") == ([("h", "")], ["-5"])
    assert parse(["-p", "-5"], "p:") == ([("p", "-5")], [])  # a value may look like an option


@pytest.mark.parametrize("argv, message", [
    (["-Z"], "invalid option -- 'Z'"),
    (["-N"], "option requires an argument -- 'N'"),
    (["-hZ"], "invalid option -- 'Z'"),
])
def test_malformed_lines_are_usage_errors(argv, message):
    with pytest.raises(UsageError, match=message) as e:
        parse(argv, QSUB)
    assert e.value.status == 2


def test_a_start_time_missing_its_day_or_month_is_the_next_one_to_come():
    # Torque's and PBS's qsub -a: a bare hhmm already past is tomorrow, a DDhhmm already
    # past is next month (a past DD was taken as now: the job was eligible at once)
    from datetime import datetime
    from hpcsched.pbs.attributes import parse_start_after
    now = datetime(2026, 12, 20, 12, 0).timestamp()
    read = {t: datetime.fromtimestamp(parse_start_after(t, now)) for t in
            ("1100", "1300", "191300", "211300", "12191300", "2612191300")}
    assert read == {"1100": datetime(2026, 12, 21, 11, 0), "1300": datetime(2026, 12, 20, 13, 0),
                    "191300": datetime(2027, 1, 19, 13, 0), "211300": datetime(2026, 12, 21, 13, 0),
                    "12191300": datetime(2026, 12, 19, 13, 0), "2612191300": datetime(2026, 12, 19, 13, 0)}
    for bad in ("١٢٣٤", "12345", "2613011300"):
        with pytest.raises(UsageError, match="illegal -a value"):
            parse_start_after(bad, now)

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

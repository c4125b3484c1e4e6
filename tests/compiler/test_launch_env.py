"""A bool scalar input reaches launch expressions as 0/1 (a compiler plan's variant guards test it)."""

from solforge.candidate import launch_env as cand_env
from solforge.compile.launcher import launch_env


def test_bool_scalars_are_ints_in_launch_expressions():
    for env in (launch_env({"n": 4}, {"flag": True, "off": False, "p": 0.5}, {}),
                cand_env({"n": 4}, {"flag": True, "off": False, "p": 0.5}, {})):
        assert env["flag"] == 1 and env["off"] == 0 and env["p"] == 0.5 and env["n"] == 4
        assert type(env["flag"]) is int

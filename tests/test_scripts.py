"""Every script answers --help, spells each flag in snake_case and cites nothing a user cannot
see."""

import re
from pathlib import Path

import pytest
from conftest import script_help

SCRIPTS = sorted(
    path.stem for path in (Path(__file__).resolve().parents[1] / "scripts").glob("*.py")
)
FLAG = re.compile(r"(?<![\w-])--[a-z0-9][a-z0-9_-]*")


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_help_spells_every_flag_in_snake_case(name):
    flags = set(FLAG.findall(script_help(name)))
    assert flags, f"scripts/{name}.py --help lists no flags"
    kebab_only = sorted(
        flag for flag in flags if "-" in flag[2:] and "--" + flag[2:].replace("-", "_") not in flags
    )
    assert kebab_only == [], (
        f"scripts/{name}.py has flags without a snake_case spelling: {kebab_only}"
    )


@pytest.mark.parametrize("name", SCRIPTS)
def test_script_help_cites_no_tracker_numbers(name):
    assert not re.search(r"\bissues? \d+", script_help(name), re.IGNORECASE)

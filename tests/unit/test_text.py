"""The one text rule (slurm_pool.text): full-string words, control characters, terminal-safe text, strict numbers."""

from __future__ import annotations

import math
import re

import pytest
from rich.console import Console
from rich.text import Text

from slurm_pool import text


@pytest.mark.parametrize(
    "rule,good,bad",
    [
        ("name", ["pool", "k8s-lend", "a_b"], ["pool\n", "Pool", "-a", "", "a b", "a" * 64]),
        ("user", ["alice", "_svc"], ["alice\n", "alice\r\n", "Alice", "a;b", ""]),
        ("node", ["a-gpu1", "n1.example", "1n"], ["n1\n", "n1 ", "-n1", "n[1-2]", "é1"]),
        ("host", ["localhost", "ctl-1.example.org", "10.0.0.1", "fe80::1a"], ["ctl\n", "a b", "x(y)", "-x", ""]),
        ("feature", ["proja", "mig_7x1g", "a+b"], ["a,b", "a\n", "a|b", "", "x" * 65]),
        ("time", ["UNLIMITED", "60", "1:00:00", "2-00:00:00"], ["1:00:00\n", "1:0", "-1", "1h", "１０"]),
        ("tres", ["cpu", "gres/gpu", "gres/gpu:a100"], ["gres/gpu\n", "gpus", "gres/gpu:A100", "gres/mps"]),
        ("mig-profile", ["3g.20gb", "1g.10gb+me"], ["3g.20gb\n", "8g.80gb", "3g.20GB", "3g.２0gb"]),
        ("k8s-label", ["default", "kserve-test"], ["Default", "a.b", "a\n", "-a", "a" * 64]),
        ("k8s-name", ["slurm-pool-rebalance", "a.b"], ["a\n", "A", "a_b"]),
        ("path", ["/var/lib/x", "/", "/a/b+c@d"], ["relative", "/a b", "/a,b", "/a=b", "/a\n", "/é"]),
    ],
)
def test_rules_match_in_full(rule, good, bad) -> None:
    assert [v for v in good if not text.matches(rule, v)] == []
    assert [v for v in bad if text.matches(rule, v)] == []
    for v in bad:
        with pytest.raises(ValueError, match="does not match"):
            text.check(rule, v, "field")


def test_every_rule_is_named_shaped_and_compiled_once() -> None:
    assert set(text.RULES) == set(text.SHAPES) and len(text.RULES) == len(text.SHAPES)
    for name, pattern in text.RULES.items():
        assert pattern is text.RULES[name] and pattern.pattern  # compiled once, then the same object
        assert name in text.RULES
    assert "nope" not in text.RULES
    with pytest.raises(KeyError):
        text.RULES["nope"]


def test_a_rule_is_compiled_only_when_asked_for() -> None:
    # The node hooks start a Python for every job: a rule they never use must cost them nothing, not even a compile.
    rules = text.Rules({"good": "[a-z]+", "broken": "(["})
    assert rules["good"].fullmatch("abc") and "broken" in rules and len(rules) == 2
    with pytest.raises(re.error):
        rules["broken"]


@pytest.mark.parametrize(
    "value,found",
    [
        ("plain text, é and 雪", []),
        ("a\nb", ["\\x0a"]),
        ("a\r", ["\\x0d"]),
        ("\x1b[31mred", ["\\x1b"]),
        ("nel\x85", ["\\x85"]),
        ("line\u2028sep", ["\\u2028"]),
        ("\u202eevil", ["\\u202e"]),
        ("bom\ufeff", ["\\ufeff"]),
        ("tab\t", ["\\x09"]),
        ("del\x7f", ["\\x7f"]),
    ],
    ids=ascii,
)
def test_control_characters_are_found(value, found) -> None:
    assert text.control_chars(value) == found
    assert text.has_control(value) == bool(found)
    if found:
        with pytest.raises(ValueError, match="control characters"):
            text.check_free_text(value, "description")
    else:
        assert text.check_free_text(value, "description") == value


def test_free_text_bounds() -> None:
    with pytest.raises(ValueError, match="holds one of"):
        text.check_free_text("a|b", "description", forbid="|")
    with pytest.raises(ValueError, match="longer than 3"):
        text.check_free_text("abcd", "x", max_len=3)
    with pytest.raises(ValueError, match="not a string"):
        text.check_free_text(["a"], "x")


@pytest.mark.parametrize("value", ["/a/../b", "/a/./b", "/.."])
def test_paths_have_no_dot_components(value) -> None:
    with pytest.raises(ValueError, match="'.' or '..'"):
        text.check_path(value, "--dev-dir")


@pytest.mark.parametrize(
    "value,want",
    [
        ("node \x1b[2J", "node \\x1b[2J"),
        ("a\nb", "a\\x0ab"),
        ("\u202etxt", "\\u202etxt"),
        ("[bold]x[/]", "[bold]x[/]"),
        (42, "42"),
    ],
    ids=ascii,
)
def test_shown_makes_controls_visible(value, want) -> None:
    assert text.shown(value) == want
    assert not text.has_control(text.shown(value))


@pytest.mark.parametrize("value", ["[/]", "[bold]x", "x[/bold]", "[link=file:///etc/passwd]y[/link]", "\x1b[31m[/]"])
def test_markup_safe_text_prints_as_itself_in_rich_markup(value) -> None:
    console = Console(record=True, width=200, color_system=None)
    console.print(f"[bold]{text.markup_safe(value)}[/bold]")  # no MarkupError, no tag taken from the data
    assert console.export_text().rstrip("\n") == text.shown(value)


def test_rich_text_alone_keeps_escape_sequences() -> None:
    # Why shown() is needed even with Text objects: Rich strips only a few controls, not ESC.
    assert "\x1b" in Text("\x1b[2J").plain


@pytest.mark.parametrize(
    "value,want",
    [(3, 3), ("42", 42), (" 7 ", 7), ("-1", -1), (2.0, 2)],
)
def test_strict_int_takes_whole_numbers(value, want) -> None:
    assert text.strict_int(value) == want


@pytest.mark.parametrize(
    "value",
    [True, False, None, "1_0", "١٢", "²", "1.5", 1.5, math.nan, math.inf, "nan", "0x10", [], {}, "", "1e3"],
    ids=ascii,
)
def test_strict_int_refuses_what_is_not_a_whole_number(value) -> None:
    with pytest.raises(ValueError):
        text.strict_int(value, "count")


@pytest.mark.parametrize("value,want", [(1, 1.0), (0.5, 0.5), ("2.5", 2.5), ("1e3", 1000.0), (".5", 0.5)])
def test_strict_float_takes_finite_numbers(value, want) -> None:
    assert text.strict_float(value) == want


@pytest.mark.parametrize(
    "value",
    [True, None, math.nan, math.inf, -math.inf, "nan", "inf", "Infinity", "1_0", "١", "1e400", 10**400, "", [1]],
    ids=ascii,
)
def test_strict_float_refuses_non_finite_and_odd_numbers(value) -> None:
    with pytest.raises(ValueError):
        text.strict_float(value, "gpus")

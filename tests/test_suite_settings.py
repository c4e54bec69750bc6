"""The suite's own settings that keep a test's outcome independent of the machine's load."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def test_property_tests_are_not_timed() -> None:
    """Eight xdist workers on two cores: a slow draw or example is the load, not a bug (a
    clean-clone run failed one on HealthCheck.too_slow)."""
    active = settings()
    assert active.deadline is None
    assert HealthCheck.too_slow in active.suppress_health_check
    assert HealthCheck.filter_too_much not in active.suppress_health_check


class _Finalized:
    """Garbage in a cycle whose finalizer runs Python code: the collector may run it in the
    middle of an AST build, and the interpreter may switch threads there."""

    def __init__(self) -> None:
        self.cycle = self

    def __del__(self) -> None:
        sum(range(2000))


def test_ast_parse_takes_turns_across_threads() -> None:
    """pytest's report of a failed test parses its source while a test's thread may print a
    traceback (3.11 parses it for the carets): concurrent AST builds crashed a run under load
    with an INTERNALERROR (python/cpython#106905). Without the turns, threads here failed
    "AST constructor recursion depth mismatch" on 3.11.7 in every run."""
    import ast
    import threading

    source = "def f(x):\n" + "".join(f"    x = [x, {i}, (x, {{'k': x}})]\n" for i in range(120))
    expected = ast.dump(ast.parse(source))
    errors: list[BaseException] = []
    wrong: list[str] = []

    def parse_often() -> None:
        try:
            for _ in range(25):
                garbage = [_Finalized() for _ in range(50)]
                del garbage
                tree = ast.dump(ast.parse(source))
                if tree != expected:
                    wrong.append(tree)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=parse_often) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert not wrong


# A count from which the suite's own run draws a share (`examples()`, tests/support.py).
NAMED_FROM = 60


def test_a_property_count_of_sixty_or_more_is_named_with_examples() -> None:
    """Each run of the suite's profile re-checks one fixed draw: a count of 60 or more is
    `max_examples=examples(N)`, all N drawn under the thorough and explore profiles. A
    stateful model keeps its count whole (the board's must reach a deep path), written on
    the line of its `stateful_step_count`."""
    import re
    from pathlib import Path

    tests = Path(__file__).parent
    plain: list[str] = []
    for path in sorted(tests.rglob("*.py")):
        text = path.read_text()
        if "max_examples=" not in text:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for count in re.findall(r"max_examples=(\d+)", line):
                if int(count) >= NAMED_FROM and "stateful_step_count" not in line:
                    plain.append(f"{path.relative_to(tests)}:{number}")
    assert not plain, plain


def test_a_property_without_a_count_draws_sixty_in_the_suite_and_all_in_the_thorough_run() -> None:
    """237 property tests name no `max_examples` (Hypothesis's default, 100): the suite's
    profile draws 60 of their fixed draw, `thorough` and `explore` all 100."""
    from hypothesis import settings

    assert settings.get_profile("forewarn").max_examples == 60
    assert settings.get_profile("thorough").max_examples == 100
    assert settings.get_profile("explore").max_examples == 100

"""README and docs/ state facts the code decides: each command they show exists and parses, and
each count they give (model files per table, the demo's tables and what init removes) is the
code's. A change to either side that leaves the other behind fails here."""

from __future__ import annotations

import re
import shlex

import pytest

from cdc_simulator.tables import tracked_tables
from runner.project.tables import model_files
from tests.conftest import PROJECT_DIR

PAGES = [PROJECT_DIR / "README.md", *sorted((PROJECT_DIR / "docs").glob("*.md"))]
PREFIXES = ("python -m runner ", "python -m cdc_tooling ", "make ", "dbt ")
# the synopsis forms: [optional], <placeholder>, a | b, a / b, repeated ...
SYNOPSIS = re.compile(r"[\[\]<>|]|\.\.\.| / ")
NUMBERS = {2: "two", 3: "three", 4: "four", 6: "six", 8: "eight", 12: "twelve"}


def _commands() -> list[tuple[str, str]]:
    """(page, command) for every command in a fenced block or an inline code span of the pages."""
    found = []
    for page in PAGES:
        text = page.read_text()
        snippets = [line for block in re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL) for line in block.splitlines()]
        snippets += [" ".join(span.split()) for span in re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.DOTALL))]
        for snippet in (s for s in snippets if any(p.strip() in s for p in PREFIXES)):
            lexer = shlex.shlex(snippet.removeprefix("$ "), posix=True, punctuation_chars="&;|")
            lexer.whitespace_split, lexer.commenters = True, "#"
            words: list[str] = []
            for token in [*lexer, "&&"]:  # commands joined by && or ; count one by one
                if token in ("&&", ";", "||"):
                    command = " ".join(shlex.quote(w) if " " in w else w for w in words)
                    if command.startswith(PREFIXES):
                        found.append((page.name, command))
                    words = []
                else:
                    words.append(token)
    return found


COMMANDS = _commands()


def _argparse_check(parser, args: list[str], command: str) -> None:
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    assert args and args[0] in subparsers.choices, f"{command}: no subcommand {args[:1]}"
    options = {o for a in subparsers.choices[args[0]]._actions for o in a.option_strings}
    unknown = [t.split("=")[0] for t in args if t.startswith("--") and t.split("=")[0] not in options]
    assert not unknown, f"{command}: {args[0]} has no option {unknown}"
    if not SYNOPSIS.search(command) and not any(re.fullmatch(r"[A-Z][A-Z_,]*", t) for t in args):
        try:
            parser.parse_args(args)
        except SystemExit as exc:
            raise AssertionError(f"{command}: does not parse") from exc


def _dbt_check(args: list[str], command: str) -> None:
    from dbt.cli.main import cli

    assert args and args[0] in cli.commands, f"{command}: dbt has no command {args[:1]}"
    group = cli.commands[args[0]]
    if hasattr(group, "commands"):
        assert len(args) > 1 and args[1] in group.commands, f"{command}: dbt {args[0]} has no command {args[1:2]}"
        group, args = group.commands[args[1]], args[1:]
    options = {o for p in group.params for o in p.opts}
    unknown = [t for t in args if t.startswith("-") and t not in options]
    assert not unknown, f"{command}: dbt {args[0]} has no option {unknown}"


@pytest.mark.parametrize(("page", "command"), COMMANDS, ids=[f"{p}: {c}" for p, c in COMMANDS])
def test_every_command_the_docs_show_exists_and_parses(page, command):
    from cdc_tooling.cli import _parser as tooling_parser
    from runner.run.cli import _parser as runner_parser

    words = shlex.split(command)
    if command.startswith("python -m runner "):
        _argparse_check(runner_parser(), words[3:], command)
    elif command.startswith("python -m cdc_tooling "):
        _argparse_check(tooling_parser(), words[3:], command)
    elif command.startswith("make "):
        makefile = (PROJECT_DIR / "Makefile").read_text()
        targets = set(re.findall(r"^([\w-]+):", makefile, re.MULTILINE))
        names = {w for w in words[1:] if "=" not in w}
        assert names <= targets, f"{page}: {command}: the Makefile has no target {names - targets}"
        variables = {w.split("=")[0] for w in words[1:] if "=" in w}
        assert variables <= set(re.findall(r"\$\((\w+)\)", makefile)), f"{page}: {command}: the Makefile uses no {variables}"
    else:
        _dbt_check(words[1:], command)


def test_the_docs_show_commands_of_every_kind():
    """The extraction above has teeth: it finds the commands README's quick start shows."""
    readme = {c for p, c in COMMANDS if p == "README.md"}
    assert {"make demo", "make test", "python -m runner init", "python -m runner run"} <= readme
    assert any(c.startswith("python -m runner scaffold --name ") for c in readme)
    assert any(c.startswith("dbt show --inline ") for c in readme)
    with pytest.raises(AssertionError, match="has no option"):
        _dbt_check(["show", "--no-such-flag"], "dbt show --no-such-flag")
    from runner.run.cli import _parser

    with pytest.raises(AssertionError, match="scaffold has no option"):
        _argparse_check(_parser(), ["scaffold", "--nmae", "a=b"], "python -m runner scaffold --nmae a=b")
    with pytest.raises(AssertionError, match="does not parse"):
        _argparse_check(_parser(), ["run", "extra"], "python -m runner run extra")


def test_the_counts_the_docs_give_are_the_codes():
    readme = (PROJECT_DIR / "README.md").read_text()
    tables = (PROJECT_DIR / "docs" / "tables.md").read_text()
    per_table = len(model_files("any", "change_tables"))
    assert {len(model_files("any", channel)) for channel in ("change_tables", "ces", "debezium")} == {per_table}
    assert f"{NUMBERS[per_table]} one-line\nmodel files" in readme
    assert f"plus {NUMBERS[per_table]} one-line SQL files" in tables
    # the worked example shows that many files
    example = tables.split("## Declaring a tracked table")[1].split("```sql")[1].split("```")[0]
    assert len(re.findall(r"^-- models/.*\.sql$", example, re.MULTILINE)) == per_table
    demo = [t for t in tracked_tables(PROJECT_DIR) if t.demo]
    assert len(demo) == len(tracked_tables(PROJECT_DIR)), "every table the project declares is the demo's"
    assert f"removes the demo's {NUMBERS[len(demo)]} tables" in readme
    assert f"removes the demo's {NUMBERS[len(demo)]} tables" in tables
    assert f"their {NUMBERS[per_table * len(demo)]} model files and their {NUMBERS[per_table * len(demo)]} YAML entries" in tables
    assert "(" + ", ".join(f"`{t.name}`" for t in demo) + ")" in tables.replace("\n   ", "")

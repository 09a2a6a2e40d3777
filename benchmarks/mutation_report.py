"""`make mutation`'s report: how many mutants of the safety code the tests kill.

Reads what ``mutmut run`` left in ``mutants/`` and prints, per module, the mutants
killed out of those tested, counting apart the *message* mutants (a change inside a
string literal only: an error's wording, a docstring) that no behaviour test should have
to pin. Every surviving non-message mutant is printed with its justification from
``benchmarks/mutation_survivors.md`` (``- `mutant name`: why it may live``), or as
UNJUSTIFIED. Exits 1 when the score of non-message mutants is under the target (90%)
or a survivor is unjustified, so the target says plainly whether the code is pinned.

``--names PATTERN...`` prints instead the names of the non-message mutants matching the
patterns that are not killed yet (untested or surviving), one per line: ``mutmut run
$(python benchmarks/mutation_report.py --names 'loopwise.tools.gates.*')`` tests a module
without spending the shared cores on mutants the score leaves out, and, once tests are
added, tests again only what they may kill (mutmut must have generated the mutants: run
it once, or ``mutmut print-time-estimates``).

Uses mutmut's own result files and diff function, so mutmut is pinned to 3.8.* (the
``mutation`` extra).
"""

from __future__ import annotations

import fnmatch
import io
import re
import sys
import tokenize
from collections import Counter
from pathlib import Path

from mutmut.mutation.data import SourceFileMutationData
from mutmut.mutation.diff_apply import get_diff_for_mutant
from mutmut.stats import status_by_exit_code
from mutmut.utils.file_utils import walk_mutatable_files

TARGET = 0.90
JUSTIFIED = Path(__file__).resolve().parent / "mutation_survivors.md"


def _code_tokens(line: str) -> list[str] | None:
    """The line's tokens with every string literal blanked (``None``: not one line of code)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(line.strip() + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None
    return ["<str>" if t.type == tokenize.STRING else t.string for t in tokens]


def is_message_mutant(diff: str) -> bool:
    """Whether the mutant changes nothing but the contents of string literals."""
    removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and line[1:2] != "-"]
    added = [line[1:] for line in diff.splitlines() if line.startswith("+") and line[1:2] != "+"]
    if not removed or len(removed) != len(added):
        return False
    for before, after in zip(removed, added, strict=True):
        old, new = _code_tokens(before), _code_tokens(after)
        if old is None or new is None or old != new:
            return False
    return True


def justifications() -> dict[str, str]:
    """``{mutant name: why}`` from the survivors file."""
    if not JUSTIFIED.exists():
        return {}
    found = re.findall(r"^- `([^`]+)`: (.+)$", JUSTIFIED.read_text(encoding="utf-8"), re.M)
    return dict(found)


_DEAD = ("killed", "caught by type check", "timeout", "segfault")


def names(patterns: list[str]) -> int:
    """Print the non-message mutants matching ``patterns`` that are not killed yet."""
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in data.exit_code_by_key.items():
            if not any(fnmatch.fnmatchcase(name, p) for p in patterns):
                continue
            if status_by_exit_code[code] in _DEAD:
                continue
            if not is_message_mutant(get_diff_for_mutant(name, path=path)):
                print(name)
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--names"]:
        return names(sys.argv[2:])
    why = justifications()
    tested: Counter[str] = Counter()
    killed: Counter[str] = Counter()
    messages: Counter[str] = Counter()
    survivors: list[tuple[str, str | None]] = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        for name, code in data.exit_code_by_key.items():
            status = status_by_exit_code[code]
            module = name.split(".x", 1)[0]
            if status in ("not checked", "skipped"):
                continue
            if is_message_mutant(get_diff_for_mutant(name, path=path)):
                messages[module] += 1
                continue
            tested[module] += 1
            if status in _DEAD:
                killed[module] += 1
            else:
                survivors.append((name, why.get(name)))
    return _print(tested, killed, messages, survivors)


def _print(
    tested: Counter[str],
    killed: Counter[str],
    messages: Counter[str],
    survivors: list[tuple[str, str | None]],
) -> int:
    for module in sorted(tested):
        share = killed[module] / tested[module]
        print(
            f"{module:<24} {killed[module]:>5} of {tested[module]:>5} killed ({share:.0%}); "
            f"{messages[module]} message mutants not counted"
        )
    total, dead = sum(tested.values()), sum(killed.values())
    score = dead / total if total else 0.0
    print(f"{'all':<24} {dead:>5} of {total:>5} killed ({score:.0%}); target {TARGET:.0%}")
    unjustified = [name for name, reason in survivors if reason is None]
    for name, reason in survivors:
        print(f"survived: {name} — {reason or 'UNJUSTIFIED'}")
    if not total:
        print("no mutants were tested: run `make mutation` (mutmut run) first")
        return 1
    return 0 if score >= TARGET and not unjustified else 1


if __name__ == "__main__":
    sys.exit(main())

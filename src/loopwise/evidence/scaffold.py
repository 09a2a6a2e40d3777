"""Starting a project: what ``loopwise init workflow|agent|hybrid|compare [DIR]`` writes.

Each architecture is a small runnable project made from the canonical examples (DESIGN §12):
the target and its ``offline_model``, a 10-case dataset and one pytest test, so that
``pytest``, ``loopwise check``, ``loopwise run --model scripted`` and ``loopwise eval
--model scripted`` pass on it at once, with no key and no network. ``compare`` is one task
(ticket triage) written twice, as a workflow and as an agent, with 49 labelled tickets, so
the first ``loopwise eval`` prints a recommendation between them. The files ship inside
the package (``loopwise/templates/<kind>/``, package data of the wheel); their names
differ per kind, so all of them can share one folder.

``loopwise init examples [DIR]`` writes the canonical examples themselves (DESIGN §12: the
ticket triage, the order investigation, the refund desk, the triage agent, with the
announcement, live-triage and MCP examples beside them) as ``workflows/`` and ``agents/``
with their data, the layout the guides' commands use. The wheel ships the checkout's own
``workflows/`` and ``agents/`` as ``loopwise/templates/examples/`` (pyproject's hatch
``sources``): one copy in the repository. Run from a checkout (an editable install), the
checkout's folders are read directly.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

from loopwise.errors import ConfigError

__all__ = [
    "EXAMPLES",
    "KINDS",
    "TEMPLATES",
    "Examples",
    "Template",
    "init_examples",
    "init_project",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Template:
    """One kind of starter project."""

    kind: str
    """``workflow``, ``agent``, ``hybrid`` or ``compare``."""
    title: str
    """What it writes, for ``wrote ... in DIR`` (``an agent project``)."""
    target: str
    """The target it writes, as ``loopwise run`` takes it (``triage.py:triage``)."""
    dataset: str
    """Its labeled cases (JSONL of ``{"input", "expected"}``)."""
    example: str
    """An input for a first run (text: ``--input-text``)."""
    eval_flags: tuple[str, ...] = ()
    """What ``loopwise eval`` needs besides the dataset (a scorer)."""
    others: tuple[str, ...] = ()
    """More targets it writes for the same task: ``eval`` measures them beside ``target``."""

    @property
    def command(self) -> str:
        """The command that writes it."""
        return f"loopwise init {self.kind}"

    @property
    def targets(self) -> tuple[str, ...]:
        """Every target it writes, ``target`` first."""
        return (self.target, *self.others)

    def commands(self) -> list[str]:
        """What to run in the new project, in order: test, review, run, measure."""
        target = self.target
        return [
            "pytest",
            *(f"loopwise check {t}" for t in self.targets),
            f"loopwise run {target} --model scripted --input-text {shlex.quote(self.example)}",
            shlex.join(
                [
                    *("loopwise", "eval", *self.targets, "--dataset", self.dataset),
                    *("--model", "scripted", *self.eval_flags),
                ]
            ),
        ]


TEMPLATES: dict[str, Template] = {
    "workflow": Template(
        kind="workflow",
        title="a workflow project",
        target="triage.py:triage",
        dataset="triage_cases.jsonl",
        example="I was charged twice for my subscription, please refund one.",
    ),
    "agent": Template(
        kind="agent",
        title="an agent project",
        target="orders_agent.py:investigate",
        dataset="orders_cases.jsonl",
        example="Why did customer C-1004's orders fail?",
    ),
    "hybrid": Template(
        kind="hybrid",
        title="a hybrid project",
        target="refunds.py:refund_desk",
        dataset="refunds_cases.jsonl",
        example="Order O-3001 arrived broken, I want my money back.",
        eval_flags=(
            # Its effects go to the sandbox the module declares (make_eval_deps), its runs
            # to the eval's own store, its gates are answered by the eval: no flag needed.
            *("--scorer", "refunds.py:refund_matches"),
        ),
    ),
    "compare": Template(
        kind="compare",
        title="one task as a workflow and as an agent",
        target="triage_workflow.py:triage",
        others=("triage_agent.py:triage_agent",),
        dataset="tickets.jsonl",
        example="My card was charged twice for one order, please refund one charge.",
    ),
}
"""The starter project of each kind."""

KINDS = tuple(TEMPLATES)


@dataclass(frozen=True, kw_only=True, slots=True)
class Examples:
    """The canonical examples, as ``loopwise init examples`` writes them."""

    folders: tuple[str, ...]
    """The folders it writes, each with its data (``workflows``, ``agents``)."""
    ticket: str
    """A ticket for the triage workflow (a JSON object: ``--input``)."""
    question: str
    """A question for the order investigation (``--input-text``)."""
    complaint: str
    """A complaint for the refund desk (``--input-text``)."""

    @property
    def command(self) -> str:
        """The command that writes them."""
        return "loopwise init examples"

    def commands(self) -> list[str]:
        """What to run on them, offline: each architecture once, then the comparison."""
        scripted = ("--model", "scripted")
        return [
            shlex.join(
                [
                    "loopwise",
                    "run",
                    "workflows/ticket_triage.py:triage",
                    *scripted,
                    "--input",
                    self.ticket,
                ]
            ),
            shlex.join(
                [
                    "loopwise",
                    "run",
                    "agents/order_investigation.py:investigate",
                    *scripted,
                    "--input-text",
                    self.question,
                ]
            ),
            shlex.join(
                [
                    "loopwise",
                    "run",
                    "workflows/refund_desk.py:refund_desk",
                    *scripted,
                    "--input-text",
                    self.complaint,
                ]
            ),
            shlex.join(
                [
                    "loopwise",
                    "eval",
                    "workflows/ticket_triage.py:triage",
                    "agents/triage_agent.py:triage_agent",
                    "--dataset",
                    "workflows/data/tickets.jsonl",
                    *scripted,
                ]
            ),
        ]


EXAMPLES = Examples(
    folders=("workflows", "agents"),
    ticket='{"subject": "Charged twice", "body": "My card was charged twice for order O-1001."}',
    question="Why did the last three orders of customer C-1004 fail?",
    complaint="Order O-1003 arrived broken and I want my money back.",
)
"""What ``loopwise init examples`` writes and what to run on it."""

_LEFT_OUT = (".pyc", ".pyo", ".db", ".db-journal", ".db-wal", ".db-shm")
"""What a checkout's example folders may hold that is not the example (built or cached)."""


def _examples_root() -> Traversable:
    """Where the examples' folders are: the wheel's package data, else (a checkout) the
    checkout itself."""
    shipped = resources.files("loopwise").joinpath("templates", "examples")
    if shipped.is_dir():
        return shipped
    checkout = Path(__file__).resolve().parents[3]
    if (
        all((checkout / f).is_dir() for f in EXAMPLES.folders)
        and (checkout / "workflows" / "ticket_triage.py").is_file()
    ):
        return checkout
    raise ConfigError(
        f"the examples are missing from this installation of loopwise (expected {shipped}); "
        "reinstall loopwise",
        name="examples",
    )


def _tree(folder: Traversable, prefix: str) -> list[tuple[str, Traversable]]:
    """``(relative path, file)`` of every file under ``folder``, caches and builds left out."""
    found = []
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        path = f"{prefix}/{entry.name}"
        if entry.is_dir() and entry.name != "__pycache__":
            found += _tree(entry, path)
        elif entry.is_file() and not entry.name.endswith(_LEFT_OUT):
            found.append((path, entry))
    return found


def init_examples(directory: str | Path = ".", *, force: bool = False) -> list[Path]:
    """Write the canonical examples (``workflows/``, ``agents/`` and their data) into
    ``directory`` (made when missing); the paths written.

    Raises :class:`~loopwise.errors.ConfigError` like :func:`init_project`: a
    ``directory`` that is a file or cannot be written, or files that exist already (nothing
    is written then; ``force=True`` overwrites them).
    """
    root = _examples_root()
    sources = [pair for f in EXAMPLES.folders for pair in _tree(root.joinpath(f), f)]
    return _write(Path(directory), sources, force=force)


def _files(kind: str) -> list[Traversable]:
    folder = resources.files("loopwise").joinpath("templates", kind)
    if not folder.is_dir():
        raise ConfigError(
            f"the {kind} template is missing from this installation of loopwise "
            f"(expected {folder}); reinstall loopwise",
            name=kind,
        )
    return sorted(
        (f for f in folder.iterdir() if f.is_file() and not f.name.endswith((".pyc", ".pyo"))),
        key=lambda f: f.name,
    )


def init_project(kind: str, directory: str | Path = ".", *, force: bool = False) -> list[Path]:
    """Write the starter project of ``kind`` into ``directory`` (made when missing); the
    paths written.

    Raises :class:`~loopwise.errors.ConfigError` for an unknown kind, a ``directory`` that
    is a file or cannot be created or written (naming it), or files that exist already
    (nothing is written then; ``force=True`` overwrites them).
    """
    if kind not in TEMPLATES:
        raise ConfigError(f"init: unknown kind {kind!r}; one of {', '.join(KINDS)}", name="kind")
    return _write(Path(directory), [(s.name, s) for s in _files(kind)], force=force)


def _write(root: Path, sources: list[tuple[str, Traversable]], *, force: bool) -> list[Path]:
    """Copy each ``(relative path, file)`` under ``root``, refusing to overwrite unless
    ``force``; the paths written."""
    if root.exists() and not root.is_dir():
        raise ConfigError(f"init: {root} is a file, not a folder", name="directory")
    clashes = [name for name, _ in sources if (root / name).exists()]
    if clashes and not force:
        more = f" and {len(clashes) - 5} more" if len(clashes) > 5 else ""
        raise ConfigError(
            f"init: {root} already has {', '.join(clashes[:5])}{more}; nothing written "
            "(choose another folder, or --force to overwrite)",
            name="directory",
        )
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"init: cannot create the folder {root} ({e.strerror or e})", name="directory"
        ) from e
    written = []
    for name, source in sources:
        path = root / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(source.read_bytes())
        except OSError as e:
            raise ConfigError(
                f"init: cannot write {path} ({e.strerror or e})", name="directory"
            ) from e
        written.append(path)
    return written

"""Loading steps named on the command line: ``path/to/file.py:name``, ``pkg.module:name``,
or a module alone when it exposes exactly one step (not counting the nodes of a workflow
it exposes) or names the one it means with ``default_target = "name"``.

A target module may also define ``offline_model`` (a model, a zero-argument callable
returning one, or a mapping from each target's step name to either, when a module holds
several targets): ``--model scripted`` then uses it instead of the generic scripted
model, so an example's offline run is sensible.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import site
import sys
import sysconfig
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from loopwise.core.function_step import FunctionStep
from loopwise.core.names import did_you_mean
from loopwise.core.step import Step
from loopwise.errors import ConfigError, TargetError
from loopwise.models.options import OpenAIOptions
from loopwise.models.port import Model

__all__ = [
    "DEPS_FACTORY",
    "EVAL_DEPS_FACTORY",
    "Target",
    "calling_modules",
    "deps_factory",
    "import_module_of",
    "load_target",
    "model_for",
    "schema_filler_note",
    "spec_of",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Target:
    """A loaded target: the spec as written, its step and its module."""

    spec: str
    """What the user wrote (``workflows/ticket_triage.py:triage``)."""
    step: Step
    """The step object."""
    module: ModuleType
    """The module it came from."""


def load_target(spec: str) -> Target:
    """Load ``spec``; raises :class:`TargetError` with a one-line reason."""
    module_part, _, name = spec.partition(":")
    if not module_part:
        raise TargetError(f"target {spec!r} names no module (use path.py:name)", name=spec)
    module = import_module_of(module_part, spec)
    if name:
        obj = defined(module, name, _UNDEFINED)
        if obj is _UNDEFINED:
            steps = [n for n, v in vars(module).items() if isinstance(v, Step)]
            hint = did_you_mean(name, steps)
            raise TargetError(f"target {spec!r}: module has no attribute {name!r}{hint}", name=spec)
        if not isinstance(obj, Step):
            raise TargetError(f"target {spec!r}: {name!r} is not a step", name=spec)
        return Target(spec=spec, step=obj, module=module)
    default = defined(module, "default_target")
    chosen = defined(module, default) if isinstance(default, str) else None
    if isinstance(chosen, Step):
        return Target(spec=spec, step=chosen, module=module)
    found = [v for k, v in vars(module).items() if not k.startswith("_") and isinstance(v, Step)]
    unique = _outermost(list({id(s): s for s in found}.values()))
    if len(unique) != 1:
        raise TargetError(
            f"target {spec!r} exposes {len(unique)} steps; name one as {spec}:NAME", name=spec
        )
    return Target(spec=spec, step=unique[0], module=module)


def _outermost(steps: list[Step]) -> list[Step]:
    """The steps that are not nodes of another one's graph: a workflow module exposes its
    nodes too, but ``path.py`` alone means the workflow."""
    inner: set[int] = set()
    for candidate in steps:
        # getattr: a Workflow's nodes (node name -> step), asked without importing the
        # workflow module for a target that defines none (an agent's CLI run).
        nodes = getattr(candidate, "steps", None)
        if isinstance(nodes, Mapping):
            inner.update(id(step) for step in nodes.values())
    return [s for s in steps if id(s) not in inner]


def import_module_of(module_part: str, spec: str, *, what: str = "target") -> ModuleType:
    """The module of ``spec`` (a ``file.py`` path or a dotted name), loaded once.

    Any error while loading user code becomes a :class:`TargetError` whose message starts
    with ``what`` (``target``, ``--scorer``) and the spec.
    """
    if module_part.endswith(".py") or "/" in module_part:
        path = Path(module_part)
        if not path.is_file():
            raise TargetError(f"{what} {spec!r}: no such file {module_part}", name=spec)
        return _import_file(path.resolve(), spec, what)
    here = str(Path.cwd())
    if here not in sys.path and "" not in sys.path:
        # As `python -m` does: a package in the working directory is importable from the
        # `loopwise` command too (its own sys.path starts at its script's folder).
        sys.path.append(here)
    try:
        return importlib.import_module(module_part)
    except ImportError as e:
        raise TargetError(f"{what} {spec!r}: cannot import {module_part}: {e}", name=spec) from e
    except (Exception, SystemExit) as e:  # user code: any error while loading it
        raise TargetError(f"{what} {spec!r}: {type(e).__name__} while loading: {e}") from e


_IMPORTING = threading.RLock()
_UNDEFINED = object()


def defined(module: ModuleType, name: str, default: object = None) -> object:
    """What the user's ``module`` defines as ``name`` (``default`` when it does not): a
    target, a convention (``make_deps``, ``offline_model``, ``make_eval_deps``), a scorer."""
    # getattr: a user's module, read by a name a convention or the command line gives;
    # it goes through a module's own __getattr__ too (PEP 562).
    return getattr(module, name, default)


"""Held while a target file loads: a module is in ``sys.modules`` before its code has run,
so another thread (the inbox resuming runs at once) must wait for it, not take it half
made. Re-entrant: a target may load another."""


def _import_file(path: Path, spec: str, what: str) -> ModuleType:
    with _IMPORTING:
        return _import_file_once(path, spec, what)


def _import_file_once(path: Path, spec: str, what: str) -> ModuleType:
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    mod_name = f"_loopwise_target_{path.stem}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    loader_spec = importlib.util.spec_from_file_location(mod_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise TargetError(f"{what} {spec!r}: cannot load {path}", name=spec)
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[mod_name] = module
    # Sibling modules of an example (its data helpers) import by plain name.
    sys.path.insert(0, str(path.parent))
    try:
        loader_spec.loader.exec_module(module)
    except (Exception, SystemExit) as e:  # sys.exit() or argparse at import: that target fails
        del sys.modules[mod_name]
        raise TargetError(f"{what} {spec!r}: {type(e).__name__} while loading: {e}") from e
    finally:
        sys.path.remove(str(path.parent))
    return module


def model_for(
    target: Target,
    name: str | None,
    *,
    structured_mode: str | None = None,
    api: str | None = None,
    store: bool = False,
    options: OpenAIOptions | None = None,
) -> Model:
    """The model a run of ``target`` uses: ``name``/``LOOPWISE_MODEL``, with the target's
    own ``offline_model`` standing in for ``scripted``; ``structured_mode`` pins an
    OpenAI model's structured-output rung, ``api`` its API (``chat``, ``responses``),
    ``store`` its Responses store setting and ``options`` its call options."""
    from loopwise.models.openai import resolve_model  # the SDK loads only when a model is made

    model = resolve_model(
        name, structured_mode=structured_mode, api=api, store=store, options=options
    )
    if model.name == "scripted" and hasattr(target.module, "offline_model"):
        offline = _own_offline(target, target.module.offline_model)
        candidate = offline() if callable(offline) and not isinstance(offline, Model) else offline
        if not isinstance(candidate, Model):
            raise TargetError(f"{target.spec}: offline_model is not a model", name=target.spec)
        return candidate
    return model


def _own_offline(target: Target, offline: object) -> object:
    """The target's own entry of a module's ``offline_model`` when it maps target names
    (each step's ``name``) to models: a module of several agents gives each its script."""
    if not isinstance(offline, Mapping):
        return offline
    name = target.step.name
    if name not in offline:
        known = ", ".join(sorted(map(str, offline))) or "none"
        raise TargetError(
            f"{target.spec}: offline_model maps no model to {name!r} (it has: {known})",
            name=target.spec,
        )
    return offline[name]


DEPS_FACTORY = "make_deps"
"""The name of a target module's deps factory: called with no arguments, once per run
the command line starts or resumes (and per run of an eval), when ``--deps`` is not given."""
EVAL_DEPS_FACTORY = "make_eval_deps"
"""The sandbox an eval's runs get instead when its tools take effect
(:mod:`loopwise.evidence.evals.sandbox`), and an eval's run when it is resumed."""


def deps_factory(target: Target | None, spec: str | None = None) -> Callable[[], object] | None:
    """Where the deps of a run the command line starts or resumes come from: ``spec``
    (``--deps module:function`` or ``file.py:function``) when given, else the target
    module's ``make_deps``, else nowhere (``None``). The returned function makes them;
    what a factory raises becomes a :class:`ConfigError` naming it."""
    if spec is not None:
        module_part, _, name = spec.partition(":")
        if not module_part or not name:
            raise ConfigError(f"--deps {spec!r}: name a function, module:function", name="deps")
        module = import_module_of(module_part, spec, what="--deps")
        fn, where = defined(module, name), f"--deps {spec}"
        if fn is None:
            raise ConfigError(f"{where}: {module_part} defines no {name!r}", name="deps")
    elif target is not None and hasattr(target.module, DEPS_FACTORY):
        fn, where = defined(target.module, DEPS_FACTORY), f"{target.spec}: {DEPS_FACTORY}()"
    else:
        return None
    if not callable(fn):
        raise ConfigError(f"{where}: not a function of no arguments", name="deps")
    factory: Callable[[], object] = fn

    def make() -> object:
        try:
            return factory()
        except Exception as e:  # user code
            raise ConfigError(f"{where} raised {type(e).__name__}: {e}", name="deps") from e

    return make


def schema_filler_note(target: Target, model: Model | str | None) -> str | None:
    """A warning when ``model`` is the generic scripted model standing in for a target
    with no ``offline_model``: its answers are schema filler (valid shapes, made-up
    values), so an eval's correct rate measures nothing."""
    if isinstance(model, str) or model is None or model.name != "scripted":
        return None
    if hasattr(target.module, "offline_model"):
        return None
    return (
        f"{target.spec}: its module defines no offline_model, so --model scripted answers "
        "with schema filler (valid shapes, made-up values) and its correct rate measures "
        "nothing; define offline_model in that module (README: Testing offline)"
    )


_SPECS: dict[int, tuple[Step, str | None]] = {}
"""``spec_of``'s answers by step id (the step is held, so its id is not reused)."""
_SPECS_KEPT = 512
_LIBRARY_DIRS = tuple(
    {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    | set(site.getsitepackages())
)


def spec_of(step: Step, *, callers: Sequence[str] = ()) -> str | None:
    """The import spec (``package.module:name``) another process loads ``step`` from, or
    ``None`` when it has none: a step bound to a name in no importable module (made in a
    function, or in a script run as ``python script.py`` or ``python -m pkg.job``, whose
    ``__main__`` another process cannot import without running the script again).

    Looked for, in order: a function step's own module, the modules named in ``callers``
    (those of the code that started the run), then every imported module outside the
    standard library and site-packages (an installed package is found through
    ``callers`` only). The answer is kept per step.
    """
    known = _SPECS.get(id(step))
    if known is not None and known[0] is step:
        return known[1]
    home = step.fn.__module__ if isinstance(step, FunctionStep) else None
    first = [home] if isinstance(home, str) else []
    found = _find_spec(step, [*first, *callers])
    if len(_SPECS) >= _SPECS_KEPT:
        _SPECS.clear()
    _SPECS[id(step)] = (step, found)
    return found


def calling_modules(depth: int = 2, limit: int = 30) -> list[str]:
    """The names of the modules on the calling stack, from ``depth`` frames up, nearest
    first (what :func:`spec_of` searches before the rest)."""
    names: list[str] = []
    frame = sys._getframe(depth)
    while frame is not None and len(names) < limit:
        name = frame.f_globals.get("__name__")
        if isinstance(name, str) and name not in names:
            names.append(name)
        frame = frame.f_back  # type: ignore[assignment]
    return names


def _find_spec(step: Step, preferred: list[str]) -> str | None:
    modules = sys.modules
    named = [(n, modules.get(n)) for n in preferred]
    rest = [(n, m) for n, m in list(modules.items()) if n not in preferred and _user_code(m)]
    for name, module in [*named, *rest]:
        importable = _importable_name(name, module)
        if importable is None:
            continue
        try:
            bound = [k for k, v in list(vars(module).items()) if v is step]
        except TypeError:  # something in sys.modules that is not a module
            continue
        public = sorted(k for k in bound if not k.startswith("_"))
        if public:
            return f"{importable}:{public[0]}"
    return None


def _user_code(module: object) -> bool:
    """A module of the user's (not the standard library's, not an installed package's)."""
    where = getattr(module, "__file__", None)  # getattr: a built-in module has no __file__
    return isinstance(where, str) and not where.startswith(_LIBRARY_DIRS)


def _importable_name(name: str | None, module: ModuleType | None) -> str | None:
    """The name another process imports ``module`` by, or ``None`` when it cannot."""
    if name is None or module is None or name == "loopwise" or name.startswith("loopwise."):
        return None
    spec = module.__spec__
    real = None if spec is None else spec.name
    if not isinstance(real, str) or real.startswith("_loopwise_target_"):
        return None  # a script's __main__, or a file the CLI loaded under a private name
    # Not `python -m pkg.job`'s __main__ either: importing pkg.job to resume would run
    # the job's top level again (its side effects, a second run).
    return real if name == real else None

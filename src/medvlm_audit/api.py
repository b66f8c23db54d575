"""Python API mirroring the CLI, so the same run works from a notebook: run, export, report, demo.

Everything here reaches a suite only through the suite registry (:func:`medvlm_audit.suites.get_suite`): a run
config names its suite, the suite's ``Options`` validate its options, its stages plan the trials, its ``tidy``
scores the store and its ``analyse`` feeds the one report writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import shutil
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from medvlm_audit import __version__
from medvlm_audit.aio import one_loop, run_sync
from medvlm_audit.config import SHARED_FIELDS, RunConfig, _error_lines, load_config, validate_config
from medvlm_audit.errors import AuditError, ConfigError, RunLockedError
from medvlm_audit.export import export_columns, export_table
from medvlm_audit.models.base import Model
from medvlm_audit.models.registry import BACKENDS, check_model_spec, load_model
from medvlm_audit.plan import Plan, StageContext
from medvlm_audit.registry import check_known
from medvlm_audit.runner import (
    RunSummary,
    TrialIndex,
    check_decodings,
    check_endpoints,
    check_models,
    check_sources,
    execute,
    identify_servers,
)
from medvlm_audit.store import STORE_FILE, RunStore
from medvlm_audit.suites import Suite, get_suite

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass
class RunResult:
    run_dir: Path
    summary: RunSummary
    results_parquet: Path
    results_csv: Path
    report: Path | None = None


def _as_config(config: RunConfig | dict[str, Any] | str | Path) -> RunConfig:
    if isinstance(config, RunConfig):
        return config
    if isinstance(config, dict):
        return validate_config(config)
    return load_config(config)


def resolve_config(config: RunConfig | dict[str, Any] | str | Path) -> tuple[RunConfig, Suite, BaseModel]:
    """Validate a run config against its suite: the suite's options with its ``Options`` model and every model's
    backend against the backend registry (the suite's own backends included). Errors name the config's
    source, the key and the nearest valid name."""
    cfg = _as_config(config)
    source = cfg._source
    try:
        suite = get_suite(cfg.suite)
    except ConfigError as e:
        raise ConfigError(f"{source}: key 'suite': {e}") from None
    try:
        opts = suite.Options.model_validate(cfg.options)
    except ValidationError as e:
        known = [*suite.Options.model_fields, *SHARED_FIELDS]
        raise ConfigError(f"{source}: invalid options for suite {cfg.suite!r}:\n  "
                          + "\n  ".join(_error_lines(e, known))) from None
    for i, m in enumerate(cfg.models):  # a later stage's models (e.g. judges) are checked when it is built
        check_known("backend", [m.backend], BACKENDS.names(), listed_as="registered", exc=ConfigError,
                    where=f"{source}: key 'models[{i}].backend' (model {m.name!r}): ")
    return cfg, suite, opts


def embedded_config(suite: str, out: str | Path, *, options: Mapping[str, Any] | None = None, **flags: Any
                    ) -> RunConfig:
    """The embedded default of a suite (phantom data and its reference models, offline), prepared under ``out``.

    ``options`` (``demo --set``) are checked against the suite's ``embedded_options`` when it declares them: a
    bad key or value is one line naming the key, listing the valid ones, before anything is written."""
    s = get_suite(suite)
    given = dict(options or {})
    spec = getattr(s, "embedded_options", None)
    if spec is not None:
        from medvlm_audit.demo_options import check_demo_options

        given = check_demo_options(suite, given, spec)
    data = s.embedded_config(Path(out), **given, **flags)
    return validate_config(data, source=f"embedded {suite} default")


def plan_for(cfg: RunConfig | dict[str, Any] | str | Path, stage: int = 0) -> Plan:
    """Plan the first stage of a run (loads and validates its probe sets before any model is called)."""
    cfg, suite, opts = resolve_config(cfg)
    return suite.stages()[stage].plan(StageContext(cfg, opts, Path(cfg.run_dir)))


def _add_counts(acc: dict[str, Any], d: dict[str, Any]) -> None:
    """Add one stage's per-model counts into ``acc``: numbers are summed, nested dicts (counts by kind, each
    ``{"n": .., "sample": ..}``) are added key by key, anything else (a sample message) keeps the first seen.

    >>> acc = {"errors": 1, "error_kinds": {"empty": {"n": 1, "sample": "a"}}}
    >>> _add_counts(acc, {"errors": 2, "error_kinds": {"empty": {"n": 2, "sample": "b"}, "timeout": {"n": 1}}})
    >>> acc
    {'errors': 3, 'error_kinds': {'empty': {'n': 3, 'sample': 'a'}, 'timeout': {'n': 1}}}
    """
    for k, v in d.items():
        if isinstance(v, dict):
            sub = acc.setdefault(k, {})
            if isinstance(sub, dict):
                _add_counts(sub, v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            old = acc.get(k, 0)
            acc[k] = old + v if isinstance(old, (int, float)) else v
        else:
            acc.setdefault(k, v)


def _merge(summaries: list[RunSummary]) -> RunSummary:
    if len(summaries) == 1:
        return summaries[0]
    per: dict[str, dict[str, Any]] = {}
    for s in summaries:
        for name, d in s.per_model.items():
            _add_counts(per.setdefault(name, {}), d)
    skipped: dict[str, int] = {}
    for s in summaries:
        for k, v in s.skipped.items():
            skipped[k] = skipped.get(k, 0) + v
    return RunSummary(sum(s.n_trials for s in summaries), sum(s.n_skipped for s in summaries), per,
                      sum(s.elapsed_s for s in summaries), sum(s.plan_s for s in summaries),
                      summaries[0].first_input_s, store=summaries[-1].store, skipped=skipped)


def preflight(ctx: StageContext, suite: Suite, stages: list[Any]) -> None:
    """Everything a run needs that can be checked before any work or any file: every stage's model entries
    (numbers in range, keys known to the backend) and the suite's own ``preflight`` (extras, optional packages,
    knowledge bases, paths), which lists every problem at once; raises ConfigError."""
    from medvlm_audit.extras import require_extra
    from medvlm_audit.models.registry import BACKEND_EXTRAS

    seen: set[str] = set()
    problems: list[str] = []
    for stage in stages:
        try:
            specs = stage.models(ctx)
        except AttributeError:  # a stage whose models depend on an earlier stage's answers (ctx.store)
            continue
        for spec in specs:
            if spec.name in seen:
                continue
            seen.add(spec.name)
            try:
                check_model_spec(spec)
                if spec.backend in BACKEND_EXTRAS:  # e.g. an hf judge: found now, not after the first stage
                    require_extra(BACKEND_EXTRAS[spec.backend], f"model {spec.name!r} (backend {spec.backend})")
            except ConfigError as e:
                problems.append(str(e))
    problems += list(suite.preflight(ctx))
    if problems:
        raise ConfigError("; ".join(problems) if len(problems) == 1 else
                          f"{len(problems)} problems before the run:\n  " + "\n  ".join(problems))


def _created_by_us(run_dir: Path) -> tuple[Path | None, set[str] | None]:
    """(the topmost folder the run would create, or None; the run folder's entries if it exists)."""
    top = None
    p = run_dir.absolute()
    while not p.exists():
        top = p
        if p.parent == p:
            break
        p = p.parent
    if top is not None:
        return top, None
    try:
        return None, set(os.listdir(run_dir)) if run_dir.is_dir() else None
    except OSError:
        return None, None


def _remove_created(created: tuple[Path | None, set[str] | None], run_dir: Path | None = None) -> None:
    top, before = created
    if top is not None:
        shutil.rmtree(top, ignore_errors=True)
    elif before is not None and run_dir is not None:
        for name in set(os.listdir(run_dir)) - before:
            target = run_dir / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)


def run(
    config: RunConfig | dict[str, Any] | str | Path,
    *,
    models: list[Model] | None = None,
    retry_errors: bool = False,
    progress: bool = True,
    max_error_rate: float = 0.05,
    retry_missing_logprobs: bool = False,
    only_models: Collection[str] | None = None,
    batch_poll_s: float | None = None,
    batch_max_wait_s: float | None = None,
) -> RunResult:
    """Execute (or resume) a run: every stage of its suite plans, asks every pending input and commits each
    answer as it arrives; then the tidy table is exported.

    ``models`` overrides the config's models of the same name with already-built Model objects;
    ``max_error_rate`` is recorded in the summary (:func:`medvlm_audit.health.failing_models` judges by it);
    ``only_models``: ask only these models (a stage with none of them is skipped); ``batch_poll_s`` /
    ``batch_max_wait_s`` override those options of every ``batch: true`` model (:mod:`medvlm_audit.batch`).
    Works inside a running event loop (a Jupyter notebook): the run then goes on its own loop in a worker thread
    while the caller waits; from async code, ``await run_async(...)`` keeps the caller's loop free."""
    with one_loop(), _old_objects_frozen():  # one loop for the endpoint check, server identification and stages
        return _run(config, models=models, retry_errors=retry_errors, progress=progress, max_error_rate=max_error_rate,
                    retry_missing_logprobs=retry_missing_logprobs, only_models=only_models,
                    batch_poll_s=batch_poll_s, batch_max_wait_s=batch_max_wait_s)


_FROZEN = [0]  # runs in progress that froze the heap (a nested or concurrent run leaves it to the first)


@contextlib.contextmanager
def _old_objects_frozen() -> Iterator[None]:
    """Leave the objects alive when a run starts (the imported modules, pandas, numpy: hundreds of thousands) out
    of the garbage collector's full collections during the run (``gc.freeze``), and hand them back at its end
    (``gc.unfreeze``). A full collection otherwise scans them all, ~40 ms each, and how many happen grows with
    what the run allocates, so it was a cost per request (issue 23). Nothing is kept alive that would be freed:
    reference counting frees as before; only cyclic garbage among the old objects waits until the end. A process
    that has frozen objects itself (a forking server) is left alone."""
    import gc

    # a host process that froze its own heap (a forking server) manages it: left alone
    first = _FROZEN[0] == 0 and gc.get_freeze_count() == 0
    _FROZEN[0] += 1
    if first:
        gc.freeze()
    try:
        yield
    finally:
        _FROZEN[0] -= 1
        if first:
            gc.unfreeze()


def _run(
    config: RunConfig | dict[str, Any] | str | Path,
    *,
    models: list[Model] | None,
    retry_errors: bool,
    progress: bool,
    max_error_rate: float,
    retry_missing_logprobs: bool,
    only_models: Collection[str] | None,
    batch_poll_s: float | None,
    batch_max_wait_s: float | None,
) -> RunResult:
    cfg, suite, opts = resolve_config(config)
    run_dir = Path(cfg.run_dir)
    override = {m.name: m for m in models or ()}
    context: dict[str, Any] = {"run_dir": run_dir, "batch_poll_s": batch_poll_s, "batch_max_wait_s": batch_max_wait_s}

    def build(ctx: StageContext, stage: Any) -> tuple[list[Model], dict]:
        specs = [s for s in stage.models(ctx) if only_models is None or s.name in only_models]
        built = [override.get(s.name) or load_model(s, context=context) for s in specs]
        check_models(built)
        decodings = {s.name: s.decoding for s in specs if s.decoding is not None}
        identify_servers(built)  # server: auto -> the engine, so the decoding is sent where it reads it
        check_decodings(built, decodings, cfg.decoding)  # a decoding a server cannot run is refused here
        check = getattr(stage, "check", None)
        if check is not None:  # the suite refuses what a model cannot do, before anything is written
            check(ctx, built)
        check_endpoints(built)  # a dead or refusing endpoint fails here, naming the URL, before anything is written
        return built, decodings

    stages = list(suite.stages())
    ctx = StageContext(cfg, opts, run_dir)
    created = _created_by_us(run_dir)
    try:  # a failed start leaves nothing behind, so the same command works once the cause is fixed
        preflight(ctx, suite, stages)
        plan = stages[0].plan(ctx)
        if not plan.trials:
            raise AuditError("the plan is empty: no case has an applicable condition")
        built, per_model = build(ctx, stages[0])
        # a bad image fails before the store exists; files an earlier invocation hashed, unchanged since, are not
        # re-read
        source_keys = check_sources(TrialIndex(plan.trials), _known_image_keys(run_dir))
        store = RunStore.open_for_run(run_dir, lock_wait_s=cfg.store_lock_wait_s)  # refuses a second writer
    except BaseException as e:
        if not isinstance(e, RunLockedError):  # another process runs here: what it writes is not ours to remove
            _remove_created(created, run_dir)
        raise
    summaries: list[RunSummary] = []
    try:
        meta = store.meta()
        store.set_meta(
            run_id=meta.get("run_id") or f"{run_dir.name}-{uuid.uuid4().hex[:8]}",
            suite=cfg.suite,
            config=cfg.recorded(),  # credentials in base URLs redacted
            package_version=__version__,
            python=platform.python_version(),
            seeds={"construction": cfg.seed, "resampling": 0},
            started_at=meta.get("started_at") or time.time(),
        )
        for i, stage in enumerate(stages):
            if i > 0:
                ctx.store = store
                plan = stage.plan(ctx)
                if not plan.trials:
                    continue
                built, per_model = build(ctx, stage)
                source_keys = check_sources(TrialIndex(plan.trials), store.image_hashes())
            if not built:  # none of ``only_models`` answers in this stage
                continue
            summaries.append(run_sync(execute(
                store, plan, built, cfg.decoding, retry_errors=retry_errors, progress=progress,
                retry_missing_logprobs=retry_missing_logprobs,
                workers=cfg.workers, model_decoding=per_model, source_keys=source_keys, render_in=cfg.render_in,
                store_totals=False)))
        if not summaries:
            raise AuditError(f"none of the models {sorted(only_models or ())} answers in any stage of this run")
        summary = _merge(summaries)
        summary.store = store.model_totals()  # once, after the last stage (each stage's would be overwritten)
        summary.max_error_rate = max_error_rate
        store.set_meta(last_summary=summary.as_dict(), finished_at=time.time())
        # from the store this run holds open: what the suite's tidy derives from new answers (scores) is kept
        # there, so a later invocation, ``report`` or ``view`` reads it instead of computing it again
        pq, csv = export(run_dir, store=store)
    finally:
        store.close()
    return RunResult(run_dir, summary, pq, csv)


def _known_image_keys(run_dir: Path) -> set[str]:
    """The image recipe keys (file path, size, mtime, ops) an earlier invocation of this run hashed, read
    without taking the run's lock (empty for a new run or a store that cannot be read)."""
    if not (run_dir / STORE_FILE).exists():
        return set()
    try:
        with RunStore.open_dir(run_dir, readonly=True) as store:
            return set(store.image_hashes())
    except Exception:  # noqa: BLE001  only an optimisation: the files are then checked again
        return set()


async def run_async(config: RunConfig | dict[str, Any] | str | Path, **kw: Any) -> RunResult:
    """:func:`run` from async code (a notebook cell with ``await``): the run goes in a worker thread, so the
    caller's event loop stays responsive. Same arguments and result as :func:`run`."""
    return await asyncio.to_thread(run, config, **kw)


def _open(run_dir: str | Path) -> RunStore:
    """The run store, read-only (export and report work on archived runs on read-only media)."""
    if not (Path(run_dir) / STORE_FILE).exists():
        raise AuditError(f"{run_dir}: no run store ({STORE_FILE}) found")
    return RunStore.open_dir(run_dir, readonly=True)


def _suite_name(meta: dict[str, Any]) -> str:
    """The suite recorded in a run store's metadata (every run store records one)."""
    name = meta.get("suite")
    if not name:
        raise AuditError("the run store records no suite: it was not written by `medvlm-audit run` "
                         "(re-run it, or import it with the command of its suite)")
    return str(name)


def _suite_of(meta: dict[str, Any]) -> Suite:
    return get_suite(_suite_name(meta))


def suite_of_run(run_dir: str | Path) -> Suite:
    """The suite that made a run folder (recorded in its store), through the registry: how a reader of run folders
    (``medvlm-audit view``) learns the suite without naming or looking one up itself."""
    with _open(run_dir) as store:
        return _suite_of(store.meta())


def tidy_store(store: RunStore) -> pd.DataFrame:
    """The scored tidy table of an open run store, by the suite recorded in it (through the suite registry)."""
    return _suite_of(store.meta()).tidy(store)


def tidy(run_dir: str | Path) -> pd.DataFrame:
    """The scored tidy table of a run (one row per model x case x condition x sample), by its suite."""
    with _open(run_dir) as store:
        return tidy_store(store)


def export(run_dir: str | Path, out_dir: str | Path | None = None, *, store: RunStore | None = None
           ) -> tuple[Path, Path]:
    """Tidy Parquet + CSV of a run (one row per model x case x condition x sample). Written from the suite's
    pandas-free table where it builds one (``Suite.tidy_columns``: the same bytes), else from its tidy table.
    ``store``: the run's store when the caller holds it open (else it is opened read-only)."""
    out = Path(out_dir) if out_dir else Path(run_dir)

    def build(st: RunStore) -> tuple[Any, Any]:
        suite = _suite_of(st.meta())
        cols = suite.tidy_columns(st)
        return cols, (suite.tidy(st) if cols is None else None)

    if store is not None:
        cols, df = build(store)
    else:
        with _open(run_dir) as opened:
            cols, df = build(opened)
    return export_columns(cols, out) if cols is not None else export_table(df, out)


def decoding_sent(store: RunStore) -> dict[str, list[Any]]:
    """Each decoding field as the run's stored requests asked it: field -> its distinct values (sorted; a suite
    overrides the config's shared decoding per trial, e.g. faithfulness asks 2048 new tokens, reports 512 and a
    temperature per strategy). Empty for a run without stored requests."""
    import json

    if not store.has_table("requests"):
        return {}
    df = store.frame("SELECT DISTINCT json_extract(input, '$.decoding') AS d FROM requests")
    values: dict[str, set[str]] = {}
    for text in df["d"].dropna():
        try:
            dec = json.loads(text)
        except ValueError:
            continue
        if isinstance(dec, dict):
            for k, v in dec.items():
                values.setdefault(str(k), set()).add(json.dumps(v))
    return {k: sorted((json.loads(v) for v in vs), key=lambda x: (x is None, str(type(x)), x if x is not None else 0))
            for k, vs in values.items()}


def _run_info(meta: dict[str, Any], run_dir: Path, sent: dict[str, list[Any]] | None = None) -> dict[str, Any]:
    cfg = meta.get("config") or {}
    return {
        "run_id": meta.get("run_id", run_dir.name),
        "suite": _suite_name(meta),
        "package_version": meta.get("package_version", __version__),
        "report_version": __version__,
        "seeds": meta.get("seeds"),
        "models": [m.get("name") for m in cfg.get("models", [])] or None,
        "imported_from": meta.get("imported_from"),
        "last_summary": meta.get("last_summary"),
        "config": cfg or None,  # the resolved config as recorded (credentials redacted), shown in words
        "run_dir": cfg.get("run_dir") or str(run_dir.resolve()),  # recorded paths are shown relative to it
        "decoding_sent": sent or None,  # the decoding the requests carried: the config block says what was run
    }


def decodings_as_run(store: RunStore) -> pd.DataFrame:
    """Per model, each distinct decoding its engine was asked (the answers' stored effective decoding, in the
    contract's field names) with the number of answers, and ``not_pinned``: the fields left to the server's
    defaults or the model's generation config (empty when every field was sent). Empty for a run whose models
    do not record one (in-process reference models) or that predates the record."""
    import json

    import pandas as pd

    from medvlm_audit.models.flavours import CONTRACT_FIELDS

    cols = ["model", "server", "answers", *CONTRACT_FIELDS, "not_pinned"]
    if not (store.has_table("answer_details") and store.has_table("effective_decodings")):
        return pd.DataFrame(columns=cols)
    df = store.frame("SELECT q.model, e.decoding, COUNT(*) AS answers FROM answer_details d "
                     "JOIN effective_decodings e ON e.id = d.effective JOIN requests q ON q.key = d.key "
                     "GROUP BY 1, 2 ORDER BY 1, 2")
    rows = []
    for model, text, n in df.itertuples(index=False):
        eff = json.loads(text)
        row = {"model": model, "server": eff.get("server"), "answers": int(n)}
        row.update({f: (", ".join(map(str, eff.get(f) or [])) if f == "stop" else eff.get(f))
                    for f in CONTRACT_FIELDS})
        row["not_pinned"] = ", ".join(f for f in CONTRACT_FIELDS if f != "seed" and eff.get(f) is None)
        rows.append(row)
    return pd.DataFrame(rows, columns=cols)


def _decoding_section(decodings: pd.DataFrame) -> Any:
    from medvlm_audit.report.html import table_to_html
    from medvlm_audit.report.sections import Section

    cap = ("What each model's engine was asked, read off the sent requests as that engine reads them (top_k 0 = "
           "off), with the answers asked so. 'not_pinned' lists the fields left to the server's defaults or the "
           "model's generation config (set the model's server: to pin them).")
    return Section("Decoding as run", table_to_html(decodings.fillna("server default"), caption=cap))


def designed_behaviours(store: RunStore) -> dict[str, str]:
    """model -> the behaviour its reference model was built to show (recorded by the runner from the model's
    ``designed`` attribute; empty for real models)."""
    meta = store.meta()
    return {k.split(":", 1)[1]: str(v) for k, v in meta.items() if k.startswith("designed:") and v}


def _add_driving_cases(result: Any, run_dir: Path, suite: Suite) -> None:
    """The report's "cases behind the verdicts" section (flipped answers per model and condition, with how to open
    them in `medvlm-audit view`), from the suite (``Suite.cases_section``); left out when the run has no results
    table or the suite no flips."""
    if not (run_dir / "results.parquet").is_file() and not (run_dir / "results.csv").is_file():
        return
    try:
        sec = suite.cases_section(run_dir)
    except (AuditError, OSError, ValueError, KeyError):  # an aid to reading; never a reason to lose the report
        return
    if sec is not None:
        result.sections.append(sec)


def report_title(suite_title: str, run_dir: Path, models: list[str],
                 roles: dict[str, list[str]] | None = None) -> str:
    """``"<suite title>: <run folder> — <models>"``: the folder as the user named it (with its parent when the
    folder is a generic ``run``, e.g. ``demo-run/run``) and up to four names of the models under audit (then how
    many more); the models of a later stage (``roles``: stage name -> models, e.g. a judge) follow in
    parentheses, named by their stage, never as models under audit.

    >>> report_title("Faithfulness audit", Path("f/run"), ["a", "b", "c", "d", "e"], {"judge": ["j1", "j2"]})
    'Faithfulness audit: f/run — a, b, c, d and 1 more (judges: j1, j2)'
    """
    folder = run_dir.resolve()
    label = f"{folder.parent.name}/{folder.name}" if folder.name == "run" and folder.parent.name else folder.name
    shown = ", ".join(models[:4]) + (f" and {len(models) - 4} more" if len(models) > 4 else "")
    extra = "; ".join(f"{role}{'s' if len(names) > 1 else ''}: " + ", ".join(names[:4])
                      + (f" and {len(names) - 4} more" if len(names) > 4 else "")
                      for role, names in (roles or {}).items() if names)
    if extra:
        shown = f"{shown} ({extra})" if shown else extra
    return f"{suite_title}: {label}" + (f" — {shown}" if shown else "")


def _later_stage_models(suite: Suite, meta: dict[str, Any], options: BaseModel, run_dir: Path,
                        stored: list[str]) -> dict[str, list[str]]:
    """The stored models that a stage after the first asked (e.g. judges), by stage name; {} when the run's
    recorded config no longer validates (an imported or older run: every stored model is then listed alike)."""
    try:
        cfg = validate_config(dict(meta.get("config") or {}), source=f"{run_dir}: recorded config")
        ctx = StageContext(config=cfg, options=options, run_dir=run_dir)
        first = {m.name for m in suite.stages()[0].models(ctx)}
        out: dict[str, list[str]] = {}
        for stage in suite.stages()[1:]:
            names = [m.name for m in stage.models(ctx) if m.name in stored and m.name not in first]
            if names:
                out.setdefault(stage.name, []).extend(sorted(set(names)))
        return out
    except (AuditError, ValidationError, ValueError, TypeError, IndexError):
        return {}


def report(run_dir: str | Path, out: str | Path | None = None, **report_options: Any) -> Path:
    """Analyse a run with its suite and write report.html, metrics.parquet/csv, comparisons.csv, the suite's
    tables and summary.json (default folder: RUN/report). ``report_options`` go to the suite's analysis
    (e.g. ``B``; for grounding ``mode``, ``is_denominator``, ``cluster_by_patient``)."""
    from medvlm_audit.report.parallel import release_prepared

    try:
        return _report(run_dir, out, **report_options)
    finally:
        release_prepared()  # a prepared process the report did not use (an error, no figures) ends here


def _report(run_dir: str | Path, out: str | Path | None = None, **report_options: Any) -> Path:
    from importlib import import_module

    from medvlm_audit.report import write_report
    from medvlm_audit.report.parallel import prepare, run_key, take_first

    run_dir = Path(run_dir)
    with _open(run_dir) as store:
        meta = store.meta()
        suite = _suite_of(meta)
        # the sections' imports (figures, matplotlib) run in a forked process while this one reads and analyses
        # the run (report.parallel.prepare); without one they run here, when needed. A process prepared before
        # this one imported the analysis (by the CLI: cli._prepare_report) has read the table too.
        prepare(suite.report_modules)
        for module in suite.analysis_modules:  # while that process reads the table
            import_module(module)
        table = take_first(run_key(run_dir))
        if table is None:
            table = suite.tidy(store)
        skipped = store.frame("SELECT probe_set, case_id, condition, reason FROM skipped "
                              "ORDER BY probe_set, case_id, condition")
        designed = designed_behaviours(store)
        model_names = [str(m) for m in store.frame("SELECT name FROM models ORDER BY name")["name"]]
        decodings = decodings_as_run(store)
        sent = decoding_sent(store)
    recorded = {k: v for k, v in (meta.get("config") or {}).items() if k not in SHARED_FIELDS}
    try:
        opts = suite.Options.model_validate(recorded)
    except ValidationError:
        opts = suite.Options()  # an imported or older run: the analysis needs no run options
    if designed:  # reference models: the report shows each one's designed behaviour beside the observed one
        report_options.setdefault("designed", designed)
    result = suite.analyse(table, opts, skipped=skipped, run_dir=run_dir, **report_options)
    if len(decodings) and not any(sec.title == "Decoding as run" for sec in result.sections):
        result.sections.append(_decoding_section(decodings))  # a suite with its own (per strategy) keeps it
        result.tables.setdefault("effective_decoding", decodings)
    _add_driving_cases(result, run_dir, suite)
    roles = _later_stage_models(suite, meta, opts, run_dir, model_names)
    later = {m for names in roles.values() for m in names}
    title = report_title(suite.title, run_dir, [m for m in model_names if m not in later], roles)
    return write_report(result, Path(out) if out else run_dir / "report", suite=suite.name, title=title,
                        run_info=_run_info(meta, run_dir, sent), parquet_tables=suite.parquet_tables)


def demo(
    suite: str,
    out: str | Path = "demo-run",
    *,
    progress: bool = True,
    log: Callable[[str], Any] = print,
    with_report: bool = True,
    exist_ok: bool = False,
    options: Mapping[str, Any] | None = None,
    **flags: Any,
) -> RunResult:
    """A suite's embedded default end to end: prepare its data under ``out``, run it, export and report.

    An ``out`` that already holds files is refused before anything is written, unless ``exist_ok`` (the data are
    rebuilt identically and the run resumes). ``options`` are the suite's demo options (``demo --set``; a key such
    as ``log`` never collides with this function's own arguments); ``**flags`` are added to them."""
    out = Path(out)
    if not exist_ok and out.is_dir() and any(out.iterdir()):
        found = ", ".join(sorted(p.name for p in out.iterdir())[:5])
        resume = f" (to resume it: medvlm-audit run {out / 'demo.yaml'})" if (out / "demo.yaml").exists() else ""
        raise AuditError(f"{out} already holds a demo or other files ({found}); nothing was overwritten: choose another --out or "
                         f"remove it{resume}")
    cfg = embedded_config(suite, out, log=log, options={**(options or {}), **flags})
    res = run(cfg, progress=progress)
    if with_report:
        log("writing the report ...")
        res.report = report(res.run_dir)
    return res

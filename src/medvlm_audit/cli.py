"""The `medvlm-audit` command line: build, run, export, report, demo, and each registered suite's own commands."""

from __future__ import annotations

import gc
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from medvlm_audit import __version__
from medvlm_audit.cliutil import console, emit, fail, interrupted_exit_code, sigterm_as_interrupt
from medvlm_audit.errors import AuditError


def _suite_command(group: str, name: str) -> Any:
    """The click command ``name`` (under ``group``: "" or "build") that a registered suite declares in
    :meth:`Suite.commands`, or None."""
    from medvlm_audit.registry import load_target
    from medvlm_audit.suites import suite_commands

    entry = suite_commands().get(f"{group} {name}".strip())
    if entry is None:
        return None
    one = typer.Typer(add_completion=False)
    one.command(name)(load_target(entry[1]))
    return typer.main.get_command(one)


def _suite_command_names(group: str) -> list[str]:
    from medvlm_audit.suites import suite_commands

    out = []
    for key in suite_commands():
        g, _, n = key.rpartition(" ")
        if g == group:
            out.append(n)
    return out


class _SuiteCommands(TyperGroup):
    """A command group that also holds the commands each registered suite declares (``Suite.commands()``):
    looked up only when a name is not one of the core's, so a core command never loads a suite."""

    group = ""

    def list_commands(self, ctx: Any) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(_suite_command_names(self.group)))

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        return cmd if cmd is not None else _suite_command(self.group, cmd_name)


class _BuildCommands(_SuiteCommands):
    group = "build"


_gc_paused = False


def _resume_gc() -> None:
    """End the start-up pause of the cyclic garbage collector (:func:`main`): what the command's imports built
    (modules, classes, functions: ~150k objects, kept for the life of the process) is moved out of the collector's
    generations (``gc.freeze``), so neither the imports nor any later collection traverse it; then collection
    resumes. Does nothing where the pause was not taken (``app()`` called from a test or a notebook)."""
    global _gc_paused
    if _gc_paused:
        _gc_paused = False
        gc.freeze()
        gc.enable()


class _Commands(_SuiteCommands):
    """Any file-system error (disk full, read-only folder, permission denied) or store error that escapes a
    command becomes one `error:` line naming the path and the cause, exit status 2, no traceback.

    Every command but ``run`` ends the start-up pause of the garbage collector when it is resolved; ``run``
    ends it after importing what a run needs (pandas, the config models)."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        found = super().resolve_command(ctx, args)
        if found[0] != "run":
            _resume_gc()
        return found

    def invoke(self, ctx: Any) -> Any:
        import sqlite3

        from medvlm_audit.errors import describe_os_error

        try:
            return super().invoke(ctx)
        except OSError as e:
            _fail(AuditError(describe_os_error(e)))
        except sqlite3.Error as e:
            _fail(AuditError(f"run store error: {e}"))


app = typer.Typer(cls=_Commands, add_completion=False, no_args_is_help=True,
                  help="Audit whether medical VLMs read the image.")
build_app = typer.Typer(cls=_BuildCommands, no_args_is_help=True, help="Build a probe set (phantom, mimic, chexpert, nih, vindr, folder) or a vision-probe training set (probe-train).")
app.add_typer(build_app, name="build")
_fail = fail


def _print_version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit(0)


@app.callback()
def _main(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Audit whether medical VLMs read the image."""


@app.command("run")
def run_cmd(
    config: Annotated[Path | None, typer.Argument(help="Run config (YAML or TOML); none = flags alone, or the suite's embedded default.")] = None,
    suite: Annotated[str | None, typer.Option(help="A registered suite: grounding, stress, ... (overrides the config's suite; without a config, --probe-set or --model: the suite's embedded default, other flags over it).")] = None,
    run_dir: Annotated[Path | None, typer.Option(help="Override run_dir of the config.")] = None,
    probe_set: Annotated[list[Path] | None, typer.Option("--probe-set", help="Probe-set folder (repeatable; replaces the config's probe_sets).")] = None,
    model: Annotated[list[str] | None, typer.Option("--model", help="Model as key=value pairs, e.g. name=vlm,backend=openai,model=M,base_urls=http://127.0.0.1:8000/v1 (repeatable; replaces the config's models).")] = None,
    models_yaml: Annotated[Path | None, typer.Option("--models-yaml", help="YAML/TOML file with a list of model entries (replaces the config's models).")] = None,
    conditions: Annotated[list[str] | None, typer.Option("--conditions", help="The suite's conditions to run, comma-separated or repeated.")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="A suite option as KEY=VALUE (VALUE read as YAML; repeatable), e.g. --set resolutions=[224,512]; overrides the config file.")] = None,
    resolutions: Annotated[list[str] | None, typer.Option("--resolutions", hidden=True, help="Deprecated: --set resolutions=[224,512].")] = None,
    prompt_variants: Annotated[list[str] | None, typer.Option("--prompt-variants", hidden=True, help="Deprecated: --set prompt_variants=[default,terse].")] = None,
    repeats: Annotated[int | None, typer.Option(help="Samples per input.")] = None,
    workers: Annotated[int | None, typer.Option(help="Image render workers.")] = None,
    seed: Annotated[int | None, typer.Option(help="Construction seed (prompt subsample).")] = None,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Re-ask inputs whose answer was an error (and answers lacking requested log-probabilities, for models that return them).")] = False,
    retry_missing_logprobs: Annotated[bool, typer.Option("--retry-missing-logprobs", help="Re-ask every answer stored without the log-probabilities its request asked for.")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write the HTML report after the run.")] = True,
    max_error_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="Exit non-zero (1) when a model got no answer or more than this share of its inputs failed.")] = 0.05,
    batch_poll_s: Annotated[float | None, typer.Option("--batch-poll-s", min=0.001, help="batch: true models: first wait between polls of a batch (then x1.5).")] = None,
    batch_max_wait_s: Annotated[float | None, typer.Option("--batch-max-wait-s", min=0.0, help="batch: true models: stop polling after this long (run again to resume the same batch).")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print per model the inputs the store does not hold yet and the prompt tokens estimated; ask nothing, write nothing to the run store.")] = False,
) -> None:
    """Execute a suite (resumes an existing run directory: only missing answers are asked).

    The run is described by a config file, by flags alone (--probe-set and --model or --models-yaml), or both: flags override the file's values.
    """
    from medvlm_audit import api
    from medvlm_audit.config import flag_overrides, load_config, validate_config

    _resume_gc()
    cfg = None
    try:
        flags = flag_overrides(suite=suite, run_dir=run_dir, probe_sets=probe_set, models=model,
                               models_file=models_yaml, conditions=conditions, resolutions=resolutions,
                               prompt_variants=prompt_variants, repeats=repeats, workers=workers, seed=seed)
        flags.update(_settings(set_))
        if config is not None:
            cfg = load_config(config, flags)
        elif suite is not None and set(flags) - {"suite", "run_dir"} and not {"probe_sets", "models"} & set(flags):
            # the suite's embedded default, the other flags over it
            base = api.embedded_config(suite, run_dir or Path(f"runs/{suite}-default"), log=console.print)
            data = {**base.model_dump(exclude={"options"}), **base.options, **flags}
            cfg = validate_config(data, source=f"embedded {suite} default with command-line flags")
        elif set(flags) - {"suite", "run_dir"}:
            cfg = validate_config(flags, source="command-line flags")
        elif suite is None:
            raise AuditError("nothing to run: give a config file, or --probe-set and --model, or --suite NAME "
                             "for a suite's embedded default (e.g. --suite stress)")
        else:
            cfg = api.embedded_config(suite, run_dir or Path(f"runs/{suite}-default"), log=console.print)
        if dry_run:
            from medvlm_audit.batch.offline import dry_run as count_missing
            from medvlm_audit.batch.offline import dry_run_lines

            for line in dry_run_lines(count_missing(cfg, retry_errors=retry_errors)):
                console.print(line, markup=False, highlight=False)
            return
        with sigterm_as_interrupt():  # SIGTERM stops the run as Ctrl-C does (answers kept, lock released)
            res = api.run(cfg, retry_errors=retry_errors, progress=not no_progress,
                          retry_missing_logprobs=retry_missing_logprobs, batch_poll_s=batch_poll_s,
                          batch_max_wait_s=batch_max_wait_s, max_error_rate=max_error_rate)
    except (AuditError, ValueError, KeyError) as e:
        _fail(e)
    except KeyboardInterrupt:
        _interrupted(cfg.run_dir if cfg is not None else None)
    _print_summary(res.summary.as_dict())
    console.print(f"results: {res.results_parquet} and {res.results_csv}")
    emit(res.results_parquet, res.results_csv)
    _warn_low_parse_rates(res.results_parquet, cfg.suite if cfg is not None else None)
    if report:
        _report(res.run_dir)
    _exit_on_model_errors(res.summary.as_dict())


def _warn_low_parse_rates(results_parquet: Path, suite: str | None = None) -> None:
    """A warning per model whose parse rate under a condition is below 50% (not assessable there), and per judge
    and axis with under 50% valid outputs; by ``suite``'s own rule when it has one (Suite.parse_rate_lines)."""
    from medvlm_audit.health import results_parse_rate_lines

    if suite is not None:
        from medvlm_audit.suites import get_suite

        lines = list(get_suite(suite).parse_rate_lines(results_parquet))
    else:
        lines = results_parse_rate_lines(results_parquet)
    for line in lines:
        console.print(line, markup=False, highlight=False)


def _interrupted(run_dir: Path | str | None, resume: str = "run the same command to resume") -> None:
    from medvlm_audit.health import interrupted_line

    console.print(interrupted_line(run_dir, resume), markup=False, highlight=False)
    raise typer.Exit(interrupted_exit_code())  # 130 after Ctrl-C, 143 after SIGTERM


def _exit_on_model_errors(summary: dict) -> None:
    from medvlm_audit.health import report_health

    code = report_health(summary, lambda line: console.print(line, markup=False, highlight=False))
    if code:
        raise typer.Exit(code)


def _print_summary(summary: dict) -> None:
    from medvlm_audit.runner import skipped_lines, summary_table

    console.print(summary_table(summary))  # this invocation and the store's totals
    for line in skipped_lines(summary):
        console.print(line, markup=False, highlight=False)


@app.command("export")
def export_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    out: Annotated[Path | None, typer.Option(help="Output folder (default: the run directory).")] = None,
) -> None:
    """Write the tidy results table (Parquet + CSV): one row per model x case x condition x sample."""
    from medvlm_audit import api

    try:
        pq, csv = api.export(run_dir, out)
    except AuditError as e:
        _fail(e)
    console.print(f"wrote {pq} and {csv}")
    emit(pq, csv)


def _report_table(run_dir: str) -> tuple[Any, tuple[str, ...]]:
    """The first job of a report's prepared process (``report.parallel.prepare``): the run's scored table (its
    suite's ``tidy``) and the modules its report's sections import (the suite's ``report_modules``)."""
    from medvlm_audit.export import tidy_by_model, tidy_parts
    from medvlm_audit.store import RunStore
    from medvlm_audit.suites import get_suite

    with RunStore.open_dir(run_dir, readonly=True) as store:
        suite = get_suite(str(store.meta()["suite"]))
    # on many cores, forked readers read and score groups of models (closed here first: no connection forked)
    table = tidy_by_model(suite.tidy, run_dir, tidy_parts()) if suite.tidy_by_model else None
    if table is None:
        with RunStore.open_dir(run_dir, readonly=True) as store:
            table = suite.tidy(store)
    return table, tuple(suite.report_modules)


def _prepare_report(run_dir: Path) -> bool:
    """Fork the report's prepared process before the analysis is imported: it reads the run's table (taken by
    ``api.report``), then imports the figure code of the run's suite. pandas first, so that it inherits it. The
    C allocator keeps at most 2 arenas (before any thread: the resampling threads' arenas held ~40 MB)."""
    import pandas  # noqa: F401

    from medvlm_audit.cpus import limit_malloc_arenas
    from medvlm_audit.report.parallel import prepare, run_key

    limit_malloc_arenas()

    key = run_key(run_dir)
    return prepare(first=f"{__name__}:_report_table", first_args=(key,), key=key)


def _report(run_dir: Path, out: Path | None = None, **analysis: Any) -> Path:
    _prepare_report(run_dir)  # a forked process reads the run's table while this one imports the analysis
    from medvlm_audit import api

    console.print(f"writing the report of {run_dir} ...")
    path = api.report(run_dir, out, **analysis)
    console.print(f"report: {path}")
    emit(path)
    return path


def _settings(values: list[str] | None, flag: str = "--set") -> dict[str, Any]:
    """``--set KEY=VALUE`` pairs (repeatable) -> a dict; VALUE is read as YAML (``3``, ``true``, ``[a, b]``)."""
    import yaml

    out: dict[str, Any] = {}
    for item in values or ():
        key, eq, raw = item.partition("=")
        if not eq or not key.strip():
            raise AuditError(f"{flag} {item!r}: expected KEY=VALUE, e.g. {flag} n_cases=200")
        try:
            out[key.strip()] = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            out[key.strip()] = raw
    return out


class ResamplingMode(str, Enum):
    """Bootstrap resampling of the analysis (stats module)."""

    exact_counts = "exact-counts"
    index = "index"


class ISDenominator(str, Enum):
    """Which cases the irrelevant-mask stability (IS) is computed over."""

    default = "default"
    all_parsed = "all-parsed"


#: CLI name -> analysis option: "default" = correct-on-original boxed cases (paper Table 1), "all-parsed" = Eq. 8
_IS_DENOMINATOR = {ISDenominator.default: "correct", ISDenominator.all_parsed: "all"}


@app.command("report")
def report_cmd(
    run_dir: Annotated[Path, typer.Argument(help="Run directory.")],
    out: Annotated[Path | None, typer.Option(help="Output folder (default: RUN/report).")] = None,
    B: Annotated[int, typer.Option("--B", min=1, help="Bootstrap resamples per interval.")] = 10_000,
    set_: Annotated[list[str] | None, typer.Option("--set", help="An analysis option of the run's suite as KEY=VALUE (VALUE read as YAML; repeatable); the suite's docs list them.")] = None,
    mode: Annotated[ResamplingMode | None, typer.Option(hidden=True, help="Deprecated: --set mode=index.")] = None,
    is_denominator: Annotated[ISDenominator | None, typer.Option(hidden=True, help="Deprecated: --set is_denominator=all.")] = None,
    cluster_by_patient: Annotated[bool, typer.Option("--cluster-by-patient", hidden=True, help="Deprecated: --set cluster_by_patient=true.")] = False,
) -> None:
    """Analyse a run and write report.html, metrics.parquet/csv, comparisons.csv and summary.json."""
    try:
        options = _settings(set_)
        if mode is not None:
            options.setdefault("mode", mode.value)
        if is_denominator is not None:
            options.setdefault("is_denominator", _IS_DENOMINATOR[is_denominator])
        if cluster_by_patient:
            options.setdefault("cluster_by_patient", True)
        _report(run_dir, out, B=B, **options)
    except AuditError as e:
        _fail(e)


@app.command("demo")
def demo_cmd(
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("demo-run"),
    suite: Annotated[str, typer.Option(help="The suite whose embedded default runs (a registered suite).")] = "grounding",
    set_: Annotated[list[str] | None, typer.Option("--set", help="An option of the suite's embedded default as KEY=VALUE (VALUE read as YAML; repeatable), e.g. --set n_cases=200.")] = None,
    n_cases: Annotated[int | None, typer.Option(hidden=True, help="Deprecated: --set n_cases=N.")] = None,
    gemma: Annotated[bool, typer.Option("--gemma", hidden=True, help="Deprecated: --set gemma=true.")] = False,
    vision_probe: Annotated[bool, typer.Option("--vision-probe", hidden=True, help="Deprecated: --set vision_probe=true.")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
) -> None:
    """Run a suite's embedded default offline: build its phantom data, fit its reference models, run, export and report."""
    from medvlm_audit import api

    try:
        flags: dict[str, Any] = {k: v for k, v, d in (("n_cases", n_cases, None), ("gemma", gemma, False),
                                                      ("vision_probe", vision_probe, False)) if v != d}
        flags.update(_settings(set_))
        with sigterm_as_interrupt():
            res = api.demo(suite, out, progress=not no_progress, log=console.print, options=flags)
    except (AuditError, ValueError, TypeError) as e:  # a --set value the embedded default refuses: one line
        _fail(e)
    except KeyboardInterrupt:
        _interrupted(out, f"resume with: medvlm-audit run {out / 'demo.yaml'}")
    _print_summary(res.summary.as_dict())
    console.print(f"results: {res.results_parquet}")
    console.print(f"report: {res.report}")
    emit(res.results_parquet, res.results_csv, res.report)


@app.command("gate")
def gate_cmd(
    runs: Annotated[list[Path], typer.Argument(help="Run folder(s) with a report (RUN/report/metrics.parquet|csv).")],
    rule: Annotated[list[str] | None, typer.Option("--rule", help="A rule, e.g. 'grounding:cgr.ci_low >= 0.20 where finding in [pneumothorax]' (repeatable).")] = None,
    rules: Annotated[Path | None, typer.Option("--rules", help="A file of rules (YAML, TOML or one rule a line).")] = None,
    junit: Annotated[Path | None, typer.Option("--junit", help="Also write the checks as JUnit XML to this file.")] = None,
) -> None:
    """Gate a deployment on a run's metrics: exit 0 when every rule passes, 1 when one fails, 2 on a bad rule or a
    metric, model or subset the run does not have. Rules: see docs/gate.md."""
    from medvlm_audit.atomic import write_bytes_atomic
    from medvlm_audit.gate import evaluate, junit_xml, load_rules, parse_rule, table_text

    try:
        parsed = [parse_rule(r) for r in rule or []] + (load_rules(rules) if rules is not None else [])
        result = evaluate(runs, parsed)
    except AuditError as e:
        _fail(e)
    print(table_text(result), flush=True)
    if junit is not None:
        write_bytes_atomic(junit, junit_xml(result).encode("utf-8"))
        console.print(f"JUnit XML: {junit}", markup=False, highlight=False)
    raise typer.Exit(result.exit_code)


def _add_readers() -> None:
    from medvlm_audit.readers.commands import readers_app

    app.add_typer(readers_app, name="readers")


_add_readers()


def _add_batch() -> None:
    from medvlm_audit.batch.commands import batch_app

    app.add_typer(batch_app, name="batch")


_add_batch()


def _add_view() -> None:
    from medvlm_audit.view.commands import view_cmd

    app.command("view")(view_cmd)


_add_view()


def main(gc_paused: bool = False) -> None:  # pragma: no cover
    """The console entry point (``medvlm-audit``, ``python -m medvlm_audit``): the CLI, then no final garbage
    collection of what the command built, since the process ends here (``gc.freeze``: after a paper-sized report
    that collection took 0.2 CPU-s; atexit handlers still run, and plain objects are still released).

    The cyclic collector is paused while the command's modules are imported (``gc_paused``: ``__main__`` paused
    it before importing this module) and resumed by :func:`_resume_gc`: the imports allocate ~150k objects that
    live as long as the process, and the collections they triggered cost ~0.05 CPU-s of a ~0.75 CPU-s run."""
    global _gc_paused
    if gc_paused or gc.isenabled():
        gc.disable()
        _gc_paused = True
    try:
        sys.exit(app())
    finally:
        gc.freeze()

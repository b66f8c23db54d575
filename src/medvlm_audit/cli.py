"""The `medvlm-audit` command line: build, run, export, report, demo, and each registered suite's own commands."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from medvlm_audit import __version__
from medvlm_audit.cliutil import console, emit, fail
from medvlm_audit.errors import AuditError


class _Commands(TyperGroup):
    """Any file-system error (disk full, read-only folder, permission denied) or store error that escapes a
    command becomes one `error:` line naming the path and the cause, exit status 2, no traceback."""

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
build_app = typer.Typer(no_args_is_help=True, help="Build a probe set (phantom, mimic, chexpert, nih, vindr, folder) or a vision-probe training set (probe-train).")
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


@build_app.command("phantom")
def build_phantom_cmd(
    out: Annotated[Path, typer.Option(help="Output folder (images/, probeset/, train/).")] = Path("phantom"),
    n_cases: Annotated[int, typer.Option(help="Number of test cases.")] = 800,
    n_train: Annotated[int, typer.Option(help="Number of training studies for the reference panel.")] = 1500,
    seed: Annotated[int, typer.Option(help="Construction seed.")] = 42,
) -> None:
    """Build the embedded synthetic chest-radiograph probe set (deterministic)."""
    from medvlm_audit.suites.grounding.phantom_probeset import build_phantom

    try:
        test, train = build_phantom(out, n_cases=n_cases, n_train=n_train, seed=seed)
    except (AuditError, ValueError) as e:
        _fail(e)
    console.print(f"phantom probe set: {len(test)} cases -> {out / 'probeset'} (hash {test.content_hash[:12]})")
    console.print(f"training split: {len(train)} cases -> {out / 'train'}")
    emit(out / "probeset", out / "train")


Opt = typer.Option


def _built(result: object) -> None:
    console.print(result.summary(), markup=False, highlight=False)  # type: ignore[attr-defined]
    emit(result.out_dir)  # type: ignore[attr-defined]


def _rexerr_counts(text: str) -> tuple[int, int, int]:
    try:
        a, b, c = (int(x) for x in text.split(","))
    except ValueError:
        raise typer.BadParameter(f"expected three comma-separated integers, got {text!r}") from None
    return a, b, c


@build_app.command("mimic")
def build_mimic_cmd(
    mimic_root: Annotated[Path, Opt(help="MIMIC-CXR-JPG root (files/, mimic-cxr-2.0.0-*.csv[.gz]).")],
    ms_cxr_root: Annotated[Path, Opt(help="MS-CXR root (MS_CXR_Local_Alignment_v1.*.csv).")],
    rexerr_root: Annotated[Path, Opt(help="ReXErr-v1 root.")],
    mimic_iv_root: Annotated[Path, Opt(help="MIMIC-IV root (hosp/patients.csv[.gz]).")],
    out: Annotated[Path, Opt(help="Output probe-set folder.")] = Path("probesets/mimic"),
    per_finding: Annotated[int, Opt(help="Present and absent MIMIC studies per finding.")] = 50,
    n_normal: Annotated[int, Opt(help="Normal studies.")] = 100,
    ms_cxr_cap: Annotated[int, Opt(help="MS-CXR boxes kept per finding.")] = 100,
    min_box_side: Annotated[float, Opt(help="Minimum box side at 224 px.")] = 50.0,
    rexerr_counts: Annotated[str, Opt(help="ReXErr image-dependent,text-only,no-error counts.")] = "483,120,120",
    rexerr_split: Annotated[str, Opt(help="ReXErr-v1 split the report-error sentences come from.")] = "test",
    mimic_split: Annotated[str, Opt(help="MIMIC-CXR split the finding questions come from.")] = "test",
    negatives: Annotated[str, Opt(help="explicit_then_blank | explicit | explicit_or_blank")] = "explicit_then_blank",
    swap_pool_split: Annotated[str, Opt(help="Split the swap partners are drawn from (all, or one split).")] = "all",
    swap_same_view: Annotated[bool, Opt("--swap-same-view", help="Draw swap partners with the same view (PA/AP) as the case.")] = False,
    age_at: Annotated[str, Opt(help="study | anchor")] = "study",
    check_images: Annotated[bool, Opt("--check-images/--no-check-images", help="Open every image and check it decodes before the probe set is written.")] = True,
    full_decode: Annotated[bool, Opt("--full-decode", help="Decode each image fully when checking it (slower; default: header and a partial read).")] = False,
    workers: Annotated[int, Opt(help="Processes used to check images.")] = 2,
    seed: Annotated[int, Opt(help="Construction seed (sampling and swap partners).")] = 42,
    name: Annotated[str, Opt(help="Name of the probe set (how runs and reports refer to it).")] = "mimic",
) -> None:
    """The paper's primary probe set from MIMIC-CXR-JPG + MS-CXR + ReXErr-v1 + MIMIC-IV (2,575 cases)."""
    from medvlm_audit.suites.grounding.datasets.mimic import build_mimic

    try:
        _built(build_mimic(mimic_root, ms_cxr_root, rexerr_root, mimic_iv_root, out, per_finding=per_finding,
                           n_normal=n_normal, ms_cxr_cap=ms_cxr_cap, min_box_side=min_box_side,
                           rexerr_counts=_rexerr_counts(rexerr_counts), rexerr_split=rexerr_split,
                           mimic_split=mimic_split, negatives=negatives, swap_pool_split=swap_pool_split,
                           swap_same_view=swap_same_view, age_at=age_at, check_images=check_images,
                           full_decode=full_decode, workers=workers, seed=seed, name=name, verbose=False))
    except (AuditError, ValueError) as e:
        _fail(e)


@build_app.command("chexpert")
def build_chexpert_cmd(
    chexpert_root: Annotated[Path, Opt(help="CheXpert root (train.csv/valid.csv and images).")],
    out: Annotated[Path, Opt(help="Output probe-set folder.")] = Path("probesets/chexpert"),
    labels_csv: Annotated[Path | None, Opt(help="A labels CSV other than the root's (e.g. the official test_labels.csv).")] = None,
    demographics_csv: Annotated[Path | None, Opt(help="CSV with Path or patient id + Sex, Age[, view] (for test_labels.csv).")] = None,
    split: Annotated[str, Opt(help="Dataset split the cases come from.")] = "test",
    test_fraction: Annotated[float, Opt(help="Share of patients held out as the test split when the source has none.")] = 0.2,
    per_finding: Annotated[int, Opt(help="Present and absent cases sampled per finding.")] = 50,
    n_normal: Annotated[int, Opt(help="Normal (no-finding) cases sampled.")] = 100,
    negatives: Annotated[str, Opt(help="explicit | explicit_then_blank | explicit_or_blank")] = "explicit",
    swap_same_view: Annotated[bool, Opt("--swap-same-view", help="Draw swap partners with the same view (PA/AP) as the case.")] = False,
    check_images: Annotated[bool, Opt("--check-images/--no-check-images", help="Open every image and check it decodes before the probe set is written.")] = True,
    full_decode: Annotated[bool, Opt("--full-decode", help="Decode each image fully when checking it (slower; default: header and a partial read).")] = False,
    workers: Annotated[int, Opt(help="Processes used to check images.")] = 2,
    seed: Annotated[int, Opt(help="Construction seed (sampling and swap partners).")] = 42,
    name: Annotated[str, Opt(help="Name of the probe set (how runs and reports refer to it).")] = "chexpert",
) -> None:
    """The CheXpert generalization set (original and swap conditions; 1,380 cases)."""
    from medvlm_audit.suites.grounding.datasets.chexpert import build_chexpert

    try:
        _built(build_chexpert(chexpert_root, out, labels_csv=labels_csv, demographics_csv=demographics_csv,
                              split=split, test_fraction=test_fraction,
                              per_finding=per_finding, n_normal=n_normal, negatives=negatives,
                              swap_same_view=swap_same_view, check_images=check_images, full_decode=full_decode,
                              workers=workers, seed=seed, name=name, verbose=False))
    except (AuditError, ValueError) as e:
        _fail(e)


@build_app.command("nih")
def build_nih_cmd(
    nih_root: Annotated[Path, Opt(help="NIH ChestX-ray14 root (Data_Entry_2017.csv, BBox_List_2017.csv, images).")],
    out: Annotated[Path, Opt(help="Output probe-set folder.")] = Path("probesets/nih"),
    metadata_from: Annotated[str, Opt(help="auto | root | torchxrayvision")] = "auto",
    split: Annotated[str, Opt(help="Dataset split the cases come from.")] = "all",
    per_finding: Annotated[int, Opt(help="Present and absent cases sampled per finding.")] = 50,
    n_normal: Annotated[int, Opt(help="Normal (no-finding) cases sampled.")] = 100,
    box_cap: Annotated[int, Opt(help="Boxed cases kept per finding.")] = 100,
    min_box_side: Annotated[float, Opt(help="Minimum box side at 224 px (smaller boxes are left out).")] = 50.0,
    image_size: Annotated[int, Opt(help="Side in pixels of the source images (for box scaling).")] = 1024,
    swap_same_view: Annotated[bool, Opt("--swap-same-view", help="Draw swap partners with the same view (PA/AP) as the case.")] = False,
    check_images: Annotated[bool, Opt("--check-images/--no-check-images", help="Open every image and check it decodes before the probe set is written.")] = True,
    full_decode: Annotated[bool, Opt("--full-decode", help="Decode each image fully when checking it (slower; default: header and a partial read).")] = False,
    workers: Annotated[int, Opt(help="Processes used to check images.")] = 2,
    seed: Annotated[int, Opt(help="Construction seed (sampling and swap partners).")] = 42,
    name: Annotated[str, Opt(help="Name of the probe set (how runs and reports refer to it).")] = "nih",
) -> None:
    """An open probe set with boxes from NIH ChestX-ray14 (all conditions, masks included)."""
    from medvlm_audit.suites.grounding.datasets.nih import build_nih

    try:
        _built(build_nih(nih_root, out, metadata_from=metadata_from, split=split, per_finding=per_finding,
                         n_normal=n_normal, box_cap=box_cap, min_box_side=min_box_side, image_size=image_size,
                         swap_same_view=swap_same_view, check_images=check_images, full_decode=full_decode,
                         workers=workers, seed=seed, name=name, verbose=False))
    except (AuditError, ValueError) as e:
        _fail(e)


@build_app.command("vindr")
def build_vindr_cmd(
    vindr_root: Annotated[Path, Opt(help="VinDr-CXR root (annotations/, test/ or train/).")],
    out: Annotated[Path, Opt(help="Output probe-set folder.")] = Path("probesets/vindr"),
    split: Annotated[str, Opt(help="Dataset split the cases come from.")] = "test",
    n_absent: Annotated[int, Opt(help="Cases without the finding sampled per finding.")] = 50,
    n_normal: Annotated[int, Opt(help="Normal (no-finding) cases sampled.")] = 100,
    box_cap: Annotated[int, Opt(help="Boxed cases kept per finding.")] = 100,
    min_box_side: Annotated[float, Opt(help="Minimum box side at 224 px (smaller boxes are left out).")] = 50.0,
    metadata_csv: Annotated[Path | None, Opt(help="CSV with image_id, age, sex, view.")] = None,
    sizes_csv: Annotated[Path | None, Opt(help="CSV with image_id, width, height.")] = None,
    require_demographics: Annotated[bool, Opt("--require-demographics", help="Leave out cases without age and sex.")] = False,
    check_images: Annotated[bool, Opt("--check-images/--no-check-images", help="Open every image and check it decodes before the probe set is written.")] = True,
    full_decode: Annotated[bool, Opt("--full-decode", help="Decode each image fully when checking it (slower; default: header and a partial read).")] = False,
    workers: Annotated[int, Opt(help="Processes used to check images.")] = 2,
    seed: Annotated[int, Opt(help="Construction seed (sampling and swap partners).")] = 42,
    name: Annotated[str, Opt(help="Name of the probe set (how runs and reports refer to it).")] = "vindr",
) -> None:
    """An open probe set with radiologist boxes from VinDr-CXR."""
    from medvlm_audit.suites.grounding.datasets.vindr import build_vindr

    try:
        _built(build_vindr(vindr_root, out, split=split, n_absent=n_absent, n_normal=n_normal, box_cap=box_cap,
                           min_box_side=min_box_side, metadata_csv=metadata_csv, sizes_csv=sizes_csv,
                           require_demographics=require_demographics, check_images=check_images,
                           full_decode=full_decode, workers=workers, seed=seed, name=name, verbose=False))
    except (AuditError, ValueError) as e:
        _fail(e)


@build_app.command("folder")
def build_folder_cmd(
    images: Annotated[Path, Opt(help="Folder the CSV's image paths are relative to.")],
    csv: Annotated[Path, Opt(help="CSV: image, finding, label[, x0, y0, x1, y1, patient_id, age, sex, view, ...].")],
    out: Annotated[Path, Opt(help="Output probe-set folder.")] = Path("probesets/folder"),
    frontal_only: Annotated[bool, Opt("--frontal-only/--no-frontal-only", help="Keep frontal (PA/AP) images only.")] = True,
    require_demographics: Annotated[bool, Opt("--require-demographics", help="Leave out cases without age and sex.")] = False,
    min_box_side: Annotated[float, Opt(help="Minimum box side at 224 px (smaller boxes are left out).")] = 0.0,
    swap_same_view: Annotated[bool, Opt("--swap-same-view", help="Draw swap partners with the same view (PA/AP) as the case.")] = False,
    check_images: Annotated[bool, Opt("--check-images/--no-check-images", help="Open every image and check it decodes before the probe set is written.")] = True,
    full_decode: Annotated[bool, Opt("--full-decode", help="Decode each image fully when checking it (slower; default: header and a partial read).")] = False,
    workers: Annotated[int, Opt(help="Processes used to check images.")] = 2,
    seed: Annotated[int, Opt(help="Construction seed (sampling and swap partners).")] = 42,
    name: Annotated[str, Opt(help="Name of the probe set (how runs and reports refer to it).")] = "folder",
    allow_outside_root: Annotated[bool, Opt("--allow-outside-root", help="Accept image paths outside --images (absolute, '..', symlinks out); the summary counts them.")] = False,
) -> None:
    """A probe set from any folder of images plus a CSV of findings, labels and boxes."""
    from medvlm_audit.suites.grounding.datasets.folder import build_folder

    try:
        _built(build_folder(images, csv, out, frontal_only=frontal_only, require_demographics=require_demographics,
                            min_box_side=min_box_side, swap_same_view=swap_same_view, check_images=check_images,
                            full_decode=full_decode, workers=workers, seed=seed, name=name, verbose=False,
                            allow_outside_root=allow_outside_root))
    except (AuditError, ValueError) as e:
        _fail(e)


@build_app.command("probe-train")
def build_probe_train_cmd(
    source: Annotated[str, Opt(help="mimic | chexpert")],
    out: Annotated[Path, Opt(help="Output training-set folder.")],
    mimic_root: Annotated[Path | None, Opt(help="MIMIC-CXR-JPG root (source mimic).")] = None,
    mimic_iv_root: Annotated[Path | None, Opt(help="MIMIC-IV root: optional, adds age and sex.")] = None,
    chexpert_root: Annotated[Path | None, Opt(help="CheXpert root (source chexpert).")] = None,
    labels_csv: Annotated[Path | None, Opt(help="CheXpert labels CSV other than train.csv/valid.csv.")] = None,
    demographics_csv: Annotated[Path | None, Opt(help="CheXpert demographics CSV (Path or patient id + Sex, Age).")] = None,
    splits: Annotated[str | None, Opt(help="Comma-separated splits (default: mimic train,validate; chexpert train).")] = None,
    negatives: Annotated[str, Opt(help="explicit_or_blank | explicit")] = "explicit_or_blank",
    exclude_probe_set: Annotated[list[Path], Opt("--exclude-probe-set", help="Leave out studies of this probe set (repeatable).")] = [],  # noqa: B006
    require_demographics: Annotated[bool, Opt("--require-demographics", help="Leave out cases without age and sex.")] = False,
    test_fraction: Annotated[float, Opt(help="CheXpert held-out patient fraction (as build chexpert).")] = 0.2,
    check_images: Annotated[bool, Opt("--check-images/--no-check-images", help="Open every image and check it decodes before the probe set is written.")] = True,
    full_decode: Annotated[bool, Opt("--full-decode", help="Decode each image fully when checking it (slower; default: header and a partial read).")] = False,
    workers: Annotated[int, Opt(help="Processes used to check images.")] = 2,
    seed: Annotated[int, Opt(help="Construction seed (sampling and swap partners).")] = 42,
    name: Annotated[str | None, Opt(help="Name of the probe set (how runs and reports refer to it).")] = None,
) -> None:
    """The vision-only probe's training set: every labelled frontal study of the given splits (no cap)."""
    from medvlm_audit.suites.grounding.datasets.probe_train import build_probe_train

    try:
        _built(build_probe_train(source, out, mimic_root=mimic_root, mimic_iv_root=mimic_iv_root,
                                 chexpert_root=chexpert_root, labels_csv=labels_csv, demographics_csv=demographics_csv,
                                 splits=[x.strip() for x in splits.split(",") if x.strip()] if splits else None,
                                 negatives=negatives, exclude_probe_sets=exclude_probe_set,
                                 require_demographics=require_demographics, test_fraction=test_fraction,
                                 check_images=check_images, full_decode=full_decode, workers=workers, seed=seed,
                                 name=name, verbose=False))
    except (AuditError, ValueError) as e:
        _fail(e)


@app.command("run")
def run_cmd(
    config: Annotated[Path | None, typer.Argument(help="Run config (YAML or TOML); none = flags alone, or the suite's embedded default.")] = None,
    suite: Annotated[str | None, typer.Option(help="A registered suite: grounding, stress, ... (overrides the config's suite; alone: the suite's embedded default).")] = None,
    run_dir: Annotated[Path | None, typer.Option(help="Override run_dir of the config.")] = None,
    probe_set: Annotated[list[Path] | None, typer.Option("--probe-set", help="Probe-set folder (repeatable; replaces the config's probe_sets).")] = None,
    model: Annotated[list[str] | None, typer.Option("--model", help="Model as key=value pairs, e.g. name=vlm,backend=openai,model=M,base_urls=http://127.0.0.1:8000/v1 (repeatable; replaces the config's models).")] = None,
    models_yaml: Annotated[Path | None, typer.Option("--models-yaml", help="YAML/TOML file with a list of model entries (replaces the config's models).")] = None,
    conditions: Annotated[list[str] | None, typer.Option("--conditions", help="Image conditions, comma-separated or repeated.")] = None,
    resolutions: Annotated[list[str] | None, typer.Option("--resolutions", help="Working resolutions, e.g. 224,512.")] = None,
    prompt_variants: Annotated[list[str] | None, typer.Option("--prompt-variants", help="default, terse, radiologist (comma-separated or repeated).")] = None,
    repeats: Annotated[int | None, typer.Option(help="Samples per input.")] = None,
    workers: Annotated[int | None, typer.Option(help="Image render workers.")] = None,
    seed: Annotated[int | None, typer.Option(help="Construction seed (prompt subsample).")] = None,
    retry_errors: Annotated[bool, typer.Option("--retry-errors", help="Re-ask inputs whose answer was an error (and answers lacking requested log-probabilities, for models that return them).")] = False,
    retry_missing_logprobs: Annotated[bool, typer.Option("--retry-missing-logprobs", help="Re-ask every answer stored without the log-probabilities its request asked for.")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write the HTML report after the run.")] = True,
    max_error_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="Exit non-zero (1) when a model got no answer or more than this share of its inputs failed.")] = 0.05,
) -> None:
    """Execute a suite (resumes an existing run directory: only missing answers are asked).

    The run is described by a config file, by flags alone (--probe-set and --model or --models-yaml), or both: flags override the file's values.
    """
    from medvlm_audit import api
    from medvlm_audit.config import flag_overrides, load_config, validate_config

    cfg = None
    try:
        flags = flag_overrides(suite=suite, run_dir=run_dir, probe_sets=probe_set, models=model,
                               models_file=models_yaml, conditions=conditions, resolutions=resolutions,
                               prompt_variants=prompt_variants, repeats=repeats, workers=workers, seed=seed)
        if config is not None:
            cfg = load_config(config, flags)
        elif set(flags) - {"suite", "run_dir"}:
            cfg = validate_config(flags, source="command-line flags")
        elif suite is None:
            raise AuditError("nothing to run: give a config file, or --probe-set and --model, or --suite NAME "
                             "for a suite's embedded default (e.g. --suite stress)")
        else:
            cfg = api.embedded_config(suite, run_dir or Path(f"runs/{suite}-default"), log=console.print)
        res = api.run(cfg, retry_errors=retry_errors, progress=not no_progress,
                      retry_missing_logprobs=retry_missing_logprobs)
    except (AuditError, ValueError, KeyError) as e:
        _fail(e)
    except KeyboardInterrupt:
        _interrupted(cfg.run_dir if cfg is not None else None)
    _print_summary(res.summary.as_dict())
    console.print(f"results: {res.results_parquet} and {res.results_csv}")
    emit(res.results_parquet, res.results_csv)
    if report:
        _report(res.run_dir)
    _exit_on_model_errors(res.summary.as_dict())


def _interrupted(run_dir: Path | str | None, resume: str = "run the same command to resume") -> None:
    from medvlm_audit.health import EXIT_INTERRUPTED, interrupted_line

    console.print(interrupted_line(run_dir, resume), markup=False, highlight=False)
    raise typer.Exit(EXIT_INTERRUPTED)


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


def _report(run_dir: Path, out: Path | None = None, **analysis: Any) -> Path:
    from medvlm_audit import api

    console.print(f"writing the report of {run_dir} ...")
    path = api.report(run_dir, out, **analysis)
    console.print(f"report: {path}")
    emit(path)
    return path


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
    mode: Annotated[ResamplingMode, typer.Option(
        help="exact-counts: count-based resampling (fast, same distribution); index: the released code's "
             "RandomState index draws in the released files' row order, bootstrap interval at every n, AUROC as "
             "released: its intervals equal the released code's (tested on a released-layout fixture).")] = ResamplingMode.exact_counts,
    is_denominator: Annotated[ISDenominator, typer.Option(
        help="IS over correct-on-original boxed cases (default, paper Table 1) or over all boxed cases parsed "
             "under both conditions (all-parsed, Eq. 8); the report labels which.")] = ISDenominator.default,
    cluster_by_patient: Annotated[bool, typer.Option(
        "--cluster-by-patient", help="Resample whole patients instead of cases.")] = False,
) -> None:
    """Analyse a run and write report.html, metrics.parquet/csv, comparisons.csv and summary.json.

    B applies to every suite; --mode, --is-denominator and --cluster-by-patient to grounding runs.
    """
    try:
        _report(run_dir, out, B=B, mode=mode.value, is_denominator=_IS_DENOMINATOR[is_denominator],
                cluster_by_patient=cluster_by_patient)
    except AuditError as e:
        _fail(e)


@app.command("demo")
def demo_cmd(
    out: Annotated[Path, typer.Option(help="Output folder.")] = Path("demo-run"),
    suite: Annotated[str, typer.Option(help="The suite whose embedded default runs (grounding, stress, ...).")] = "grounding",
    n_cases: Annotated[int, typer.Option(help="Phantom test cases (grounding).")] = 800,
    gemma: Annotated[bool, typer.Option("--gemma", help="Add Gemma 3 270M as a text-only baseline (grounding; extra 'gemma').")] = False,
    vision_probe: Annotated[bool, typer.Option("--vision-probe", help="Add the encoder + logistic-head vision probe on a small random ViT (grounding; extra 'hf').")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
) -> None:
    """Run a suite's embedded default offline: build its phantom data, fit its reference models, run, export and report."""
    from medvlm_audit import api

    flags: dict[str, Any] = {k: v for k, v, d in (("n_cases", n_cases, 800), ("gemma", gemma, False),
                                                  ("vision_probe", vision_probe, False)) if v != d}
    try:
        res = api.demo(suite, out, progress=not no_progress, log=console.print, **flags)
    except AuditError as e:
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


def _add_suite_commands() -> None:
    """Each suite's own commands (import-results, corpus-audit, build iu-reports, ...), from the command registry
    (no suite is loaded: only its light command module)."""
    from medvlm_audit.suites import COMMANDS

    groups = {"build": build_app}
    for name in COMMANDS.names():
        group, _, cmd_name = name.rpartition(" ")
        (groups[group] if group else app).command(cmd_name)(COMMANDS.load(name))


_add_suite_commands()


def _add_readers() -> None:
    from medvlm_audit.readers.commands import readers_app

    app.add_typer(readers_app, name="readers")


_add_readers()


def _add_view() -> None:
    from medvlm_audit.view.commands import view_cmd

    app.command("view")(view_cmd)


_add_view()


def main() -> None:  # pragma: no cover
    sys.exit(app())

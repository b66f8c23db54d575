"""The grounding suite's own commands: ``medvlm-audit import-results`` (the paper's released result files) and
``medvlm-audit build phantom|mimic|chexpert|nih|vindr|folder|probe-train`` (its probe sets). Registered by
:meth:`GroundingSuite.commands`; the work is imported inside each function, so listing the commands stays fast."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from medvlm_audit.cliutil import console, emit, fail
from medvlm_audit.errors import AuditError

if TYPE_CHECKING:
    from medvlm_audit.suites.grounding.datasets.common import BuildOptions


def import_results_cmd(
    manifest: Annotated[Path, typer.Argument(help="The released manifest CSV.")],
    results_dir: Annotated[Path, typer.Argument(help="Folder with one sub-folder of condition CSVs per model.")],
    out: Annotated[Path, typer.Option(help="New run directory to create.")] = Path("runs/imported"),
    text_only: Annotated[list[str], typer.Option("--text-only", help="Model folder that is a text-only baseline (repeatable).")] = [],  # noqa: B006
    vision_only: Annotated[list[str], typer.Option("--vision-only", help="Model folder that is a vision-only probe (repeatable).")] = [],  # noqa: B006
    report: Annotated[bool, typer.Option("--report/--no-report", help="Write the HTML report after importing.")] = True,
) -> None:
    """Import the paper's released result layout into a run store that `report` analyses like any other."""
    from medvlm_audit.suites.grounding.import_results import import_results

    try:
        run_dir = import_results(manifest, results_dir, out, text_only=tuple(text_only), vision_only=tuple(vision_only),
                                 log=console.print)
        from medvlm_audit import api

        api.export(run_dir)
        console.print(f"imported into {run_dir}")
        if report:
            console.print(f"report: {api.report(run_dir)}")
    except AuditError as e:
        fail(e)


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
        fail(e)
    console.print(f"phantom probe set: {len(test)} cases -> {out / 'probeset'} (hash {test.content_hash[:12]})")
    console.print(f"training split: {len(train)} cases -> {out / 'train'}")
    emit(out / "probeset", out / "train")


Opt = typer.Option


def _options(check_images: bool, full_decode: bool, workers: int, seed: int, name: str | None) -> BuildOptions:
    """The :class:`~medvlm_audit.suites.grounding.datasets.common.BuildOptions` every ``build`` command shares
    (quiet: the command prints the summary itself). Imported here: listing the commands stays fast."""
    from medvlm_audit.suites.grounding.datasets.common import BuildOptions

    return BuildOptions(check_images=check_images, full_decode=full_decode, workers=workers, seed=seed, name=name,
                        verbose=False)


def _built(result: object) -> None:
    console.print(result.summary(), markup=False, highlight=False)  # type: ignore[attr-defined]
    emit(result.out_dir)  # type: ignore[attr-defined]


def _rexerr_counts(text: str) -> tuple[int, int, int]:
    try:
        a, b, c = (int(x) for x in text.split(","))
    except ValueError:
        raise typer.BadParameter(f"expected three comma-separated integers, got {text!r}") from None
    return a, b, c


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
                           swap_same_view=swap_same_view, age_at=age_at,
                           options=_options(check_images, full_decode, workers, seed, name)))
    except (AuditError, ValueError) as e:
        fail(e)


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
                              swap_same_view=swap_same_view,
                              options=_options(check_images, full_decode, workers, seed, name)))
    except (AuditError, ValueError) as e:
        fail(e)


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
                         swap_same_view=swap_same_view,
                         options=_options(check_images, full_decode, workers, seed, name)))
    except (AuditError, ValueError) as e:
        fail(e)


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
                           require_demographics=require_demographics,
                           options=_options(check_images, full_decode, workers, seed, name)))
    except (AuditError, ValueError) as e:
        fail(e)


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
                            min_box_side=min_box_side, swap_same_view=swap_same_view,
                            options=_options(check_images, full_decode, workers, seed, name),
                            allow_outside_root=allow_outside_root))
    except (AuditError, ValueError) as e:
        fail(e)


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
                                 options=_options(check_images, full_decode, workers, seed, name)))
    except (AuditError, ValueError) as e:
        fail(e)


#: the commands GroundingSuite.commands() declares
COMMANDS: dict[str, str] = {
    "import-results": "medvlm_audit.suites.grounding.commands:import_results_cmd",
    "build phantom": "medvlm_audit.suites.grounding.commands:build_phantom_cmd",
    "build mimic": "medvlm_audit.suites.grounding.commands:build_mimic_cmd",
    "build chexpert": "medvlm_audit.suites.grounding.commands:build_chexpert_cmd",
    "build nih": "medvlm_audit.suites.grounding.commands:build_nih_cmd",
    "build vindr": "medvlm_audit.suites.grounding.commands:build_vindr_cmd",
    "build folder": "medvlm_audit.suites.grounding.commands:build_folder_cmd",
    "build probe-train": "medvlm_audit.suites.grounding.commands:build_probe_train_cmd",
}

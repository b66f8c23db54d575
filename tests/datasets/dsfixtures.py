"""Fixture generators that write small (or full-size) dataset trees in each dataset's real on-disk layout.

MIMIC-CXR-JPG 2.0.0: ``mimic-cxr-2.0.0-{metadata,chexpert,split}.csv.gz`` + ``files/pXX/pXXXXXXXX/sXXXXXXXX/<dicom>.jpg``
MS-CXR 1.1.0: ``MS_CXR_Local_Alignment_v1.1.0.csv`` (dicom_id, category_name, label_text, path, x, y, w, h,
image_width, image_height, split); ReXErr-v1: ``ReXErr-sentence-level/ReXErr-sentence-level_test.csv``;
MIMIC-IV 3.1: ``hosp/patients.csv.gz``; CheXpert-v1.0: ``train.csv``/``valid.csv`` + ``train/patientNNNNN/studyN/viewK_frontal.jpg``;
NIH ChestX-ray14: ``Data_Entry_2017_v2020.csv``, ``BBox_List_2017.csv``, ``images/NNNNNNNN_NNN.png``;
VinDr-CXR 1.0.0: ``annotations/annotations_test.csv``, ``annotations/image_labels_test.csv``, ``test/<id>.dicom|png``.
Values follow the real encodings (CheXpert 1.0/0.0/-1.0/blank, ViewPosition codes, NIH pipe-joined labels).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image

CHEX_COLS = [
    "Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Enlarged Cardiomediastinum", "Fracture",
    "Lung Lesion", "Lung Opacity", "No Finding", "Pleural Effusion", "Pleural Other", "Pneumonia",
    "Pneumothorax", "Support Devices",
]
MS_CATS = ["Atelectasis", "Cardiomegaly", "Consolidation", "Edema", "Lung Opacity", "Pleural Effusion",
           "Pneumonia", "Pneumothorax"]
#: eligible MS-CXR annotations per category that reproduce Supplementary Table 8 (cardiomegaly over the cap)
PAPER_MS_ELIGIBLE = {"Atelectasis": 35, "Cardiomegaly": 160, "Consolidation": 76, "Edema": 43, "Lung Opacity": 30,
                     "Pleural Effusion": 34, "Pneumonia": 97, "Pneumothorax": 37}
IMG_ERR = ["Add medical device", "Change name of device", "Change position of device", "Change location",
           "Change severity", "False negation", "False prediction", "Change view"]
TXT_ERR = ["Add typo", "Change to homophone", "Add repetition"]
OTHER_ERR = ["Add contradiction", "Change measurement"]


def _hex_ids(rng: np.random.Generator, n: int) -> np.ndarray:
    parts = rng.integers(0, 2**32, size=(5, n), dtype=np.uint64)
    out = np.char.mod("%08x", parts[0])
    for k in range(1, 5):
        out = np.char.add(np.char.add(out, "-"), np.char.mod("%08x", parts[k]))
    return out


def _write_jpeg(path: Path, w: int, h: int, value: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.full((h, w), value % 256, dtype=np.uint8)
    arr[h // 4: h // 2, w // 4: w // 2] = (value * 7) % 256
    Image.fromarray(arr).save(path, quality=70)


def make_mimic_tree(
    root: Path,
    *,
    n_subjects: int = 65_379,
    n_studies: int = 227_835,
    n_images: int = 377_110,
    test_every: int = 40,
    ms_eligible: dict[str, int] | None = None,
    ms_ineligible_per_cat: int = 4,
    n_rexerr: int = 9_000,
    images: bool = False,
    size: tuple[int, int] = (2544, 3056),
    seed: int = 0,
    gz: bool = True,
) -> dict[str, Path]:
    """Write MIMIC-CXR-JPG + MS-CXR + ReXErr-v1 + MIMIC-IV trees under ``root``; returns the four roots.

    Defaults give MIMIC's full size (377,110 images, 227,835 studies) and enough eligible records for the
    paper's exact counts; small arguments give a fast tree (``images=True`` also writes the JPEGs).
    """
    rng = np.random.default_rng(seed)
    root = Path(root)
    mroot, msroot = root / "mimic-cxr-jpg" / "2.0.0", root / "ms-cxr" / "1.1.0"
    rxroot, ivroot = root / "rexerr-v1" / "1.0.0", root / "mimiciv" / "3.1"
    for d in (mroot, msroot, rxroot / "ReXErr-sentence-level", ivroot / "hosp"):
        d.mkdir(parents=True, exist_ok=True)
    ext = ".csv.gz" if gz else ".csv"
    W, H = size

    subjects = 10_000_000 + np.arange(n_subjects) * 7 + 3
    st_subj = np.sort(np.concatenate([np.arange(n_subjects), rng.integers(0, n_subjects, n_studies - n_subjects)]))
    study_ids = 50_000_000 + rng.permutation(n_studies * 3)[:n_studies]
    # image i < n_studies is the study's frontal image; the rest are extra images of random studies
    img_study = np.concatenate([np.arange(n_studies), rng.integers(0, n_studies, n_images - n_studies)])
    first = np.arange(n_images) < n_studies
    views = np.where(first, np.where(rng.random(n_images) < 0.4, "PA", "AP"),
                     rng.choice(np.array(["LATERAL", "LL", "AP", "PA", "AP AXIAL", ""]), n_images,
                                p=[0.8, 0.1, 0.04, 0.03, 0.02, 0.01]))
    dicoms = _hex_ids(rng, n_images)
    subj_of_img = subjects[st_subj[img_study]]
    study_of_img = study_ids[img_study]
    dates = 21100101 + rng.integers(0, 8, n_images) * 10000 + rng.integers(0, 12, n_images) * 100
    meta = pd.DataFrame({
        "dicom_id": dicoms, "subject_id": subj_of_img, "study_id": study_of_img,
        "PerformedProcedureStepDescription": "CHEST (PA AND LAT)", "ViewPosition": views,
        "Rows": H, "Columns": W, "StudyDate": dates, "StudyTime": 120000.0,
        "ProcedureCodeSequence_CodeMeaning": "CHEST (PA AND LAT)", "ViewCodeSequence_CodeMeaning": "postero-anterior",
        "PatientOrientationCodeSequence_CodeMeaning": "Erect",
    })
    meta.loc[meta["ViewPosition"] == "", "ViewPosition"] = None
    test_subj = set(subjects[::test_every].tolist())
    is_test = np.isin(subj_of_img, list(test_subj))
    split = np.where(is_test, "test", np.where(rng.random(n_images) < 0.01, "validate", "train"))
    pd.DataFrame({"dicom_id": dicoms, "study_id": study_of_img, "subject_id": subj_of_img, "split": split}).to_csv(
        mroot / f"mimic-cxr-2.0.0-split{ext}", index=False)
    meta.to_csv(mroot / f"mimic-cxr-2.0.0-metadata{ext}", index=False)

    chex = {"subject_id": subjects[st_subj], "study_id": study_ids}
    for c in CHEX_COLS:
        if c == "No Finding":
            continue
        u = rng.random(n_studies)
        chex[c] = np.where(u < 0.12, 1.0, np.where(u < 0.24, 0.0, np.where(u < 0.27, -1.0, np.nan)))
    anypos = np.zeros(n_studies, bool)
    for c in CHEX_COLS:
        if c != "No Finding":
            anypos |= chex[c] == 1.0
    normal = ~anypos & (rng.random(n_studies) < 0.8)
    chex["No Finding"] = np.where(normal, 1.0, np.nan)
    cdf = pd.DataFrame(chex)[["subject_id", "study_id", *CHEX_COLS]]
    cdf = cdf.drop(index=rng.choice(n_studies, n_studies // 200, replace=False))  # a few studies unlabeled
    cdf.to_csv(mroot / f"mimic-cxr-2.0.0-chexpert{ext}", index=False, float_format="%.1f")

    keep_pat = rng.random(n_subjects) > 0.01
    pat = pd.DataFrame({
        "subject_id": subjects, "gender": rng.choice(np.array(["M", "F"]), n_subjects),
        "anchor_age": rng.integers(18, 92, n_subjects), "anchor_year": 2110 + rng.integers(0, 8, n_subjects),
        "anchor_year_group": "2014 - 2016", "dod": None,
    })[keep_pat]
    pat.loc[pat.sample(frac=0.003, random_state=1).index, "gender"] = None
    pat.to_csv(ivroot / "hosp" / f"patients{ext}", index=False)

    paths = ("files/p" + pd.Series(subj_of_img).astype(str).str[:2] + "/p" + pd.Series(subj_of_img).astype(str)
             + "/s" + pd.Series(study_of_img).astype(str) + "/" + pd.Series(dicoms) + ".jpg")
    # ----- MS-CXR: eligible boxes on non-test frontal images of patients with demographics
    ok_pat = set(pat.loc[pat["gender"].notna(), "subject_id"].tolist())
    elig = np.flatnonzero(first & ~is_test & np.isin(subj_of_img, list(ok_pat)))
    lateral = np.flatnonzero(np.isin(views, ["LATERAL", "LL"]) & ~is_test)
    ms_eligible = ms_eligible or PAPER_MS_ELIGIBLE
    rows = []
    pick = rng.permutation(elig)
    k = 0
    for cat in MS_CATS:
        n = ms_eligible.get(cat, 0)
        for _ in range(n):
            i = pick[k]
            k += 1
            bw, bh = rng.uniform(0.25, 0.5) * W, rng.uniform(0.25, 0.5) * H
            x, y = rng.uniform(0, W - bw), rng.uniform(0, H - bh)
            rows.append((dicoms[i], cat, f"{cat.lower()} phrase", paths[i], x, y, bw, bh, W, H, "test"))
        for j in range(ms_ineligible_per_cat):  # too small, lateral, unknown dicom
            i = pick[k]
            k += 1
            rows.append((dicoms[i], cat, "small", paths[i], 10.0, 10.0, 0.1 * W, 0.1 * H, W, H, "train"))
            if j == 0 and len(lateral):
                li = lateral[rng.integers(len(lateral))]
                rows.append((dicoms[li], cat, "lateral", paths[li], 10.0, 10.0, 0.4 * W, 0.4 * H, W, H, "train"))
            if j == 1:
                rows.append(("deadbeef-00000000-00000000-00000000-00000000", cat, "unknown", "files/x.jpg", 10.0,
                             10.0, 0.4 * W, 0.4 * H, W, H, "val"))
    ms = pd.DataFrame(rows, columns=["dicom_id", "category_name", "label_text", "path", "x", "y", "w", "h",
                                     "image_width", "image_height", "split"])
    ms.to_csv(msroot / "MS_CXR_Local_Alignment_v1.1.0.csv", index=False)

    # ----- ReXErr sentence level (test): sentences of test-split studies
    test_imgs = np.flatnonzero(is_test & first)
    tstudies = rng.choice(test_imgs, n_rexerr)
    ep = rng.choice(np.array([0, 1, 2]), n_rexerr, p=[0.45, 0.42, 0.13])
    etypes = rng.choice(np.array(IMG_ERR + TXT_ERR + OTHER_ERR), n_rexerr)
    rdf = pd.DataFrame({
        "dicom_id": [f"{dicoms[i]}" for i in tstudies],
        "study_id": study_of_img[tstudies], "subject_id": subj_of_img[tstudies],
        "original_sentence": [f"sentence {j} of the report." for j in range(n_rexerr)],
        "error_sentence": [f"sentence {j} of the report{' (err)' if e == 1 else ''}." for j, e in enumerate(ep)],
        "error_present": ep, "error_type": np.where(ep == 1, etypes, None),
    })
    rdf.to_csv(rxroot / "ReXErr-sentence-level" / "ReXErr-sentence-level_test.csv", index=False)

    if images:
        for i in range(n_images):
            _write_jpeg(mroot / paths[i], W, H, i)
    return {"mimic_root": mroot, "ms_cxr_root": msroot, "rexerr_root": rxroot, "mimic_iv_root": ivroot}


CHEXPERT_ORDER = ["No Finding", "Enlarged Cardiomediastinum", "Cardiomegaly", "Lung Opacity", "Lung Lesion", "Edema",
                  "Consolidation", "Pneumonia", "Atelectasis", "Pneumothorax", "Pleural Effusion", "Pleural Other",
                  "Fracture", "Support Devices"]


def make_chexpert_tree(root: Path, *, n_patients: int = 400, images: bool = True, size: tuple[int, int] = (64, 80),
                       rare_negative: str = "Pleural Other", seed: int = 1) -> Path:
    """CheXpert-v1.0-small/{train,valid}.csv + train/patientNNNNN/studyN/viewK_{frontal,lateral}.jpg."""
    rng = np.random.default_rng(seed)
    base = Path(root) / "CheXpert-v1.0-small"
    rows = {"train": [], "valid": []}
    for p in range(1, n_patients + 1):
        part = "valid" if p % 50 == 0 else "train"
        sex = rng.choice(["Male", "Female", "Unknown"], p=[0.49, 0.49, 0.02])
        age = int(rng.integers(18, 90))
        healthy = rng.random() < 0.45
        for s in range(1, int(rng.integers(1, 4)) + 1):
            labels = {}
            for c in CHEXPERT_ORDER[1:]:
                if healthy:
                    labels[c] = 0.0 if rng.random() < 0.05 else np.nan
                    continue
                u = rng.random()
                neg_p = 0.01 if c == rare_negative else 0.3
                labels[c] = 1.0 if u < 0.3 else (0.0 if u < 0.3 + neg_p else (-1.0 if u < 0.35 + neg_p else np.nan))
            labels["No Finding"] = 1.0 if healthy else np.nan
            stem = f"CheXpert-v1.0-small/{part}/patient{p:05d}/study{s}"
            view = "PA" if rng.random() < 0.4 else "AP"
            rows[part].append({"Path": f"{stem}/view1_frontal.jpg", "Sex": sex, "Age": age, "Frontal/Lateral": "Frontal",
                               "AP/PA": view, **labels})
            if rng.random() < 0.5:
                rows[part].append({"Path": f"{stem}/view2_lateral.jpg", "Sex": sex, "Age": age,
                                   "Frontal/Lateral": "Lateral", "AP/PA": None, **labels})
    base.mkdir(parents=True, exist_ok=True)
    for part, rr in rows.items():
        df = pd.DataFrame(rr)[["Path", "Sex", "Age", "Frontal/Lateral", "AP/PA", *CHEXPERT_ORDER]]
        df.to_csv(base / f"{part}.csv", index=False, float_format="%.1f")
        if images:
            for i, pth in enumerate(df["Path"]):
                _write_jpeg(Path(root) / pth, size[0], size[1], i)
    return base


def make_chexpert_official_test(root: Path, *, n_patients: int = 120, images: bool = True,
                                size: tuple[int, int] = (64, 80), seed: int = 4) -> tuple[Path, Path, tuple[Path, Path]]:
    """The official CheXpert test set layout: ``test_labels.csv`` (Path + the 14 labels as 0/1, nothing else) and
    ``test/patientNNNNN/study1/viewK_{frontal,lateral}.jpg``; plus demographics in the CheXpert Plus style
    (``path_to_image, sex, age`` per image, no view columns) and in the demographics-sheet style
    (``PATIENT, GENDER, AGE_AT_CXR`` per patient). The last patient has no demographics row.
    Returns (root, labels csv, (image-keyed demographics csv, patient-keyed demographics csv))."""
    rng = np.random.default_rng(seed)
    base = Path(root) / "CheXpert-v1.0"
    rows, demo_img, demo_pat = [], [], []
    for k in range(n_patients):
        p = 64541 + k
        healthy = rng.random() < 0.3
        labels = {c: (0.0 if healthy else float(rng.random() < 0.35)) for c in CHEXPERT_ORDER[1:]}
        labels["No Finding"] = 1.0 if healthy else 0.0
        sex, age = rng.choice(["Male", "Female"]), int(rng.integers(20, 90))
        views = ["view1_frontal"] + (["view2_lateral"] if rng.random() < 0.4 else [])
        for v in views:
            path = f"test/patient{p}/study1/{v}.jpg"
            rows.append({"Path": path, **{c: labels[c] for c in CHEXPERT_ORDER}})
            if k < n_patients - 1:
                demo_img.append({"path_to_image": path, "sex": sex, "age": age})
        if k < n_patients - 1:
            demo_pat.append({"PATIENT": f"patient{p}", "GENDER": sex, "AGE_AT_CXR": age, "PRIMARY_RACE": "Other"})
    base.mkdir(parents=True, exist_ok=True)
    labels_csv = base / "test_labels.csv"
    pd.DataFrame(rows)[["Path", *CHEXPERT_ORDER]].to_csv(labels_csv, index=False, float_format="%.0f")
    by_image, by_patient = base / "df_chexpert_plus_test.csv", base / "chexpert_demo.csv"
    pd.DataFrame(demo_img).to_csv(by_image, index=False)
    pd.DataFrame(demo_pat).to_csv(by_patient, index=False)
    if images:
        for i, r in enumerate(rows):
            _write_jpeg(base / r["Path"], size[0], size[1], i)
    return base, labels_csv, (by_image, by_patient)


NIH_BOX_LABELS = ["Atelectasis", "Cardiomegaly", "Effusion", "Infiltrate", "Mass", "Nodule", "Pneumonia", "Pneumothorax"]
NIH_ALL = ["Atelectasis", "Cardiomegaly", "Effusion", "Infiltration", "Mass", "Nodule", "Pneumonia", "Pneumothorax",
           "Consolidation", "Edema", "Emphysema", "Fibrosis", "Pleural_Thickening", "Hernia"]


#: Data_Entry_2017_v2020.csv header variants: Kaggle/torchxrayvision copies ("Patient Gender", no trailing comma) and
#: the file as downloaded from NIH's Box folder ("Patient Sex", a trailing comma on the header and on every row)
NIH_HEADERS = {"kaggle": ("Patient Gender", False, False), "box": ("Patient Sex", True, True),
               "rows_only_comma": ("Patient Sex", False, True)}


def make_nih_tree(root: Path, *, n_images: int = 900, n_boxes: int = 60, images: bool = True, layout: str = "flat",
                  seed: int = 2, header: str = "kaggle") -> Path:
    """NIH ChestX-ray14: Data_Entry_2017_v2020.csv, BBox_List_2017.csv, test_list.txt and 1024x1024 PNGs
    in ``images/`` (flat) or ``images_001/images/`` (kaggle layout); ``header`` picks a NIH_HEADERS variant
    (the rows are the same for every variant)."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    img_dir = root / ("images" if layout == "flat" else "images_001/images")
    img_dir.mkdir(parents=True, exist_ok=True)
    rows, names = [], []
    pid = 0
    while len(rows) < n_images:
        pid += 1
        for k in range(int(rng.integers(1, 4))):
            name = f"{pid:08d}_{k:03d}.png"
            u = rng.random()
            labs = ["No Finding"] if u < 0.35 else sorted(set(rng.choice(NIH_ALL, int(rng.integers(1, 3))).tolist()))
            rows.append([name, "|".join(labs), k, pid, int(rng.integers(20, 85)), rng.choice(["M", "F"]),
                         rng.choice(["PA", "AP"], p=[0.6, 0.4]), 2500, 2048, 0.143, 0.143])
            names.append(name)
    sex_col, head_comma, row_comma = NIH_HEADERS[header]
    head = ("Image Index,Finding Labels,Follow-up #,Patient ID,Patient Age," + sex_col + ",View Position,"
            "OriginalImage[Width,Height],OriginalImagePixelSpacing[x,y]" + ("," if head_comma else "") + "\n")
    with open(root / "Data_Entry_2017_v2020.csv", "w") as f:
        f.write(head)
        f.writelines(",".join(str(v) for v in r) + ("," if row_comma else "") + "\n" for r in rows)
    (root / "test_list.txt").write_text("\n".join(names[: len(names) // 2]) + "\n")
    with open(root / "BBox_List_2017.csv", "w") as f:
        f.write("Image Index,Finding Label,Bbox [x,y,w,h],,,\n")
        box_imgs = rng.choice(len(rows), n_boxes, replace=False)
        for i, j in enumerate(box_imgs):
            lab = NIH_BOX_LABELS[i % len(NIH_BOX_LABELS)]
            small = i % 5 == 4
            w, h = (rng.uniform(40, 120), rng.uniform(40, 120)) if small else (rng.uniform(260, 500), rng.uniform(260, 500))
            x, y = rng.uniform(0, 1024 - w), rng.uniform(0, 1024 - h)
            f.write(f"{rows[j][0]},{lab},{x},{y},{w},{h}\n")
    if images:
        for i, n in enumerate(names):
            arr = np.full((1024, 1024), i % 200, dtype=np.uint8)
            Image.fromarray(arr).save(img_dir / n, compress_level=1)
    return root


VINDR_LOCAL = ["Aortic enlargement", "Cardiomegaly", "Pleural effusion", "Nodule/Mass", "Other lesion", "Lung Opacity"]


def write_dicom(path: Path, w: int, h: int, value: int) -> None:
    """A minimal MONOCHROME2 16-bit DICOM file (as VinDr-CXR ships them)."""
    from pydicom.dataset import Dataset, FileMetaDataset
    from pydicom.uid import ExplicitVRLittleEndian, SecondaryCaptureImageStorage, generate_uid

    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = SecondaryCaptureImageStorage
    meta.MediaStorageSOPInstanceUID = generate_uid()
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = Dataset()
    ds.file_meta = meta
    ds.SOPClassUID, ds.SOPInstanceUID = meta.MediaStorageSOPClassUID, meta.MediaStorageSOPInstanceUID
    ds.Rows, ds.Columns, ds.SamplesPerPixel = h, w, 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
    ds.PixelData = np.full((h, w), value % 4096, dtype=np.uint16).tobytes()
    ds.save_as(path, enforce_file_format=True)


def make_vindr_tree(root: Path, *, n_images: int = 240, fmt: str = "png", size: tuple[int, int] = (512, 640),
                    seed: int = 3) -> Path:
    """VinDr-CXR 1.0.0: annotations/annotations_test.csv, annotations/image_labels_test.csv, test/<id>.{png,dicom}."""
    rng = np.random.default_rng(seed)
    root = Path(root)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    (root / "test").mkdir(parents=True, exist_ok=True)
    W, H = size
    ann, labs = [], []
    ids = _hex_ids(rng, n_images)
    for i, iid in enumerate(ids):
        iid = iid.replace("-", "")[:32]
        ids[i] = iid
        lab = dict.fromkeys(VINDR_LOCAL + ["No finding", "Pneumonia"], 0)
        if rng.random() < 0.4:
            ann.append((iid, "R8", "No finding", None, None, None, None))
            lab["No finding"] = 1
        else:
            for c in rng.choice(VINDR_LOCAL, int(rng.integers(1, 3)), replace=False):
                for _ in range(int(rng.integers(1, 3))):  # one or two boxes of the same class
                    bw, bh = rng.uniform(0.05, 0.4) * W, rng.uniform(0.05, 0.4) * H
                    x, y = rng.uniform(0, W - bw), rng.uniform(0, H - bh)
                    ann.append((iid, "R8", c, x, y, x + bw, y + bh))
                lab[c] = 1
        labs.append({"image_id": iid, "rad_id": "R8", **lab})
        if fmt == "png":
            Image.fromarray(np.full((H, W), i % 200, dtype=np.uint8)).save(root / "test" / f"{iid}.png", compress_level=1)
        else:
            write_dicom(root / "test" / f"{iid}.dicom", W, H, i)
    pd.DataFrame(ann, columns=["image_id", "rad_id", "class_name", "x_min", "y_min", "x_max", "y_max"]).to_csv(
        root / "annotations" / "annotations_test.csv", index=False)
    pd.DataFrame(labs).to_csv(root / "annotations" / "image_labels_test.csv", index=False)
    return root

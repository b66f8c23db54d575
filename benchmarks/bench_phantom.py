"""Benchmark the embedded default's parts: phantom build, reference-panel fit, and the panel answering a demo-sized run.

    .venv/bin/python benchmarks/bench_phantom.py [--cases 800] [--train 1500]

Prints wall and CPU seconds (children included) with ratios against baselines run in the same script:
the build in one process vs the parallel build, Pillow's PNG encoder vs the phantom's, and each model's
answering time vs the always-yes model (which does no work). Also the reuse of a finished build and peak RSS.
"""

from __future__ import annotations

import argparse
import io
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image


def cpu_s() -> float:
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def timed(fn):  # type: ignore[no-untyped-def]
    w, c = time.perf_counter(), cpu_s()
    out = fn()
    return out, time.perf_counter() - w, cpu_s() - c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", type=int, default=800)
    ap.add_argument("--train", type=int, default=1500)
    args = ap.parse_args()

    from medvlm_audit.phantom import render_study
    from medvlm_audit.phantom.anatomy import encode_png
    from medvlm_audit.suites.grounding.phantom_probeset import build_phantom

    print(f"phantom benchmark: {args.cases} test cases, {args.train} training cases; python {sys.version.split()[0]}")
    # --- PNG encoding: Pillow vs the phantom encoder on a 512 phantom image
    px, _ = render_study({"pleural_effusion": True}, sex="F", age=70, view="AP", seed=1)
    n = 50
    _, w_pil, _ = timed(lambda: [Image.fromarray(px).save(io.BytesIO(), format="PNG", compress_level=1) for _ in range(n)])
    _, w_own, _ = timed(lambda: [encode_png(px) for _ in range(n)])
    print(f"PNG encode 512x512: Pillow {w_pil / n * 1e3:.1f} ms, phantom {w_own / n * 1e3:.1f} ms "
          f"(x{w_pil / w_own:.1f} faster)")
    _, w_r, _ = timed(lambda: [render_study({"pneumonia": True}, sex="M", age=60, view="PA", seed=i) for i in range(n)])
    print(f"render 512x512: {w_r / n * 1e3:.1f} ms/image")

    with tempfile.TemporaryDirectory() as tmp:
        tmp_p = Path(tmp)
        (test, train), w_seq, c_seq = timed(lambda: build_phantom(tmp_p / "seq", args.cases, args.train, workers=1))
        n_img = len(set(test.df["image_path"]) | set(train.df["image_path"]))
        print(f"build, one process: {w_seq:.2f} s wall, {c_seq:.2f} s CPU ({n_img} images)")
        (test, train), w_par, c_par = timed(lambda: build_phantom(tmp_p / "par", args.cases, args.train))
        print(f"build, parallel   : {w_par:.2f} s wall, {c_par:.2f} s CPU (x{w_seq / w_par:.2f} vs one process)")
        _, w_re, _ = timed(lambda: build_phantom(tmp_p / "par", args.cases, args.train))
        print(f"rebuild (reuse)   : {w_re:.2f} s wall")

        _, w_imp, _ = timed(lambda: __import__("sklearn.linear_model"))
        from medvlm_audit.suites.grounding.reference import fit_reference_panel

        panel, w_fit, c_fit = timed(lambda: fit_reference_panel(train))
        print(f"fit panel: {w_fit:.2f} s wall, {c_fit:.2f} s CPU (+ {w_imp:.2f} s importing scikit-learn)")

        # --- a demo-sized set of inputs: original, swap, target/irrelevant mask, no image at 224; original at 512
        from medvlm_audit.models.base import ImageData, Message, ModelInput
        from medvlm_audit.suites.grounding.prompts import grounding_prompt

        def load(path: str, res: int) -> np.ndarray:
            with Image.open(test.resolve(path)) as im:
                im = im.convert("L")
                return np.asarray(im if im.width == res else im.resize((res, res), Image.BILINEAR))

        def build_inputs() -> list[ModelInput]:
            out = []
            for c in test.cases():
                msgs = (Message("user", grounding_prompt(c)),)
                o = load(c.image, 224)
                imgs = [o, load(c.swap_image, 224), load(c.image, 512)]
                if c.tbox is not None:
                    for b in (c.tbox, c.ibox):
                        m = o.copy()
                        m[b[1] : b[3], b[0] : b[2]] = 0
                        imgs.append(m)
                out += [ModelInput(msgs, (ImageData.from_array(i),)) for i in imgs]
                out.append(ModelInput(msgs))
            return out

        inputs, w_in, _ = timed(build_inputs)
        print(f"inputs: {len(inputs)} per model, {len(inputs) * len(panel)} in all (built in {w_in:.2f} s)")
        base = None
        total = 0.0
        for m in sorted(panel, key=lambda m: m.kind != "always_yes"):
            def ask(m=m) -> None:  # type: ignore[no-untyped-def]
                for i in range(0, len(inputs), m.batch_size):
                    m.predict([m.prepare(x) for x in inputs[i : i + m.batch_size]])

            _, w_p, c_p = timed(ask)
            total += w_p
            base = base or w_p
            print(f"  {m.kind:20s} {w_p:6.2f} s wall {c_p:6.2f} s CPU  {len(inputs) / w_p:8.0f} answers/s  "
                  f"(x{w_p / base:.1f} always_yes)")
        print(f"panel answers {len(inputs) * len(panel)} inputs in {total:.2f} s")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS (this process): {rss:.0f} MiB")


if __name__ == "__main__":
    main()

"""An offline batch runner standing in for vLLM's ``run_batch`` (no server, no GPU):

    python -m medvlm_audit.testing.run_batch -i requests.jsonl -o results.jsonl

reads OpenAI batch request lines and writes vLLM-style output lines (``{"id", "custom_id", "response":
{"status_code", "request_id", "body"}, "error"}``, failures in the same file) with the fake server's answers
(:func:`~medvlm_audit.testing.fake_openai.completion_body`: the same body gets the same answer as online).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from medvlm_audit.testing.fake_batches import BatchFaults, _jsonl, answer_lines
from medvlm_audit.testing.fake_openai import completion_body, prompt_key


def run_batch(input_path: str | Path, output_path: str | Path, faults: BatchFaults | None = None,
              answer_fn: Callable[[Mapping[str, Any]], str] | None = None) -> int:
    """Answer every request line of ``input_path`` into ``output_path``; return the number of request lines."""
    lines = [json.loads(x) for x in Path(input_path).read_text().splitlines() if x.strip()]

    def complete(body: dict[str, Any]) -> dict[str, Any]:
        return completion_body(body, prompt_key(body), answer_fn=answer_fn)

    out, err, _ = answer_lines(lines, complete, faults, prefix="vllm")
    Path(output_path).write_bytes(_jsonl(out + err))
    return len(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m medvlm_audit.testing.run_batch",
                                 description="Offline batch runner standing in for vLLM's run_batch.")
    ap.add_argument("-i", "--input-file", required=True)
    ap.add_argument("-o", "--output-file", required=True)
    ap.add_argument("--drop-every", type=int, default=0, help="leave every n-th line out (partial output)")
    args = ap.parse_args(argv)
    n = run_batch(args.input_file, args.output_file, BatchFaults(drop_every=args.drop_every))
    print(f"{n} requests -> {args.output_file}")


if __name__ == "__main__":
    main()

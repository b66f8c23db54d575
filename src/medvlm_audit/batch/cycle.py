"""``batch: true`` on an ``openai`` model: the runner's pending inputs go to the provider's batch API.

:class:`BatchModel` wraps the online client. Its identity, preparation and image encoding are the client's, so
its store keys are the online keys; the runner hands it every pending input in one ``generate`` call
(``batch_size`` is unbounded) and it runs the whole cycle: export the request lines (the online bodies),
upload (``/files``), create (``/batches``), poll with backoff and a progress line, download the output and
error files, parse each line exactly as an online answer, commit the answers, and return them.

Crash safety (see :mod:`medvlm_audit.batch.records`): each submission is recorded in the store before the
upload, and its file and batch ids as soon as they are known, so a ``run`` killed while polling resumes by
polling the same batch; a batch created just before a kill is found by its metadata nonce. A batch's answers
are committed before its record is closed.

What comes back: an answer per line of the output file; an error line is stored as its error kind
(``http_4xx``, ``http_5xx``, ``batch_error``); a line the provider did not run before its window closed is
stored as ``batch_expired``: ``--retry-errors`` asks both again (in a new batch, or online with
``batch: false``). A request in neither file (partial output) or a batch still running after
``batch_max_wait_s`` is not stored, so the next ``run`` asks it (resuming the running batch first).
"""

from __future__ import annotations

import asyncio
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from medvlm_audit.batch import records
from medvlm_audit.batch.client import BatchClient
from medvlm_audit.batch.lines import (
    BATCH_ERROR,
    EXPIRED,
    MAX_BYTES,
    MAX_LINES,
    BatchError,
    chunks,
    read_output,
    request_line,
    served_model,
)
from medvlm_audit.errors import ConfigError
from medvlm_audit.models.base import NOT_ASKED, ErrorInfo, Model, ModelInput, Response, input_key

TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class BatchModel(Model):
    """An OpenAI-compatible model asked through the provider's batch API (see the module docstring).

    ``run_dir``: the run whose store records the submissions. ``poll_s``: first wait between polls (then x1.5,
    at most ``poll_max_s``); ``max_wait_s``: stop waiting after this long (None: until the provider ends the
    batch); ``completion_window``: the provider's window (OpenAI: ``24h``); ``max_lines`` / ``max_bytes``: the
    provider's limits per input file."""

    batch_size = 2**62  # the runner hands every pending input in one call
    max_concurrency = 1

    def __init__(self, inner: Model, run_dir: Any, *, poll_s: float = 30.0, poll_max_s: float = 300.0,
                 max_wait_s: float | None = None, completion_window: str = "24h", max_lines: int = MAX_LINES,
                 max_bytes: int = MAX_BYTES, log: Callable[[str], Any] = _stderr) -> None:
        if poll_s <= 0 or poll_max_s <= 0 or (max_wait_s is not None and max_wait_s < 0):
            raise ConfigError(f"model {inner.name!r}: batch_poll_s and batch_poll_max_s must be > 0, "
                              "batch_max_wait_s >= 0")
        self.inner = inner
        self.name = inner.name
        self.modality = inner.modality
        self.run_dir = run_dir
        self.poll_s = float(poll_s)
        self.poll_max_s = float(poll_max_s)
        self.max_wait_s = max_wait_s
        self.completion_window = completion_window
        self.max_lines = int(max_lines)
        self.max_bytes = int(max_bytes)
        self.log = log
        self.submitted: list[str] = []  # batch ids created by this object (for summaries and tests)

    # the online client's keys, preparation and image encoding
    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    def prepare(self, inp: ModelInput) -> ModelInput:
        return self.inner.prepare(inp)

    def image_encoder(self) -> Any:
        return self.inner.image_encoder()

    def prime_image(self, sha256: str, encoded: bytes) -> None:
        self.inner.prime_image(sha256, encoded)

    async def aclose(self) -> None:
        await self.inner.aclose()

    def check_decoding(self, d: Any) -> None:
        check = getattr(self.inner, "check_decoding", None)
        if check is not None:
            check(d)

    def check_credentials(self) -> None:
        check = getattr(self.inner, "check_credentials", None)
        if check is not None:
            check()

    async def check_endpoints(self, timeout_s: float = 10.0) -> tuple[list[str], list[str]]:
        check = getattr(self.inner, "check_endpoints", None)
        return await check(timeout_s) if check is not None else ([], [])

    def __repr__(self) -> str:
        return f"BatchModel({self.inner!r})"

    # -- the cycle ---------------------------------------------------------------------------------
    async def generate(self, inputs: Sequence[ModelInput]) -> list[Response]:
        from medvlm_audit.store import RunStore

        if not inputs:
            return []
        ident = self.identity()
        keys = [input_key(ident, inp) for inp in inputs]  # the runner's keys: same identity, same input
        store = RunStore.open_dir(self.run_dir)
        why = f"model {self.name!r}: no batch answer yet; run again to ask it"
        try:
            answers = await self._cycle(store, dict(zip(keys, inputs)))
        except BatchError as e:  # the provider's API failed: nothing is stored as an answer, a rerun resumes
            self.log(f"{self.name}: {e}; every recorded submission is kept: run again to resume")
            answers, why = {}, f"not asked: {e}"
        finally:
            store.close()
        out = []
        for k in keys:
            r = answers.get(k)
            out.append(r if r is not None else Response(None, error=ErrorInfo(NOT_ASKED, why, 1, True)))
        return out

    async def _cycle(self, store: Any, want: dict[str, ModelInput]) -> dict[str, Response]:
        client = BatchClient(served_model(self))
        answers: dict[str, Response] = {}
        tracked: list[records.BatchRecord] = []
        covered: set[str] = set()
        for rec in records.open_records(store, self.name):
            if not any(k in want for k in rec.keys):  # its answers are committed already (a kill after commit)
                rec.done = True
                records.update(store, rec)
                continue
            if rec.batch_id is None:
                found = await client.find(rec.nonce, rec.input_file)
                if found is not None:
                    rec.batch_id, rec.status = str(found["id"]), str(found.get("status"))
                    records.update(store, rec)
                    self.log(f"{self.name}: found batch {rec.batch_id} of an interrupted submission")
                elif rec.input_file is not None:
                    try:
                        await self._create(client, store, rec)
                    except BatchError as e:  # e.g. the uploaded file is gone: upload its inputs afresh
                        if e.status is None or e.status == 429 or e.status >= 500:
                            raise
                        rec.done, rec.status = True, "abandoned"
                        records.update(store, rec, str(e))
                        continue
                else:  # killed before its upload finished: submit its inputs afresh
                    rec.done, rec.status = True, "abandoned"
                    records.update(store, rec, "killed before the upload finished")
                    continue
            else:
                self.log(f"{self.name}: resuming batch {rec.batch_id} (no new batch is submitted for its inputs)")
            tracked.append(rec)
            covered.update(rec.keys)
        todo = [(k, inp) for k, inp in want.items() if k not in covered]
        if todo:
            lines = ((k, request_line(self.inner, k, inp)) for k, inp in todo)
            for part in chunks(lines, self.max_lines, self.max_bytes):
                rec = records.BatchRecord(uuid.uuid4().hex, self.name, [k for k, _ in part])
                records.add(store, rec)  # before the upload: a kill from here on is recovered
                data = b"".join(line for _, line in part)
                rec.input_file = await client.upload(data, f"medvlm-{rec.nonce[:12]}.jsonl")
                rec.status = "uploaded"
                records.update(store, rec)
                await self._create(client, store, rec)
                tracked.append(rec)
        await self._wait(client, store, tracked, want, answers)
        return answers

    async def _create(self, client: BatchClient, store: Any, rec: records.BatchRecord) -> None:
        b = await client.create(str(rec.input_file), self.completion_window,
                                {"medvlm_nonce": rec.nonce, "medvlm_model": self.name})
        rec.batch_id, rec.status = str(b["id"]), str(b.get("status") or "validating")
        records.update(store, rec)  # recorded before anything else happens
        self.submitted.append(rec.batch_id)
        self.log(f"{self.name}: submitted batch {rec.batch_id} ({len(rec.keys):,} requests, "
                 f"window {self.completion_window})")

    async def _wait(self, client: BatchClient, store: Any, tracked: list[records.BatchRecord],
                    want: dict[str, ModelInput], answers: dict[str, Response]) -> None:
        t0 = time.monotonic()
        pause = self.poll_s
        last: dict[str, str] = {}
        pending = list(tracked)
        while pending:
            still = []
            for rec in pending:
                assert rec.batch_id is not None
                try:
                    b = await client.get(rec.batch_id)
                except BatchError as e:
                    if e.status != 404:
                        raise
                    rec.done, rec.status = True, "unknown"  # deleted, or another account's: submit afresh
                    records.update(store, rec, str(e))
                    self.log(f"{self.name}: batch {rec.batch_id} is unknown to the provider (HTTP 404); its "
                             "inputs are not stored and the next run submits them again")
                    continue
                rec.status = str(b.get("status"))
                counts = b.get("request_counts") or {}
                line = (f"{self.name}: batch {rec.batch_id} {rec.status}: {counts.get('completed', 0):,} of "
                        f"{counts.get('total', len(rec.keys)):,} done, {counts.get('failed', 0):,} failed, "
                        f"{time.monotonic() - t0:.0f} s")
                if last.get(rec.batch_id) != line.rsplit(",", 1)[0]:
                    self.log(line)
                    last[rec.batch_id] = line.rsplit(",", 1)[0]
                if rec.status in TERMINAL:
                    await self._finish(client, store, rec, b, want, answers)
                else:
                    still.append(rec)
            pending = still
            if not pending:
                break
            if self.max_wait_s is not None and time.monotonic() - t0 >= self.max_wait_s:
                for rec in pending:
                    records.update(store, rec)
                    self.log(f"{self.name}: batch {rec.batch_id} still {rec.status} after {self.max_wait_s:g} s "
                             "(batch_max_wait_s); run again to resume polling it: no new batch is submitted")
                return
            await asyncio.sleep(pause)
            pause = min(pause * 1.5, self.poll_max_s)

    async def _finish(self, client: BatchClient, store: Any, rec: records.BatchRecord, b: dict[str, Any],
                      want: dict[str, ModelInput], answers: dict[str, Response]) -> None:
        """Download, parse and commit a finished batch's answers, then close its record."""
        got: dict[str, Response] = {}
        for fid_field in ("output_file_id", "error_file_id"):
            fid = b.get(fid_field)
            if fid:
                data = await client.content(str(fid))
                for cid, resp in read_output(data, f"batch {rec.batch_id} {fid_field.split('_')[0]} file"):
                    if cid in rec.keys:
                        got[cid] = resp
        missing = [k for k in rec.keys if k not in got]
        status = rec.status
        message = None
        if status == "expired":
            message = (f"batch {rec.batch_id} expired: the provider's {self.completion_window} window closed with "
                       f"{len(missing) + sum(r.error is not None and r.error.kind == EXPIRED for r in got.values()):,} "
                       "requests not run; they are stored as error 'batch_expired': run again with --retry-errors to "
                       "ask them in a new batch (or set batch: false to ask them online)")
            for k in missing:
                got[k] = Response(None, error=ErrorInfo(EXPIRED, f"batch {rec.batch_id}: the provider's completion "
                                                                 "window expired before this request ran", 1, True))
        elif status == "failed":
            errs = (b.get("errors") or {}).get("data") or []
            why = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errs[:3]) or "no reason given"
            message = (f"batch {rec.batch_id} failed ({why}); its {len(missing):,} requests are stored as error "
                       "'batch_error': --retry-errors asks them again")
            for k in missing:
                got[k] = Response(None, error=ErrorInfo(BATCH_ERROR, f"batch {rec.batch_id} failed: {why}", 1, False))
        elif missing:
            message = (f"batch {rec.batch_id} {status}: {len(missing):,} requests came back in neither the output "
                       "nor the error file; they are not stored, so the next run asks them")
        if message:
            self.log(f"{self.name}: {message}")
        committed = [(k, r) for k, r in got.items() if k in want]
        if committed:
            store.put_responses(committed)  # the runner commits the same answers again (same rows)
        answers.update(got)
        rec.done = True
        records.update(store, rec, message)


def batch_factory(inner: Model, params: dict[str, Any], context: dict[str, Any]) -> Model:
    """Wrap ``inner`` in a :class:`BatchModel` when ``params`` asks for ``batch: true`` (the ``batch_*`` keys of a
    model entry; ``context`` may carry the run directory and the command line's ``batch_poll_s`` /
    ``batch_max_wait_s``)."""
    run_dir = context.get("run_dir")
    if run_dir is None:
        raise ConfigError(f"model {inner.name!r}: batch: true needs a run directory (use it through `run`)")
    kw: dict[str, Any] = {k.removeprefix("batch_"): v for k, v in params.items() if k.startswith("batch_")}
    for k in ("poll_s", "max_wait_s"):
        if context.get(f"batch_{k}") is not None:
            kw[k] = context[f"batch_{k}"]
    try:
        return BatchModel(inner, run_dir, **kw)
    except TypeError as e:
        raise ConfigError(f"model {inner.name!r}: bad batch option: {e}") from None


__all__ = ["BatchError", "BatchModel", "batch_factory"]

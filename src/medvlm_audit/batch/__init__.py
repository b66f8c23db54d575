"""Batch inference: the run's missing inputs as OpenAI batch JSONL, for a provider's batch API (about half the
price of online requests) or vLLM's offline ``run_batch``, and their output ingested into the same store.

- :mod:`~medvlm_audit.batch.lines`: request lines (``custom_id`` = the input's content key, ``body`` = the
  online body) and output / error lines back to responses;
- :mod:`~medvlm_audit.batch.offline`: ``batch export`` (and its ``--dry-run`` counts) and ``batch ingest``;
- :mod:`~medvlm_audit.batch.cycle`: ``batch: true`` on an ``openai`` model: upload, create, poll, download and
  commit from ``run``, resuming the same batch after a kill (:mod:`~medvlm_audit.batch.records`);
- :mod:`~medvlm_audit.batch.client`: the provider's ``/files`` and ``/batches`` routes.

See docs/batch.md.
"""

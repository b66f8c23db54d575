"""The reader-study app: blinded clinician reading under the run's interventions (papers 000, 001, 003).

The reading tasks belong to the suites (``Suite.reader_tasks()``, the interface in ``tasks``; ``catalog`` finds a
task by name): each brings its answer scales, a sampler of items and the analysis of its reads. This package is
the same for every task: ``study`` (the study store, reader orders, tokens), ``app`` (Starlette + Jinja2, no CDN),
``render`` (a read's image by the run's recipe), ``export``, ``agreement`` (metric rows and the agreement
statistics between readers), ``sampling`` (helpers for a task's sampler), ``analysis`` (every export by its task,
then the agreement figure and the report sections) and ``commands`` (``medvlm-audit readers``). It names no
suite's columns.
"""

"""The reader-study app: blinded clinician reading under the run's interventions (papers 000, 001, 003).

``study`` builds and stores a study from a run's tidy table and run store, ``app`` serves it (Starlette +
Jinja2, no CDN), ``commands`` holds the ``medvlm-audit readers`` commands and ``analysis`` turns the reads
into metrics in the shared long schema and report sections. It is not a suite and imports none.
"""

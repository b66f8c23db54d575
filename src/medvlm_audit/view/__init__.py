"""The local run explorer (`medvlm-audit view RUN`): from a metric to the cases behind it, read-only."""

"""A config value YAML reads as a boolean or a number where text is meant (`name: yes`, `name: 1.0`) is refused
with the reason and the fix (quote it), not only "Input should be a valid string" (fast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from medvlm_audit.config import load_config
from medvlm_audit.errors import ConfigError

_CFG = """suite: stress
run_dir: {run}
probe_sets: [items.jsonl]
models:
  - {{name: {name}, backend: openai, model: m, base_urls: [http://127.0.0.1:9/v1]}}
"""


@pytest.mark.parametrize(("name", "said"), [
    ("yes", 'the boolean true (as it reads yes, no, on, off, true, false): quote it, e.g. name: "yes"'),
    ("off", 'the boolean false (as it reads yes, no, on, off, true, false): quote it, e.g. name: "no"'),
    ("1.0", 'the number 1.0: quote it, e.g. name: "1.0"'),
])
def test_a_name_yaml_reads_as_a_boolean_or_number_says_so_and_to_quote_it(tmp_path: Path, name: str,
                                                                          said: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(_CFG.format(run=tmp_path / "run", name=name))
    with pytest.raises(ConfigError) as e:
        load_config(f)
    line = next(x for x in str(e.value).splitlines() if "models.0.name" in x)
    assert line.strip() == f"key 'models.0.name': Input should be a valid string; YAML read the unquoted value as {said}"
    f.write_text(_CFG.format(run=tmp_path / "run", name=f'"{name}"'))
    assert load_config(f).models[0].name == name  # quoted, it is the text
    assert not (tmp_path / "run").exists()


def test_a_wrong_value_that_is_not_a_yaml_reading_gets_no_hint(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(_CFG.format(run=tmp_path / "run", name="ok") + "repeats: many\n")
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert "key 'repeats'" in str(e.value) and "YAML read" not in str(e.value)

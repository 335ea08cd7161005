"""docs/CONFIG.md is what the config schema generates (``python -m rlcap.train.config_doc docs/CONFIG.md``)."""

from pathlib import Path

from rlcap.config import describe
from rlcap.train.run_config import run_config_class
from rlcap.train.config_doc import config_markdown
from rlcap.train.registry import METHODS

CONFIG_MD = Path(__file__).resolve().parents[2] / "docs" / "CONFIG.md"


def test_config_md_is_current():
    assert CONFIG_MD.read_text(encoding="utf-8") == config_markdown(), (
        "docs/CONFIG.md is stale: run `python -m rlcap.train.config_doc docs/CONFIG.md`")


def test_every_key_of_every_method_is_on_the_page():
    page = CONFIG_MD.read_text(encoding="utf-8")
    for name in METHODS:
        for key, _, _ in describe(run_config_class(name)):
            assert f"| `{key}` |" in page, key

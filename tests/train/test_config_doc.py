"""docs/CONFIG.md is what the config schema generates (``python tools/config_doc.py docs/CONFIG.md``)."""

import importlib.util
from pathlib import Path

from rlcap.config import describe
from rlcap.methods import METHODS

ROOT = Path(__file__).resolve().parents[2]
CONFIG_MD = ROOT / "docs" / "CONFIG.md"


def config_markdown() -> str:
    spec = importlib.util.spec_from_file_location("config_doc", ROOT / "tools" / "config_doc.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.config_markdown()


def test_config_md_is_current():
    assert CONFIG_MD.read_text(encoding="utf-8") == config_markdown(), (
        "docs/CONFIG.md is stale: run `python tools/config_doc.py docs/CONFIG.md`")


def test_every_key_of_every_method_is_on_the_page():
    page = CONFIG_MD.read_text(encoding="utf-8")
    for method in METHODS.values():
        for key, _, _ in describe(method.config):
            assert f"| `{key}` |" in page, key

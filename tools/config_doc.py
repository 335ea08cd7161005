"""docs/CONFIG.md, generated from the config schema: the keys every run reads, then each method's own.

``python tools/config_doc.py docs/CONFIG.md`` rewrites it; a test checks that the committed file is what
this prints, so that the page never drifts from the code.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlcap.command_options import OPTION_HELP
from rlcap.config import describe, read_yaml
from rlcap.methods import METHODS, load_run_config
from rlcap.recipes import checkout_configs
from rlcap.rewards.reward_config import RewardConfig
from rlcap.run_config import RLConfig, RunConfig, SequenceRunConfig


def _table(rows: list[tuple[str, str, str]]) -> list[str]:
    lines = ["| key | default | what it does |", "|---|---|---|"]
    for key, default, text in rows:
        lines.append(f"| `{key}` | `{default}` | {text.replace('|', '/')} |")
    return lines


def recipes_of(algorithm: str) -> list[str]:
    """The recipes in the checkout's configs/ that run ``algorithm`` (none when rlcap is installed
    without its checkout)."""
    folder = checkout_configs()
    if not folder.is_dir():
        return []
    return [p.name for p in sorted(folder.glob("*.yaml")) if read_yaml(p).get("algorithm", "xe") == algorithm]


def config_markdown() -> str:
    """The page: shared sections, the ``rl`` section, then one section per registered method."""
    out = ["# Configuration keys", "",
           "Generated from the config schema by `python tools/config_doc.py docs/CONFIG.md` (a test keeps",
           "it current). A run reads the keys below that every method shares, `rl.*` when its method is a",
           "sequence-level one, `reward.*` when its policy learns from a reward, and its method's own section,",
           "named as the method (`scst.baseline`). Set them",
           "in a YAML recipe or as `key=value` overrides; `rlcap train --help-config algorithm=NAME` lists the",
           "keys of one method. Sections of other methods are left out of a run with a warning; any other",
           "unknown key is an error listing the valid ones.", "",
           "Options of the `rlcap train` command are given the same way but are not settings of the run (no",
           "recipe or `config.json` holds them; in Python, `resume` and `overwrite` are arguments of `api.train`): "
           + "; ".join(f"`{key}=...` {text}" for key, text in OPTION_HELP.items()) + ".", "",
           "## Every run", ""]
    shared = [(k, d, RunConfig().key_help(k, t)) for k, d, t in describe(RunConfig) if k != "algorithm"]
    out += _table([("algorithm", "'xe'", "the training method: " + ", ".join(f"`{n}`" for n in METHODS)), *shared])
    out += ["", "## `rl`: the sequence-level methods", "",
            "Read by " + ", ".join(f"`{n}`" for n, m in METHODS.items() if issubclass(m.config, SequenceRunConfig)) + ".", ""]
    out += _table(describe(RLConfig, prefix="rl."))
    out += ["", "## `reward`: the methods that learn from a reward", "",
            "Read by " + ", ".join(f"`{n}`" for n, m in METHODS.items() if issubclass(m.config, SequenceRunConfig)) + ".", ""]
    out += _table(describe(RewardConfig, prefix="reward."))
    for name, method in METHODS.items():
        out += ["", f"## `algorithm: {name}`", "", method.help[:1].upper() + method.help[1:] + "." if method.help else ""]
        cls = method.section
        if cls is None:
            out += ["", "No section of its own."]
            continue
        doc = (cls.__doc__ or "").strip()
        if doc and not doc.startswith(cls.__name__ + "("):  # a dataclass without a docstring gets its signature
            out += ["", " ".join(doc.split())]
        out += [""] + _table(describe(cls, prefix=f"{name}."))
        keys = [row[0] for row in describe(method.config)]
        default = load_run_config(None, [f"algorithm={name}"], shared=True).as_typically_run()
        read = sum(default.reads(key) for key in keys)
        start = " and an XE checkpoint to start from (`init_from`)" if method.config.FROM_XE else ""
        out += ["", f"A run of `{name}` has {len(keys)} keys; with the default settings{start} it reads {read} of "
                    f"them (`--help-config algorithm={name}` lists those; the others belong to another `model.arch`, "
                    "reward or setting, or the method never reads them"
                    + ("; the model keys and `data.min_count` come from the checkpoint)." if method.config.FROM_XE else ").")]
        recipes = recipes_of(name)
        if recipes:
            out += ["", "Recipes: " + ", ".join(f"`configs/{r}`" for r in recipes) + "."]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    text = config_markdown()
    if args:
        Path(args[0]).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

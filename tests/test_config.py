from pathlib import Path

import pytest

from rlcap.config import apply_overrides, describe
from rlcap.errors import ConfigError
from rlcap.methods import load_run_config
from rlcap.run_config import RunConfig

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_shipped_config_loads(path):
    cfg = load_run_config(path)
    assert isinstance(cfg, RunConfig)
    assert cfg.data.dataset and cfg.data.features


def test_there_are_shipped_configs():
    assert len(CONFIGS) >= 1


def test_overrides_reach_nested_sections():
    cfg = load_run_config(None, ["model.hidden_dim=64", "optim.lr=0.01", "track.to=[]", "xe.epochs=3"])
    assert cfg.model.hidden_dim == 64 and cfg.optim.lr == 0.01 and cfg.track.to == [] and cfg.xe.epochs == 3


def test_int_is_accepted_for_float():
    assert load_run_config(None, ["optim.lr=1"]).optim.lr == 1.0


def test_exponent_without_a_dot_is_a_float():
    # YAML 1.1 reads 2e-5 as a string; a float field takes it as the number
    assert load_run_config(None, ["optim.lr=2e-5"]).optim.lr == 2e-5
    with pytest.raises(ConfigError, match="expected float"):
        load_run_config(None, ["optim.lr=fast"])


def test_unknown_key_lists_the_valid_ones():
    with pytest.raises(ConfigError) as err:
        load_run_config(None, ["model.hiden_dim=64"])
    message = str(err.value)
    assert "model.hiden_dim" in message and "hidden_dim" in message and "embed_dim" in message


def test_unknown_top_level_key():
    with pytest.raises(ConfigError, match="unknown config key bogus"):
        load_run_config(None, ["bogus=1"])


def test_wrong_type_is_rejected():
    with pytest.raises(ConfigError, match="xe.epochs: expected int"):
        load_run_config(None, ["xe.epochs=many"])
    with pytest.raises(ConfigError, match="track.required: expected true or false"):
        load_run_config(None, ["track.required=3"])


def test_invalid_choice_lists_allowed_values():
    with pytest.raises(ConfigError, match="adamw"):
        load_run_config(None, ["optim.name=sgd"])


def test_negative_no_repeat_ngram_is_refused():
    assert load_run_config(None, ["decode.no_repeat_ngram=3"]).decode.no_repeat_ngram == 3
    with pytest.raises(ConfigError, match="decode.no_repeat_ngram"):
        load_run_config(None, ["decode.no_repeat_ngram=-1"])


def test_override_without_equals_sign():
    with pytest.raises(ConfigError, match="key=value"):
        apply_overrides({}, ["lr"])


def test_yaml_must_be_a_mapping(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_run_config(path)


def test_every_field_has_help():
    rows = describe(RunConfig)
    assert rows and all(text for _, _, text in rows), [k for k, _, t in rows if not t]


def test_threads_auto_shares_the_cores_among_torchrun_processes(monkeypatch):
    import os

    from rlcap.devices import cpu_threads

    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    idle = lambda: 0  # noqa: E731 (no other job on the machine)
    assert load_run_config(None, []).threads == "auto" and cpu_threads("auto", idle) == cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(2 * cores))  # more processes than cores: one thread each
    assert cpu_threads("auto", idle) == 1
    assert cpu_threads(3) == 3 and load_run_config(None, ["threads=3"]).threads == 3
    with pytest.raises(ConfigError, match="threads: expected a number or auto, got 'many'"):
        load_run_config(None, ["threads=many"])


def test_threads_auto_leaves_the_cores_other_jobs_keep_busy(monkeypatch):
    """threads=auto takes the cores other jobs do not keep busy as the run starts (at least 1), and the count of
    other runnable threads it reads sees a process that keeps two threads busy."""
    import os
    import subprocess
    import sys
    import time

    from rlcap.devices import cpu_threads, other_runnable_threads

    cores = len(os.sched_getaffinity(0))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert cpu_threads("auto", lambda: 1) == max(1, cores - 1)
    assert cpu_threads("auto", lambda: 4 * cores) == 1
    assert cpu_threads(2, lambda: 4 * cores) == 2  # a number is taken as it is
    spin = "import threading\ndef f():\n    while True: pass\nfor _ in range(2): threading.Thread(target=f).start()\nf()"
    busy = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.5)
        assert other_runnable_threads() >= 1
    finally:
        busy.kill()
        busy.wait()

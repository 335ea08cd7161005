"""The training methods, one module each: its run config class, its step and its loop, citing the paper's
equations. Importing this package registers them all in :data:`METHODS` (each module calls
:func:`~rlcap.methods.registry.register` when it is imported)."""

# imported in the order METHODS lists them (rlcap train --help-config, docs/CONFIG.md)
from rlcap.methods import xe  # isort: skip
from rlcap.methods import scst, sll_me, sll_sle, grpo  # isort: skip
from rlcap.methods import embedding, actor_critic  # isort: skip
from rlcap.methods import pg, mixer  # isort: skip
from rlcap.methods import wtf_rl, scst_discriminator  # isort: skip
from rlcap.methods import critic, hrl  # isort: skip
from rlcap.methods.registry import METHODS, Method, load_run_config, method, register

__all__ = ["METHODS", "Method", "load_run_config", "method", "register", "actor_critic", "critic", "embedding",
           "grpo", "hrl", "mixer", "pg", "scst", "scst_discriminator", "sll_me", "sll_sle", "wtf_rl", "xe"]

"""One side of ``bench_trl.py``: GRPO on a vision-language model folder, by rlcap or by TRL's GRPOTrainer, with
the same settings (``--settings``: a JSON :class:`Settings`), in a process of its own so that its parent reads
its peak resident memory (``os.wait4``).

    python benchmarks/grpo_sides.py rlcap --settings S.json --log steps.jsonl
    python benchmarks/grpo_sides.py trl --settings S.json --log steps.jsonl       # trl_lm: its vision side frozen

Each side writes one JSON line a step to ``--log``: the step's wall-clock seconds (from the start of one step
to the start of the next; the last step's runs into the end of training and is not timed), the CPU seconds the
process spent in it (every thread's), and its split into ``sampling`` (the captions'
tokens, without gradient), ``scoring`` (the passes that give log-probabilities: the policy's with gradient, the
reference's, TRL's of the old policy, with their inputs), ``reward`` (the reward function) and ``backward`` (the
rest: the loss, the backward pass, the optimizer step, loading the batch), and the mean reward of its samples;
then a last line with the peak GPU memory where CUDA is present. The phases are timed by wrapping the functions
named in :data:`RLCAP_PHASES` and :data:`TRL_PHASES`; a side that never called one of them fails (a renamed
function would otherwise time nothing).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
PHASES = ("sampling", "scoring", "reward", "backward")
SIDES = ("trl", "trl_lm", "rlcap")


@dataclasses.dataclass(frozen=True)
class Settings:
    """What both sides run with; each field's TRL and rlcap names are in :func:`trl_config` and
    :func:`rlcap_overrides`."""

    model: str            # the model folder (build_vlm's)
    dataset: str          # Karpathy-format caption file of the shapes pictures
    store: str            # rlcap's feature store of the folder's image tokens (rlcap features --encoder hf:DIR)
    out: str              # where each side writes its run
    steps: int = 50       # optimizer steps (sampled batches: iterations = 1)
    images: int = 4       # images a step
    g: int = 4            # samples an image
    max_len: int = 16     # most tokens a caption
    beta: float = 0.0     # KL weight
    iterations: int = 1   # updates a sampled batch
    lr: float = 1e-4
    seed: int = 0
    threads: int = 1      # torch threads (bench_trl.py --threads)
    # bench_scale_vlm_gpu.py's; the defaults are bench_trl.py's runs
    dtype: str = "float32"   # the weights as both load them; bfloat16: rlcap's model.dtype + precision=bf16, TRL's bf16
    lora: int = 0            # LoRA rank on both (0: rlcap's model.train=all, TRL's model as trl_model leaves it)
    online: bool = False     # rlcap computes the image tokens from the pictures (data.images), no store
    train_vision: str = "frozen"  # rlcap's model.train_vision (lora: TRL's adapters on the tower's layers too)
    checkpointing: bool = False  # activation checkpointing: rlcap's model.gradient_checkpointing, TRL's own


class Timers:
    """Seconds spent in each phase since :meth:`take`, by wrapping functions ``module.attr`` in place; a phase
    called inside another is taken out of the outer one (rlcap's scoring pass runs inside its sampling call)."""

    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.calls: dict[str, int] = {}
        self.rewards: list[float] = []
        self._stack: list[list[float]] = []  # per open call: [start, seconds of the calls inside it]
        self._cpu = time.process_time()  # the process's CPU seconds (all threads) at the last take

    def wrap(self, owner: Any, attr: str, phase: str) -> None:
        inner, name = getattr(owner, attr), f"{owner.__name__}.{attr}"  # owner: a module or a class
        self.calls[name] = 0

        @functools.wraps(inner)
        def timed(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            self._stack.append([time.perf_counter(), 0.0])
            try:
                return inner(*args, **kwargs)
            finally:
                start, nested = self._stack.pop()
                spent = time.perf_counter() - start
                self.seconds[phase] += spent - nested
                if self._stack:
                    self._stack[-1][1] += spent

        setattr(owner, attr, timed)

    def take(self, step_s: float | None) -> dict[str, float | None]:
        """This step's record (the backward phase: what the others leave of ``step_s``; None: not timed, the
        last step, whose time runs into the end of training), and a fresh start."""
        out: dict[str, float | None] = {f"{k}_s": v for k, v in self.seconds.items() if k != "backward"}
        out["step_s"] = step_s
        out["backward_s"] = None if step_s is None else step_s - sum(v for k, v in self.seconds.items()
                                                                     if k != "backward")
        out["reward"] = sum(self.rewards) / len(self.rewards) if self.rewards else float("nan")
        cpu = time.process_time()
        out["cpu_s"] = None if step_s is None else cpu - self._cpu  # robust to other jobs on the cores
        self.seconds, self.rewards, self._cpu = dict.fromkeys(PHASES, 0.0), [], cpu
        return out

    def check_called(self) -> None:
        missed = [name for name, n in self.calls.items() if n == 0]
        if missed:
            raise RuntimeError(f"grpo_sides: the timed functions {missed} were never called; expected each once a step")


def training_refs(dataset: str) -> dict[str, list[str]]:
    """Training image id -> its reference captions (CIDEr-D's document frequencies, as an rlcap run takes them)."""
    from rlcap.data.readers import read_dataset

    return {r.id: r.captions for r in read_dataset(dataset) if r.split == "train"}


@contextlib.contextmanager
def cider_d(dataset: str) -> Iterator[Callable[[list[str], list[str]], torch.Tensor]]:
    """rlcap's CIDEr-D reward as a run of the shapes recipes builds it (``eos_counts: false``): (captions, image
    ids) -> (len(captions),)."""
    from rlcap.rewards import RewardBatch, build_reward
    from rlcap.rewards.reward_config import RewardConfig

    refs = training_refs(dataset)
    with build_reward(RewardConfig(weights={"cider_d": 1.0}, eos_counts=False), refs) as reward:
        yield lambda captions, ids: reward(captions, RewardBatch(list(ids), [refs[i] for i in ids]))


# rlcap: (module, attribute, phase). The scoring pass runs inside rollout (sampled without autograd, then scored);
# the reference's pass runs when beta > 0, the policy's own again for each update after the first.
RLCAP_PHASES = (("rlcap.methods.grpo", "rollout", "sampling"), ("rlcap.decoding.sampling", "score_rows", "scoring"),
                ("rlcap.methods.grpo", "score", "reward"))
RLCAP_REFERENCE = ("rlcap.methods.grpo", "reference_logprobs", "scoring")
RLCAP_UPDATES = ("rlcap.methods.grpo", "teacher_forced_logprobs", "scoring")


def rlcap_overrides(s: Settings) -> list[str]:
    """The GRPO recipe (configs/shapes_grpo.yaml) on the folder, from its own weights, with the settings."""
    images = ["data.features=", f"data.images={Path(s.dataset).parent}"] if s.online else [f"data.features={s.store}"]
    train = ["model.train=lora", f"model.lora_rank={s.lora}", f"model.lora_alpha={2 * s.lora}"] if s.lora else \
        ["model.train=all"]
    bf16 = ["model.dtype=bfloat16", "precision=bf16"] if s.dtype == "bfloat16" else []
    tower = [f"model.train_vision={s.train_vision}"] if s.train_vision != "frozen" else []  # (a key not every rlcap has)
    bf16 += ["model.gradient_checkpointing=true"] if s.checkpointing else []
    return [f"data.dataset={s.dataset}", *images, "model.arch=hf", f"model.path={s.model}", *train, *bf16, *tower,
            "init_from=null", f"out_dir={s.out}/rlcap", "overwrite=true", f"seed={s.seed}",
            f"rl.batch_size={s.images}", f"rl.n_samples={s.g}", f"decode.max_len={s.max_len}",
            f"rl.kl_coef={s.beta}", f"grpo.iterations={s.iterations}", f"max_steps={s.steps}", "rl.epochs=1000",
            f"optim.lr={s.lr}", "optim.name=adamw", "optim.weight_decay=0", "optim.grad_clip=1.0",
            "optim.lr_decay_every=0", "log_every=1", "tensorboard=false", f"threads={s.threads}", "save_every=0"]


def run_rlcap(s: Settings, log: Path) -> None:
    from rlcap.cli import main as rlcap_main
    from rlcap.methods import grpo

    timers = Timers()
    phases = (*RLCAP_PHASES, *[RLCAP_REFERENCE] * (s.beta > 0), *[RLCAP_UPDATES] * (s.iterations > 1))
    for module, attr, phase in phases:
        timers.wrap(importlib.import_module(module), attr, phase)
    score = grpo.score

    def scored(*args: Any, **kwargs: Any) -> torch.Tensor:
        rewards = score(*args, **kwargs)
        timers.rewards.extend(rewards.tolist())
        return rewards

    grpo.score = scored
    step, starts = grpo.grpo_step, []
    with open(log, "w", buffering=1) as out:
        def timed_step(*args: Any, **kwargs: Any) -> Any:
            now = time.perf_counter()
            if starts:
                out.write(json.dumps(timers.take(now - starts[-1])) + "\n")
            starts.append(now)
            return step(*args, **kwargs)

        grpo.grpo_step = timed_step
        if rlcap_main(["train", str(REPO / "configs" / "shapes_grpo.yaml"), *rlcap_overrides(s)]) != 0:
            raise RuntimeError("grpo_sides: rlcap train failed")
        out.write(json.dumps(timers.take(None)) + "\n")  # the last step: its reward (its time runs into the end)
        out.write(json.dumps(gpu_peak()) + "\n")
    timers.check_called()


# TRL: (GRPOTrainer method, phase). _generate: the prompts through the processor (the pictures' first
# preprocessing), generate() and the decoding; _get_per_token_logps_and_entropies: every log-probability pass (the
# policy's with gradient, the reference's, the old policy's); what _generate_and_score_completions spends around
# the calls inside it (the pictures' second preprocessing, padding, advantages) counts as scoring.
TRL_PHASES = (("_generate_and_score_completions", "scoring"), ("_generate", "sampling"),
              ("_get_per_token_logps_and_entropies", "scoring"), ("_calculate_rewards", "reward"))


def trl_config(s: Settings, cuda: bool) -> Any:
    """GRPOConfig for the settings: one sampled batch of images x G completions an optimizer step, GRPO's settings
    as rlcap's recipe has them, in float32 without gradient checkpointing (rlcap's arithmetic; TRL's own
    defaults are bf16 and checkpointing), the KL term as rlcap's default computes it (k3, not times the ratio:
    ``use_bias_correction_kl`` false, TRL's default true; rlcap's ``grpo.kl_ratio`` false), nothing logged,
    saved or evaluated."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=f"{s.out}/trl", per_device_train_batch_size=s.images * s.g, gradient_accumulation_steps=1,
        num_generations=s.g, max_completion_length=s.max_len, beta=s.beta, num_iterations=s.iterations,
        max_steps=s.steps * s.iterations, loss_type="dapo", scale_rewards="group", importance_sampling_level="token",
        epsilon=0.2, mask_truncated_completions=False, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=s.lr, lr_scheduler_type="constant", warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0,
        optim="adamw_torch", seed=s.seed, data_seed=s.seed, bf16=s.dtype == "bfloat16",
        gradient_checkpointing=s.checkpointing,
        use_bias_correction_kl=False, use_cpu=not cuda, report_to="none", logging_strategy="no",
        save_strategy="no", eval_strategy="no", disable_tqdm=True, remove_unused_columns=False,
        dataloader_num_workers=0, shuffle_dataset=True)


def trl_dataset(s: Settings) -> Any:
    """The training pictures as TRL takes them: a conversational prompt (rlcap's default instruction, the
    picture put before it as rlcap's prompt puts it), the picture, and its id for the reward."""
    from datasets import Dataset
    from PIL import Image

    from rlcap.data.readers import read_dataset
    from rlcap.models.hf.prompt import INSTRUCTION

    records = [r for r in read_dataset(s.dataset) if r.split == "train"]
    root = Path(s.dataset).parent
    return Dataset.from_dict({"prompt": [[{"role": "user", "content": INSTRUCTION}] for _ in records],
                              "image": [Image.open(root / r.filename).convert("RGB") for r in records],
                              "image_id": [r.id for r in records]})


def trl_model(folder: str, tower: bool, dtype: str = "float32") -> Any:
    """The folder's model; ``tower`` False: its picture's side (vision tower, merger) frozen, so that TRL trains
    what rlcap's ``model.train: all`` trains (the language model:
    :func:`rlcap.models.hf.parts.language_parameters`); ``dtype``: the weights' as loaded."""
    from transformers import AutoModelForImageTextToText

    from rlcap.models.hf.parts import language_parameters

    model = AutoModelForImageTextToText.from_pretrained(folder, dtype=getattr(torch, dtype))
    if not tower:
        language = {id(p) for p in language_parameters(model)}
        for param in model.parameters():
            param.requires_grad_(id(param) in language)
    return model


def lora_config(model: Any, s: Settings) -> Any:
    """peft's LoraConfig for TRL on the linear maps rlcap's ``model.train=lora`` adapts (those of the language
    model's layer stack: q, k, v, o, gate, up and down projections), and with ``model.train_vision=lora`` those of
    the vision tower's (its largest stack of layers outside the language model); rank, alpha (2 x rank) and no
    dropout as on rlcap's side."""
    import peft
    from torch import nn

    from rlcap.models.hf.parts import language_modules, layer_stack

    stacks = [layer_stack(model.get_decoder())]
    if s.train_vision == "lora":
        language = {id(m) for part in language_modules(model) for m in part.modules()}
        towers = [m for m in model.modules() if isinstance(m, nn.ModuleList) and id(m) not in language]
        stacks.append(max(towers, key=lambda m: sum(p.numel() for p in m.parameters())))
    elif s.train_vision != "frozen":
        raise ValueError(f"grpo_sides: train_vision={s.train_vision!r}: TRL's side mirrors frozen or lora only")
    names = {id(m): n for n, m in model.named_modules()}
    targets = [names[id(m)] for stack in stacks for m in stack.modules() if isinstance(m, nn.Linear)]
    return peft.LoraConfig(r=s.lora, lora_alpha=2 * s.lora, lora_dropout=0.0, target_modules=targets)


def run_trl(s: Settings, log: Path, tower: bool = True) -> None:
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from rlcap.encoders.hf_vlm import load_processor

    timers, starts = Timers(), []
    for attr, phase in TRL_PHASES:
        timers.wrap(GRPOTrainer, attr, phase)
    with open(log, "w", buffering=1) as out, cider_d(s.dataset) as reward:  # a line a step, as it happens
        def cider_d_reward(completions: list[list[dict]], image_id: list[str], **_: Any) -> list[float]:
            """TRL's reward signature: one float per completion."""
            values = reward([c[0]["content"] for c in completions], image_id).tolist()
            timers.rewards.extend(values)
            return values

        class StepTimes(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                if state.global_step % s.iterations == 0:  # a new sampled batch
                    now = time.perf_counter()
                    if starts:
                        out.write(json.dumps(timers.take(now - starts[-1])) + "\n")
                    starts.append(now)

        model = trl_model(s.model, tower or s.lora > 0, s.dtype)  # (with LoRA, peft freezes what it does not adapt)
        trainer = GRPOTrainer(model=model, peft_config=lora_config(model, s) if s.lora else None,
                              reward_funcs=cider_d_reward, args=trl_config(s, torch.cuda.is_available()),
                              train_dataset=trl_dataset(s), processing_class=load_processor(Path(s.model)),
                              callbacks=[StepTimes()])
        trainer.train()
        out.write(json.dumps(timers.take(None)) + "\n")  # the last step: its reward (its time runs into the end)
        out.write(json.dumps(gpu_peak()) + "\n")
    timers.check_called()


def gpu_peak() -> dict[str, float]:
    return {"gpu_peak_gb": torch.cuda.max_memory_allocated() / 1024 ** 3 if torch.cuda.is_available() else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("side", choices=SIDES, help="rlcap; trl (GRPOTrainer on the whole model, as TRL sets it up); "
                                                   "trl_lm (its vision side frozen: what rlcap trains)")
    parser.add_argument("--settings", required=True, help="a JSON file of Settings")
    parser.add_argument("--log", required=True, help="where the step records go (JSON lines)")
    args = parser.parse_args(argv)
    s = Settings(**json.loads(Path(args.settings).read_text()))
    torch.set_num_threads(s.threads)
    if args.side == "rlcap":
        run_rlcap(s, Path(args.log))
    else:
        run_trl(s, Path(args.log), tower=args.side == "trl")
    return 0


if __name__ == "__main__":
    sys.exit(main())

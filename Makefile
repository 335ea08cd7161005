# Every target creates .venv on first use. torch is installed first, from the local CPU wheel,
# so that no dependency can pull a CUDA build.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.rlcap-installed
RLCAP := $(PY) -m rlcap.cli

.PHONY: demo test test-fast bench bench-metrics bench-features bench-feature-batching bench-vlm-features bench-xe-width bench-checkpoint-save bench-decode bench-scst bench-hf bench-shapes-hf bench-shapes-vlm bench-methods bench-demo bench-headroom bench-faults bench-pg bench-concepts bench-distinct bench-credit bench-credit-shapes bench-credit-concepts bench-video bench-scale bench-scale-vlm bench-scale-vlm-fsdp2 bench-scale-vlm-gpu bench-gpu bench-report bench-trl bench-grpo bench-trackers bench-rewards bench-rewards-wide bench-qa-reader clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m rlcap.cli demo --out runs/demo

test: $(STAMP)
	$(PY) -m pytest -q -n auto --dist loadgroup --no-loadscope-reorder --durations=25

# The unit tests (no training loop, no CLI run, no Java): under 2 minutes
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not java and not slow" --ignore=tests/train --ignore=tests/methods --ignore=tests/bench --ignore=tests/cli

bench-metrics: $(STAMP)
	$(PY) benchmarks/bench_metrics.py

# images/s of each encoder of `rlcap features` (EfficientNet-Lite0, transformers models at their published sizes)
bench-features: $(STAMP)
	$(PY) benchmarks/bench_features.py

# whether each encoder's float16 rows are the same for batch sizes 1, 2, 4 and 8 on the CPU
bench-feature-batching: $(STAMP)
	$(PY) benchmarks/bench_feature_batching.py

bench-vlm-features: $(STAMP)
	$(PY) benchmarks/bench_vlm_features.py

# an XE step at data.max_len 16, at the longest caption and at 60 (batches padded to their longest caption)
bench-xe-width: $(STAMP)
	$(PY) benchmarks/bench_xe_width.py

# seconds to save a checkpoint of a base-size GIT policy with and without its hf/ folder (the frozen tower linked)
bench-checkpoint-save: $(STAMP)
	$(PY) benchmarks/bench_checkpoint_save.py --family git --size base --repeats 5

bench-decode: $(STAMP)
	$(PY) benchmarks/bench_decode.py

bench-demo: $(STAMP)
	$(PY) benchmarks/bench_demo.py

# steps/s of the shapes SCST recipe with all four trackers (track.to) against none; needs make demo's data and XE run
bench-trackers: $(STAMP)
	$(PY) benchmarks/bench_trackers.py $(if $(REPEATS),--repeats $(REPEATS))

# PREVIOUS=DIR: a checkout of the previous release, measured alternately for the side-by-side columns
bench-scst: $(STAMP)
	$(PY) benchmarks/bench_scst.py $(if $(PREVIOUS),--previous $(PREVIOUS)) $(if $(REPEATS),--repeats $(REPEATS))

# rlcap's sampling (5 captions an image) on a transformers captioner (model.arch=hf; GIT at small and base size, random
# weights) against the same model's generate(), and one SCST step's split; the GPU section where CUDA is present;
# each instruction VLM family's sampling against its own generate() at the small size (the bench-hf-vlm section)
bench-hf: $(STAMP)
	$(PY) benchmarks/bench_hf.py

# a small GIT trained by rlcap on shapes: XE, SCST, WTF-RL against TF (about 1.5 h on 2 cores)
bench-shapes-hf: $(STAMP)
	$(PY) benchmarks/bench_shapes_hf.py

# a SmolVLM built offline at size mini, XE then SCST on shapes (configs/shapes-vlm_*.yaml)
bench-shapes-vlm: $(STAMP)
	$(PY) benchmarks/bench_shapes_vlm.py

# One PG-SPIDEr update (K = 3 rollouts) next to one SCST step; rollout vs greedy throughput; reward dedupe
bench-pg: $(STAMP)
	$(PY) benchmarks/bench_pg.py

# SIGKILL at random moments (many inside checkpoint saves) in XE and SCST runs: kills, exact resumes, checkpoints lost
bench-faults: $(STAMP)
	$(PY) benchmarks/bench_faults.py

bench-methods: $(STAMP)
	$(PY) benchmarks/bench_methods.py

# COCO concepts (docs/CONCEPTS.md): builds data/coco-concepts if missing, its statistics beside COCO's and shapes',
# then the method table (XE, SCST, SLL-ME, SLL-SLE) on the first CONCEPTS_TRAIN training scenes (0: all 33,004)
CONCEPTS_TRAIN ?= 10000
bench-concepts: $(STAMP)
	$(PY) benchmarks/concepts_stats.py
	$(PY) benchmarks/bench_methods.py --benchmark coco-concepts --max-train-images $(CONCEPTS_TRAIN)

# Distinctive captioning (docs/DISTINCT.md): [Chaffin24]'s Table 1 on shapes, then on COCO concepts with the budget above
bench-distinct: $(STAMP)
	$(PY) benchmarks/bench_distinct.py --benchmark shapes
	$(PY) benchmarks/bench_distinct.py --benchmark coco-concepts --max-train-images $(CONCEPTS_TRAIN)

# Per-word credit (docs/RL.md): actor-critic and lookahead ([Shi18]), MIXER and PG with rollouts ([Liu17]) beside XE and SCST,
# on shapes, then on COCO concepts with the training-image budget above. CREDIT_RL is every RL stage's budget on both:
# 2 epochs instead of the recipes' (shapes 12, COCO concepts 3), MIXER's M = 4 then 0 (the recipes' schedules
# compressed): shapes about 1.5 h, COCO concepts about 1.75 h here (runs/credit_shapes, runs/credit_concepts; at
# shapes' 12 epochs its PG stages alone take over 3 h); CREDIT_RL= runs the recipes' epochs, sharing XE and SCST with bench-methods /
# bench-concepts (runs/bench_shapes, runs/bench_concepts)
CREDIT_RL ?= rl.epochs=2 mixer.start=4 mixer.delta=4 mixer.epochs_per_stage=1
# (bench-credit-shapes and bench-credit-concepts: one table each)
bench-credit: bench-credit-shapes bench-credit-concepts

bench-credit-shapes: $(STAMP)
	$(PY) benchmarks/bench_credit.py --benchmark shapes $(if $(CREDIT_RL),--rl $(CREDIT_RL))

bench-credit-concepts: $(STAMP)
	$(PY) benchmarks/bench_credit.py --benchmark coco-concepts --max-train-images $(CONCEPTS_TRAIN) $(if $(CREDIT_RL),--rl $(CREDIT_RL))

# Video (docs/VIDEO.md): moving-shapes clips, frame features and [Wang18]'s Table 2 (XE, RL and HRL baselines) with
# [Chen20]'s SLL-ME and SLL-SLE rows and the diversity columns of 5 samples and 5 beams;
# GOALS=16 trains one HRL goal size instead of [Wang18]'s three (a shorter run)
GOALS ?= 16,32,64
bench-video: $(STAMP)
	$(PY) benchmarks/video_agreement.py
	$(PY) benchmarks/bench_video.py --goals $(GOALS)

# Where SCST's gain goes (docs/BENCHMARKS.md): needs runs/bench_shapes from bench-methods; trains the runs
# that are missing (about 35 min), then evaluates every run.
H = runs/headroom
F224 = data.features=data/shapes/feats_224.h5
# The earlier SCST recipe's settings (greedy validation, 8 epochs, no decay), as the 224-px run was measured
EARLIER = rl.epochs=8 optim.lr_decay_every=0 decode.beam_size=1
bench-headroom: $(STAMP)
	$(RLCAP) features data/shapes --dataset data/shapes/dataset_shapes.json --out data/shapes/feats_224.h5 --image-size 224
	test -d $(H)/xe224/best || $(RLCAP) train configs/shapes_xe.yaml out_dir=$(H)/xe224 $(F224)
	test -d $(H)/scst224/best || $(RLCAP) train configs/shapes_scst.yaml init_from=$(H)/xe224/best out_dir=$(H)/scst224 $(F224) \
		scst.baseline=greedy $(EARLIER)
	test -d $(H)/greedy128/best || $(RLCAP) train configs/shapes_scst.yaml init_from=runs/bench_shapes/xe/best \
		out_dir=$(H)/greedy128 scst.baseline=greedy
	$(PY) benchmarks/scst_headroom.py --run xe_128px=runs/bench_shapes/xe/best --run scst_128px=runs/bench_shapes/scst/best \
		--run greedy_128px=$(H)/greedy128/best --run xe_224px=$(H)/xe224/best --run scst_224px=$(H)/scst224/best --write

# Vision-language policies at the sizes users fine-tune: image tokens online against the store (the shapes VLM's XE
# and SCST steps/s, about 10 minutes; docs/BENCHMARKS.md, "Image tokens online against the store")
bench-scale-vlm: $(STAMP)
	$(PY) benchmarks/bench_online_tokens.py

# The GPU section of bench-scale-vlm: GRPO at Qwen2.5-VL-3B's published shape (random bf16 weights, LoRA r 16, image
# tokens online, 8 pictures x 8 samples, 64 new tokens), rlcap beside TRL's GRPOTrainer, the tower frozen, then with
# adapters on it (needs model.train_vision); on a GPU only (benchmarks/device_checks.sh runs it where one is lent)
bench-scale-vlm-gpu: $(STAMP)
	$(PY) -c "import trl, peft" 2>/dev/null || $(PY) -m pip install -q -e ".[dev,trl,lora]"
	$(PY) benchmarks/bench_scale_vlm_gpu.py

# A COCO-size synthetic feature store (about 18 GB, deleted afterwards) read batch by batch by XE and SCST: peak
# memory and step time against an in-memory store (docs/BENCHMARKS.md, "Scale")
bench-scale: $(STAMP)
	$(PY) benchmarks/bench_scale.py

# per-rank peak memory of FSDP2 against DDP at 2 CPU processes, XE and GRPO steps of a 465M-parameter slice of
# Qwen2.5-VL-3B's published widths (about 16 GB of memory at its peak: run it alone); the memory table of 1B-7B
# policies in docs/SCALING.md is `$(PY) benchmarks/fsdp_memory.py`
bench-scale-vlm-fsdp2: $(STAMP)
	$(PY) benchmarks/fsdp_peak_memory.py

# SCST samples/s on one GPU (FC, UpDown, Transformer at self-critical.pytorch's sizes; 50, 250 and 1,000 images x 5
# samples; fp32 and bf16), about 2 minutes on an H100; DATA=DIR: a self-critical.pytorch data/ folder (else generated
# features and COCO val2014 captions). Without CUDA it says it was not run and writes nothing
bench-gpu: $(STAMP)
	$(PY) benchmarks/bench_gpu.py $(if $(DATA),--data $(DATA))

# GRPO by rlcap beside TRL's GRPOTrainer on one Qwen2-VL folder (random weights), shapes pictures and rlcap's CIDEr-D
# at beta 0 and 0.04: samples/s, the split, peak memory, mean reward; installs the trl extra if it is missing
bench-trl: $(STAMP)
	$(PY) -c "import trl" 2>/dev/null || $(PY) -m pip install -q -e ".[dev,trl]"
	$(PY) benchmarks/bench_trl.py

# GRPO (TRL's defaults and one-change variants) beside SCST on shapes, UpDown and a small GIT, equal sampled captions
bench-grpo: $(STAMP)
	$(PY) benchmarks/bench_grpo.py

# SCST with CIDEr-D, with [Xing26]'s QA utility and with both, and GRPO with the QA utility, on shapes (two readers
# trained first; the held-out one judges). QUESTIONS=every: questions about every shape, not the two main ones;
# IMAGE_SIZE=224: the rows from xe_box with the pictures encoded at 224 px (a 7x7 grid), in a section of their own
# (with QUESTIONS=every: xe_box, scst_box, grpo_box, and SCST and GRPO with the utility on the questions about every
# shape); QUESTIONS=joined IMAGE_SIZE=224: the main questions with readers trained on joined references too
# (rlcap data reader --joined 0.5), SCST and GRPO with that utility beside the single-reference rows
# EPOCHS=N: every row at N RL epochs (4 by default), in a folder (runs/bench_rewards..._eN) and section of their own
QUESTIONS ?= main
bench-rewards: $(STAMP)
	$(PY) benchmarks/bench_rewards.py --questions $(QUESTIONS) $(if $(IMAGE_SIZE),--image-size $(IMAGE_SIZE)) \
		$(if $(EPOCHS),--epochs $(EPOCHS))

# make bench-rewards' trained rows judged again on TEST_IMAGES (default 5000) test pictures: trains nothing
bench-rewards-wide: $(STAMP)
	$(PY) benchmarks/bench_rewards_wide.py --questions $(QUESTIONS) $(if $(IMAGE_SIZE),--image-size $(IMAGE_SIZE)) \
		$(if $(EPOCHS),--epochs $(EPOCHS)) $(if $(TEST_IMAGES),--test-images $(TEST_IMAGES)) $(if $(ROWS),--rows $(ROWS))

# one qa_utility call of the shapes QA rows with the reader in fp32 and bf16 (reward.qa_precision): after bench-rewards
bench-qa-reader: $(STAMP)
	$(PY) benchmarks/bench_qa_reader.py

bench-report: $(STAMP)
	$(PY) benchmarks/bench_report.py

bench: bench-metrics bench-decode bench-scst bench-demo bench-methods

clean:
	rm -rf runs

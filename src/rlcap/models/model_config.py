"""Model configuration: one typed dataclass for every captioner and the value network."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from rlcap.errors import ConfigError

TRAINS = ("all", "decoder", "lora")  # model.train: what of a transformers captioner trains
VISION_TRAINS = ("frozen", "all", "projector", "lora")  # model.train_vision: what of its image side trains
DTYPES = ("float32", "bfloat16")  # model.dtype: a transformers model's weights as loaded
# (the architectures, and the keys each reads, are the architectures' own: rlcap.models.architectures)
ARCH_HELP = "captioner architecture: an architecture of rlcap.models.architectures.ARCHITECTURES"


@dataclass
class ModelConfig:
    """Sizes and regularisation of a captioner. Defaults are the field's usual COCO sizes. Which keys a captioner
    reads is its architecture's to say (:meth:`rlcap.models.architecture.Architecture.reads`)."""

    arch: str = field(default="updown", metadata={"help": ARCH_HELP})
    embed_dim: int = field(default=512, metadata={"help": "word and image embedding size of the LSTM models"})
    hidden_dim: int = field(default=512, metadata={"help": "LSTM hidden size; the transformer's d_model"})
    att_hidden_dim: int = field(default=512, metadata={"help": "size of the additive-attention space (UpDown)"})
    dropout: float = field(default=0.5, metadata={"help": "dropout on embeddings and before the output layer"})
    grid_boxes: bool = field(default=False, metadata={
        "help": "updown, transformer: embed each grid cell's box (x1, y1, x2, y2, area, fractions of the picture) and "
                "add it to the cell's vector, as self-critical.pytorch's use_box gives detector regions their boxes; "
                "without it the attention cannot tell where a cell lies (docs/MODELS.md, 'Where a region lies')"})
    num_layers: int = field(default=3, metadata={"help": "transformer decoder layers"})
    num_enc_layers: int = field(default=0, metadata={"help": "transformer encoder layers over the regions (0: none)"})
    num_heads: int = field(default=8, metadata={"help": "transformer attention heads; must divide hidden_dim"})
    ff_dim: int = field(default=2048, metadata={"help": "transformer feed-forward inner size"})
    max_len: int = field(default=20, metadata={"help": "longest caption the transformer can decode (words incl. EOS)"})
    manager_dim: int = field(default=256, metadata={"help": "hrl: the manager LSTM's hidden size ([Wang18 sec. 4.2]: 256)"})
    goal_dim: int = field(default=32, metadata={"help": "hrl: size of the manager's latent goal ([Wang18]: 16, 32 or 64)"})
    critic_from: str = field(default="", metadata={"help": "hrl: checkpoint of the trained internal critic "
                                                           "(algorithm=critic), loaded and frozen in a new model"})
    path: str = field(default="", metadata={"help": "hf: a transformers captioner's folder (VisionEncoderDecoder, BLIP, "
                                                    "GIT, or an instruction vision-language model: Qwen2-VL, SmolVLM, "
                                                    "LLaVA, PaliGemma, Florence-2; as save_pretrained writes it): its "
                                                    "text side is the policy, its image side read from `rlcap features "
                                                    "--encoder hf:DIR`'s store"})
    train: str = field(default="all", metadata={
        "help": "hf: what trains: all (every weight but the frozen vision tower), decoder (the text decoder's layers; "
                "its embeddings, output layer and image projection as loaded) or lora (LoRA adapters on those "
                "layers' linear maps, through peft: pip install rlcap[lora])"})
    train_vision: str = field(default="frozen", metadata={
        "help": "hf, a vision-language model: what of its image side trains: frozen (nothing: its tokens may come "
                "from a store), all (vision tower and projector), projector (the image-side weights that run after "
                "the tower's last layer: merger, connector or projector, and a final norm), or lora (LoRA adapters "
                "on the tower's layers, with model.train=lora); anything but frozen reads pictures (data.images, "
                "no data.features) and runs the image side with autograd at every step (docs/MODELS.md)"})
    lora_rank: int = field(default=8, metadata={"help": "hf, train=lora: the adapters' rank r"})
    lora_alpha: float = field(default=16.0, metadata={"help": "hf, train=lora: the adapters' alpha (scale alpha/r)"})
    prompt: str = field(default="", metadata={
        "help": "hf, an instruction vision-language model: the instruction before each caption, put through its "
                "processor's chat template (empty: 'Describe this image briefly in one sentence.'; 'caption en' "
                "for a model without a chat template, PaliGemma's task prefix; Florence-2's <CAPTION> task token; "
                "docs/MODELS.md)"})
    dtype: str = field(default="float32", metadata={
        "help": "hf, a vision-language model: the weights' dtype as loaded, float32 or bfloat16 (LoRA adapters "
                "and their optimizer state stay float32)"})
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "hf, a vision-language model: recompute the language model's layers in the backward pass of "
                "teacher-forced and scoring passes (less memory, one more forward pass)"})

    def __post_init__(self) -> None:
        if not isinstance(self.arch, str) or not self.arch:
            raise ConfigError(f"model.arch: expected the name of an architecture, got {self.arch!r}")
        positive = ("embed_dim", "hidden_dim", "att_hidden_dim", "num_layers", "num_heads", "ff_dim", "max_len",
                    "manager_dim", "goal_dim")
        for name, value in asdict(self).items():
            if name in positive and isinstance(value, int) and value < 1:
                raise ConfigError(f"model.{name}: expected a positive integer, got {value}")
        if self.train not in TRAINS:
            raise ConfigError(f"model.train: {self.train!r} is not one of {', '.join(TRAINS)}")
        if self.train_vision not in VISION_TRAINS:
            raise ConfigError(f"model.train_vision: {self.train_vision!r} is not one of {', '.join(VISION_TRAINS)}")
        if (self.train == "lora" and self.train_vision in ("all", "projector")) or \
                (self.train_vision == "lora" and self.train != "lora"):
            raise ConfigError(f"model.train_vision={self.train_vision} with model.train={self.train}: LoRA adapters "
                              "on the tower go with model.train=lora, and a LoRA policy's image side trains by "
                              "adapters or not at all (its KL reference is itself with its adapters off)")
        if self.dtype not in DTYPES:
            raise ConfigError(f"model.dtype: {self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.lora_rank < 1 or not self.lora_alpha > 0:
            raise ConfigError(f"model.lora_rank and model.lora_alpha: expected positive, got {self.lora_rank} and "
                              f"{self.lora_alpha}")
        if self.num_enc_layers < 0:
            raise ConfigError(f"model.num_enc_layers: expected >= 0, got {self.num_enc_layers}")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout: expected a probability in [0, 1), got {self.dropout}")
        if self.arch == "hf" and not self.path:
            raise ConfigError("model.arch=hf needs model.path: the folder of a transformers captioner (docs/MODELS.md)")
        if self.arch == "hrl" and self.hidden_dim % 2:
            raise ConfigError(f"model.hidden_dim: hrl's Bi-LSTM splits it in two directions; {self.hidden_dim} is odd")
        if self.arch == "transformer" and self.hidden_dim % self.num_heads:
            raise ConfigError(f"model.num_heads: {self.num_heads} must divide hidden_dim {self.hidden_dim}")

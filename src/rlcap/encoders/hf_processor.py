"""A transformers processor loaded from a local folder, also where ``AutoProcessor`` needs torchvision (which rlcap
cannot install beside its torch): the processor then made of its parts that load without it."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from rlcap.errors import RlcapError


def load_processor(folder: Path) -> Any:
    """The processor saved in ``folder`` (``AutoProcessor``), or a one-line refusal naming the files a processor
    is read from (a folder without them: a partial download). One that transformers builds only with torchvision
    (Qwen2-VL's video processor needs it; Pixtral's processor module imports its torchvision image processor's) is
    made of its image processor (the PIL one), tokenizer, chat template and own settings (:func:`own_settings`):
    rlcap gives it pictures, never videos."""
    import transformers

    try:
        return transformers.AutoProcessor.from_pretrained(folder, local_files_only=True)
    except ImportError:
        pass
    except (OSError, ValueError, KeyError) as exc:  # (transformers' advice is about the Hub: not what is missing)
        said = str(exc).split(". ")[0].splitlines()[0] if str(exc) else ""  # (its first sentence)
        raise RlcapError(f"cannot load the processor of {folder} ({exc.__class__.__name__}: {said}): the folder "
                         "lacks its processor's files (processor_config.json or preprocessor_config.json, the "
                         "tokenizer's, the chat template); copy them from where the model came from") from None
    return _processor_of_parts(folder, transformers)


def _processor_of_parts(folder: Path, transformers: Any) -> Any:
    """:func:`load_processor` where ``AutoProcessor`` needs torchvision: the folder's processor class made of the
    parts that load without it."""
    import json

    try:
        saved = json.loads((folder / "processor_config.json").read_text(encoding="utf-8"))
        processor_class = class_without_torchvision(transformers, saved["processor_class"])
    except (OSError, ValueError, KeyError, AttributeError, ImportError) as exc:
        raise RlcapError(f"{folder}: its processor cannot be loaded ({exc.__class__.__name__}: {exc})") from None

    class WithoutVideo(processor_class):  # type: ignore[misc, valid-type]
        def check_argument_for_proper_class(self, argument_name: str, argument: Any) -> Any:
            return None if argument is None else super().check_argument_for_proper_class(argument_name, argument)

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    pixels = transformers.AutoImageProcessor.from_pretrained(folder, local_files_only=True)
    template = folder / "chat_template.jinja"
    chat = template.read_text(encoding="utf-8") if template.is_file() else tokenizer.chat_template
    parts = {"image_processor": pixels, "tokenizer": tokenizer, "chat_template": chat}
    if "video_processor" in inspect.signature(processor_class.__init__).parameters:
        parts["video_processor"] = None
    return WithoutVideo(**parts, **own_settings(processor_class, saved))


PARTS = ("image_processor", "tokenizer", "video_processor", "chat_template")  # what load_processor reads apart


def own_settings(processor_class: Any, saved: dict[str, Any]) -> dict[str, Any]:
    """The processor's own settings in its saved processor_config.json: the keys its class's ``__init__`` takes
    besides its parts (InternVL's ``image_seq_length``, LLaVA-OneVision's ``num_image_tokens`` and
    ``vision_feature_select_strategy``, Pixtral's ``patch_size`` and ``spatial_merge_size``), which
    ``from_pretrained`` passes and a processor made of its parts would otherwise take at their defaults (another
    count of image tokens per tile than the model's)."""
    params = inspect.signature(processor_class.__init__).parameters
    return {key: value for key, value in saved.items() if key in params and key not in PARTS and key != "self"}


def class_without_torchvision(transformers: Any, name: str) -> Any:
    """transformers' processor class ``name``. Where transformers offers only a placeholder for it without
    torchvision because its module imports the family's torchvision image processor module
    (``image_processing_<family>``) for a helper the family's PIL module (``image_processing_pil_<family>``)
    defines alike (PixtralProcessor's ``get_resize_output_image_size``, used only to count tokens for serving
    engines), the module is imported with the PIL module standing in; an ImportError if it still needs
    torchvision."""
    import importlib
    import importlib.util
    import sys

    from transformers.utils.import_utils import DummyObject

    found = getattr(transformers, name)
    if not isinstance(found, DummyObject):
        return found
    module = f"transformers.{transformers._class_to_module[name]}"
    package = module.rsplit(".", 1)[0]
    family = package.rsplit(".", 1)[1]
    torch_side, pil_side = f"{package}.image_processing_{family}", f"{package}.image_processing_pil_{family}"
    if torch_side in sys.modules or importlib.util.find_spec(pil_side) is None:
        raise ImportError(f"transformers offers {name} only with torchvision installed")
    sys.modules[torch_side] = importlib.import_module(pil_side)
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise ImportError(f"transformers offers {name} only with torchvision installed ({exc})") from None
    finally:
        del sys.modules[torch_side]

"""COCO's 80 object categories as CHAIR reads them ([Rohrbach18]): rlcap's own synonym table, the plural rule, the
special phrases, and the reader of COCO's instance annotations (``instances_val2014.json``).

The table (:data:`COCO_SYNONYMS`) maps each category name, as COCO's ``categories`` write it, to the words a
caption names it by, singular; written for rlcap from common caption wording, after the method of
[Rohrbach18] (which ships its own list; rlcap's is shorter and not a copy, so its CHAIR values can differ from the
authors' by the words one list has and the other lacks). Every entry's plural is added by :func:`plural` (an
English rule with a short list of exceptions), so "two dogs" is two mentions of dog without a lemmatiser.

Special phrases (:data:`SPECIAL_PHRASES`), [Rohrbach18]'s cases: "baby"/"adult" before an animal names the
animal, not a person; "passenger train" is a train; "toilet seat" is a toilet, not a chair; "bow tie" is a tie.
Known limits, as in the paper's method: a word with two senses is always the object ("orange" the colour is an
orange; "mouse" the animal is the computer mouse).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from rlcap.errors import DataError
from rlcap.metrics.hallucination import ObjectTruth, ObjectVocabulary

COCO_SYNONYMS: dict[str, tuple[str, ...]] = {
    "person": ("person", "man", "woman", "boy", "girl", "child", "kid", "baby", "adult", "guy", "lady", "player",
               "skier", "surfer", "skateboarder", "snowboarder", "rider", "biker", "cyclist", "pedestrian",
               "passenger", "worker", "chef", "cook", "officer", "policeman", "soldier", "tourist", "teenager",
               "toddler", "mother", "father", "gentleman", "batter", "catcher", "pitcher", "umpire", "cowboy"),
    "bicycle": ("bicycle", "bike", "cycle"),
    "car": ("car", "taxi", "sedan", "suv", "jeep", "minivan"),
    "motorcycle": ("motorcycle", "motorbike", "motor bike", "scooter", "moped", "dirt bike"),
    "airplane": ("airplane", "plane", "aeroplane", "jet", "airliner", "aircraft", "jetliner", "air plane"),
    "bus": ("bus", "trolley"),
    "train": ("train", "locomotive", "tram", "subway"),
    "truck": ("truck", "pickup", "lorry", "van"),
    "boat": ("boat", "ship", "sailboat", "canoe", "kayak", "yacht", "ferry", "raft"),
    "traffic light": ("traffic light", "stop light", "traffic signal", "stoplight"),
    "fire hydrant": ("fire hydrant", "hydrant"),
    "stop sign": ("stop sign",),
    "parking meter": ("parking meter", "meter"),
    "bench": ("bench",),
    "bird": ("bird", "pigeon", "seagull", "gull", "duck", "goose", "parrot", "swan", "crow", "owl", "hen",
             "chicken"),
    "cat": ("cat", "kitten", "kitty"),
    "dog": ("dog", "puppy", "pup", "doggy"),
    "horse": ("horse", "pony", "foal"),
    "sheep": ("sheep", "lamb", "ram"),
    "cow": ("cow", "cattle", "bull", "calf", "ox"),
    "elephant": ("elephant",),
    "bear": ("bear",),
    "zebra": ("zebra",),
    "giraffe": ("giraffe",),
    "backpack": ("backpack", "rucksack"),
    "umbrella": ("umbrella", "parasol"),
    "handbag": ("handbag", "purse", "bag"),
    "tie": ("tie", "necktie"),
    "suitcase": ("suitcase", "luggage", "suit case"),
    "frisbee": ("frisbee",),
    "skis": ("ski",),
    "snowboard": ("snowboard",),
    "sports ball": ("ball", "baseball", "football", "soccer ball", "tennis ball", "basketball", "sports ball"),
    "kite": ("kite",),
    "baseball bat": ("baseball bat", "bat"),
    "baseball glove": ("baseball glove", "glove", "mitt"),
    "skateboard": ("skateboard",),
    "surfboard": ("surfboard", "surf board"),
    "tennis racket": ("tennis racket", "racket", "racquet"),
    "bottle": ("bottle",),
    "wine glass": ("wine glass",),
    "cup": ("cup", "mug"),
    "fork": ("fork",),
    "knife": ("knife",),
    "spoon": ("spoon",),
    "bowl": ("bowl",),
    "banana": ("banana",),
    "apple": ("apple",),
    "sandwich": ("sandwich", "burger", "hamburger", "sub"),
    "orange": ("orange",),
    "broccoli": ("broccoli",),
    "carrot": ("carrot",),
    "hot dog": ("hot dog", "hotdog"),
    "pizza": ("pizza",),
    "donut": ("donut", "doughnut"),
    "cake": ("cake", "cupcake", "cheesecake"),
    "chair": ("chair", "seat", "stool"),
    "couch": ("couch", "sofa", "loveseat"),
    "potted plant": ("potted plant", "houseplant", "plant"),
    "bed": ("bed",),
    "dining table": ("dining table", "table", "desk"),
    "toilet": ("toilet", "urinal"),
    "tv": ("tv", "television", "monitor", "tv screen"),
    "laptop": ("laptop", "computer", "notebook"),
    "mouse": ("mouse",),
    "remote": ("remote", "remote control", "controller"),
    "keyboard": ("keyboard",),
    "cell phone": ("cell phone", "phone", "cellphone", "smartphone", "mobile phone"),
    "microwave": ("microwave",),
    "oven": ("oven", "stove"),
    "toaster": ("toaster",),
    "sink": ("sink",),
    "refrigerator": ("refrigerator", "fridge", "freezer"),
    "book": ("book",),
    "clock": ("clock",),
    "vase": ("vase",),
    "scissors": ("scissors",),
    "teddy bear": ("teddy bear", "teddy", "stuffed animal"),
    "hair drier": ("hair drier", "hair dryer", "hairdryer", "blow dryer"),
    "toothbrush": ("toothbrush",),
}
_ANIMALS = ("bird", "cat", "dog", "horse", "sheep", "cow", "elephant", "bear", "zebra", "giraffe")
SPECIAL_PHRASES: dict[str, str] = {
    **{f"{age} {animal}": animal for age in ("baby", "adult") for animal in _ANIMALS},
    **{f"passenger {vehicle}": cat for vehicle, cat in (("train", "train"), ("jet", "airplane"), ("plane", "airplane"))},
    "toilet seat": "toilet", "bow tie": "tie",
}
# plurals the rule below gets wrong or that are the same word
_IRREGULAR = {"person": "people", "man": "men", "woman": "women", "child": "children", "mouse": "mice",
              "knife": "knives", "sheep": "sheep", "scissors": "scissors", "broccoli": "broccoli", "ox": "oxen",
              "luggage": "luggage", "cattle": "cattle", "policeman": "policemen", "gentleman": "gentlemen",
              "foot": "feet", "calf": "calves", "tv": "tvs"}


def plural(word: str) -> str:
    """The plural of a singular noun (its last word, for a phrase): the exceptions above, else -es after s, x,
    z, ch, sh; -ies for a consonant and y; else -s."""
    *head, last = word.split(" ")
    if last in _IRREGULAR:
        tail = _IRREGULAR[last]
    elif last.endswith(("s", "x", "z", "ch", "sh")):
        tail = last + "es"
    elif last.endswith("y") and len(last) > 1 and last[-2] not in "aeiou":
        tail = last[:-1] + "ies"
    else:
        tail = last + "s"
    return " ".join([*head, tail])


def coco_vocabulary(categories: Iterable[str] = COCO_SYNONYMS) -> ObjectVocabulary:
    """The phrases of ``categories`` (names of :data:`COCO_SYNONYMS`, or other names, which are named by
    themselves), singular and plural, and the special phrases of those categories."""
    phrases: dict[tuple[str, ...], str] = {}
    for category in categories:
        for word in COCO_SYNONYMS.get(category, (category,)):
            for form in (word, plural(word)):
                phrases[tuple(form.split(" "))] = category
    wanted = set(phrases.values())
    for phrase, category in SPECIAL_PHRASES.items():
        if category in wanted:
            for form in (phrase, plural(phrase)):
                phrases[tuple(form.split(" "))] = category
    return ObjectVocabulary(phrases, {})


def read_coco_instances(path: Path, data: dict) -> ObjectTruth:
    """The truth of a COCO instances file (``categories`` [{id, name}], ``annotations`` [{image_id,
    category_id}], and optionally ``images`` [{id}]: an image listed with no annotation holds no object).
    Ids are strings, as rlcap score reads them. With ``from_references``: [Rohrbach18]'s union with the objects
    the references name."""
    try:
        names = {c["id"]: str(c["name"]).lower() for c in data["categories"]}
        objects: dict[str, set[str]] = {str(im["id"]): set() for im in data.get("images", [])}
        for k, a in enumerate(data["annotations"]):
            if a["category_id"] not in names:
                raise DataError(f"{path}: annotations[{k}] has category_id {a['category_id']}, which "
                                "'categories' does not list")
            objects.setdefault(str(a["image_id"]), set()).add(names[a["category_id"]])
    except (KeyError, TypeError) as exc:
        raise DataError(f"{path}: expected COCO instances: 'categories' [{{id, name}}] and 'annotations' "
                        f"[{{image_id, category_id}}] ({type(exc).__name__}: {exc})") from None
    vocabulary = coco_vocabulary(sorted(set(COCO_SYNONYMS) | set(names.values())))  # (a caption may name any)
    return ObjectTruth(vocabulary, {i: frozenset(o) for i, o in objects.items()},
                       None, from_references=True)


def read_instances_file(path: Path) -> ObjectTruth:
    """:func:`read_coco_instances` of a JSON file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DataError(f"{path}: cannot read it as JSON ({exc})") from None
    if not isinstance(data, dict):
        raise DataError(f"{path}: expected a JSON object with 'categories' and 'annotations' (COCO instances)")
    return read_coco_instances(path, data)

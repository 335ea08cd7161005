"""Clips of "moving shapes": 1-3 objects perform 2-4 actions, in sequence or together.

A clip is its objects' starting states and a timeline of :class:`Event`s; :func:`state_at` gives
the objects at any frame, as a :class:`~rlcap.data.synthetic.scenes.Scene` that the shapes renderer
draws. Actions: ``move`` (left, right, up, down), ``grow``, ``shrink``, ``recolour`` (to another
colour), ``appear``, ``disappear`` and ``bounce`` (to a side and back). Events follow one another;
with some probability an event runs *together* with the previous one (another object, the same
frames), which the annotators say with "while". Everything is drawn from one ``random.Random``.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from rlcap.data.synthetic.scenes import BACKGROUNDS, COLOURS, SHAPES, SIZES, Scene, SceneObject

ACTIONS = ("move", "grow", "shrink", "recolour", "appear", "disappear", "bounce")
DIRECTIONS = {"left": (-1.0, 0.0), "right": (1.0, 0.0), "up": (0.0, -1.0), "down": (0.0, 1.0)}
TRAVEL = 0.3  # how far a move goes, image fractions
GROWTH = 1.6  # grow multiplies the radius by this, shrink divides by it
TOGETHER_PROB = 0.25  # an event shares the previous one's frames (another object)
MIN_EVENT_FRAMES = 4  # every event lasts at least this many frames


@dataclass(frozen=True)
class Event:
    """``obj`` does ``action`` (with ``arg``: a direction or a colour) from frame ``start`` to ``end``."""

    obj: int
    action: str
    arg: str
    start: int
    end: int
    together: bool = False  # runs during the previous event (said with "while")


@dataclass(frozen=True)
class Clip:
    background: str
    objects: tuple[SceneObject, ...]  # starting states (an object that appears starts hidden)
    events: tuple[Event, ...]
    frames: int

    def to_dict(self) -> dict:
        return {"background": self.background, "frames": self.frames,
                "objects": [dataclasses.asdict(o) for o in self.objects],
                "events": [dataclasses.asdict(e) for e in self.events]}


def sample_clip(rng: random.Random, frames: int, max_objects: int = 3) -> Clip:
    """1..max_objects objects (distinct shape-colour pairs), 2-4 events over ``frames`` frames."""
    n = rng.randint(1, max_objects)
    kinds = rng.sample([(s, c) for s in SHAPES for c in COLOURS], n)
    objects = []
    for k, (shape, colour) in enumerate(kinds):
        size = rng.choice(("small", "medium"))
        x, y = (k + 0.5) / n, rng.uniform(0.35, 0.65)  # side by side, room to move up and down
        objects.append(SceneObject(shape, colour, size, None, x, y, SIZES[size]))
    n_events = min(rng.randint(2, 4), frames // MIN_EVENT_FRAMES)
    lengths = [MIN_EVENT_FRAMES] * n_events
    for _ in range(frames - MIN_EVENT_FRAMES * n_events):  # the rest of the frames, spread at random
        lengths[rng.randrange(n_events)] += 1
    ends = [sum(lengths[:k + 1]) for k in range(n_events)]
    spans = list(zip([0, *ends[:-1]], ends))
    events, hidden, gone = [], set(), set()
    for k, (start, end) in enumerate(spans):
        busy_now = {e.obj for e in events if e.start == events[-1].start} if events else set()
        together = k > 0 and len(busy_now) < n and rng.random() < TOGETHER_PROB
        if together:
            start, end = events[-1].start, events[-1].end
        busy = busy_now if together else set()
        free = [i for i in range(n) if i not in busy and i not in gone]
        if not free:  # every object is busy or gone: this event follows instead
            together, start, end, busy = False, spans[k][0], spans[k][1], set()
            free = [i for i in range(n) if i not in gone] or [events[-1].obj]
        obj = rng.choice(free)
        action = _action(rng, k == 0 and not together, k == n_events - 1)
        while events and (obj, action) == (events[-1].obj, events[-1].action):  # no "shrinks, then shrinks"
            action = _action(rng, False, k == n_events - 1)
        if action == "appear":
            hidden.add(obj)  # hidden before this event
        if action == "disappear":
            gone.add(obj)
        if action == "recolour":
            arg = rng.choice([c for c in COLOURS if c != objects[obj].colour])
        elif action in ("move", "bounce"):
            arg = rng.choice(_open_directions(Clip("white", tuple(objects), tuple(events), frames), obj, start))
        else:
            arg = ""
        events.append(Event(obj, action, arg, start, end, together))
    return Clip(rng.choice(BACKGROUNDS[:4]), tuple(objects), tuple(events), frames)


def _open_directions(sofar: Clip, obj: int, frame: int) -> list[str]:
    """Directions in which object ``obj`` can travel at least half a move from where it is at ``frame``
    (all four if none: it then stops at the border)."""
    o = state_at(sofar, frame, hidden_too=True).objects[obj]  # every object, in the clip's order
    room = {"left": o.x - o.radius, "right": 1 - o.radius - o.x, "up": o.y - o.radius, "down": 1 - o.radius - o.y}
    return [d for d, r in room.items() if r >= TRAVEL / 2] or list(DIRECTIONS)


def _action(rng: random.Random, first: bool, last: bool) -> str:
    """An object appears only in the first event and disappears only in the last (so no event acts on a hidden one)."""
    weights = {"move": 4, "grow": 2, "shrink": 2, "recolour": 2, "appear": 1 if first else 0,
               "disappear": 1 if last else 0, "bounce": 1}
    names = [a for a in ACTIONS if weights[a]]
    return rng.choices(names, weights=[weights[a] for a in names])[0]


def state_at(clip: Clip, frame: int, hidden_too: bool = False) -> Scene:
    """The visible objects at ``frame`` (every one with ``hidden_too``): every event up to it applied
    (the current one in part)."""
    objs = list(clip.objects)
    visible = [True] * len(objs)
    for e in clip.events:
        if e.action == "appear" and frame < e.start:
            visible[e.obj] = False
    for e in clip.events:
        if frame < e.start:
            continue
        t = min(1.0, (frame - e.start + 1) / max(1, e.end - e.start))  # progress through the event
        o = objs[e.obj]
        if e.action in ("move", "bounce"):
            dx, dy = DIRECTIONS[e.arg]
            reach = TRAVEL * (t if e.action == "move" else (1 - abs(2 * t - 1)))
            objs[e.obj] = dataclasses.replace(o, x=_clamp(o.x + dx * reach, o.radius), y=_clamp(o.y + dy * reach, o.radius))
        elif e.action in ("grow", "shrink"):
            factor = GROWTH ** (t if e.action == "grow" else -t)
            objs[e.obj] = dataclasses.replace(o, radius=o.radius * factor)
        elif e.action == "recolour" and t >= 0.5:
            objs[e.obj] = dataclasses.replace(o, colour=e.arg)
        elif e.action == "appear":
            visible[e.obj] = t >= 0.5
        elif e.action == "disappear":
            visible[e.obj] = t < 0.5
    return Scene(clip.background, tuple(o for o, v in zip(objs, visible) if v or hidden_too))


def _clamp(v: float, radius: float) -> float:
    return min(1.0 - radius, max(radius, v))

"""Diagnostics: rerun on your own data the measurements behind rlcap's documented findings.

One module per measurement, each a pure function for the maths and a function that runs it on a
checkpoint or dataset (what ``rlcap diagnose`` calls):

- :mod:`rlcap.diagnose.reward_spread`: how much each part of a combined reward varies among one
  image's sampled captions, and its share of the combined reward's variance there (the part the
  advantages, and so the gradient, follow); docs/RL.md, PG-SPIDEr.
- :mod:`rlcap.diagnose.reward_forms`: what a reward pays for: each form of caption's (a pattern the user names)
  mean leave-one-out advantage among an image's samples; docs/RL.md, "Where the goals stand". Both sample and
  score with :mod:`rlcap.diagnose.sampled_rewards`.
- :mod:`rlcap.diagnose.value_fit`: the R^2 of an actor-critic run's value network by caption
  position (:mod:`rlcap.diagnose.value_samples`); docs/RL.md, lookahead inference.
- :mod:`rlcap.diagnose.prefix_credit`: where [Wang18]'s per-word delta rewards put the cost of a wrong
  prefix, CIDEr-D against plain CIDEr (:mod:`rlcap.diagnose.credit_shift`); docs/VIDEO.md.
"""

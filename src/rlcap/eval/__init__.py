"""Captioning with a trained run: a checkpoint opened for inference (:mod:`rlcap.eval.open_run`, what every
caller uses) and lookahead inference ([Shi18]; :mod:`rlcap.eval.lookahead`)."""

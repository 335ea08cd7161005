"""Where a run is watched while it trains: TensorBoard, Weights & Biases, MLflow and Trackio (``track.to``).

Each tracker is one small module behind the :class:`rlcap.track.base.Tracker` protocol, its package imported only
when the run names it (a missing one is one line naming rlcap's extra). :class:`rlcap.track.fanout.Trackers` holds
the ones a run opened: it records their run ids in the run folder (``trackers.json``) so that a resumed run
continues the same tracker runs, sends each record once, and turns a tracker's failure into one warning."""

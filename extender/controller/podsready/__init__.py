"""Kueue's waitForPodsReady: the pure rules - its configuration, the PodsReady condition, deadlines,
the requeue backoff (pods_ready.py) - carried out over the controller's caches, engine and writers
(pods_ready_tracker.py), with Kueue's metric families for it (pods_ready_metrics.py).
docs/podsready.md."""

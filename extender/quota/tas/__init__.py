"""Kueue's Topology Aware Scheduling, pure: what a pod set asks for (request.py), where its pods can
go on the nodes as they are (snapshot.py), and what the engine holds admitted workloads to
(capacity.py). See docs/tas.md."""

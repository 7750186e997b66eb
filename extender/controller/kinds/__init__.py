"""The kinds the controller queues, as it manages them (Kueue's GenericJob inside its reconciler,
and its pod and LeaderWorkerSet integrations): a kind over its integration of gpuqueue/jobframework/
with the engine's pod sets, priority and owner chain (managed_kinds.py), and the groups that have no
object of their own - pod groups (pod_groups.py) and LeaderWorkerSet groups (lws_groups.py). Over
client/ only; the REST paths themselves are client/kinds.py."""

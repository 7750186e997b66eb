"""The controller: the imperative shell that carries the quota engine's decisions out through the
Kubernetes API. controller.py wires the parts (options.py is its settings); the parts are grouped by
concern, from the bottom up: client/ (the API server as it is reached), kinds/ (the kinds it
queues), core/ (the Job and its Workload, no I/O), writes/ (decisions carried out), reconcilers/
(watch events held against the engine), podsready/ (waitForPodsReady), queues/ (quota objects and
queue status), leadership/ (the Lease and the rebuild), serving/ (/metrics, the visibility API and
their auth), clusterview/ (what the scheduler extender reads) and explain/ (`gpuqueue explain`).
docs/controller.md lists every module."""

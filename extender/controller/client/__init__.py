"""The API server as the controller reaches it: where each kind lives on the REST path and the list
call its informer uses (kinds.py), plain REST calls paced by one token bucket and bounded in
concurrency (kubeapi.py), and what each watch cache keeps of the objects it holds
(cached_fields.py). It knows nothing of Jobs, Workloads or the engine."""

"""What the controller process serves over HTTP, and to whom: /healthz, /readyz and /metrics
(ops.py) with the Prometheus families, Kueue's and gpuqueue's own (metrics.py); Kueue's visibility
API for kube-aggregator (visibility.py) and its OpenAPI documents (visibility_openapi.py); and who
may call /metrics and the visibility API, as the API server decides (delegated_auth.py). The
scheduler extender's verbs are extender/scheduler/'s."""

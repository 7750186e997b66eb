"""The integrations, one module per family of kinds (see ``gpuqueue.jobframework.registry``)."""

"""What gpuqueue does with a workload's own object (after Kueue's pkg/controller/jobframework):
whether a Job is managed (``managed``), the mutation the webhook applies to it on CREATE
(``mutation``), which pods need an admission (``enforcement``), and the integration of every
workload kind (``integration``: the adapter interface; ``kinds``: the adapters; ``registry``: by
group/version/kind and the Configuration's ``integrations.frameworks``; ``podset``: pod sets and
the admitted flavor's injection; ``names``: Kueue's names). Pure functions, shared by the
webhook, the controller, the extender and the simulator (docs/integrations.md).
"""

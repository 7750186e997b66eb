"""What gpuqueue does with a workload's own object (after Kueue's pkg/controller/jobframework):
whether a Job is managed (``managed``) and the mutation the webhook applies to it on CREATE
(``mutation``). Pure functions, shared by the webhook, the controller and the simulator.
"""

"""Where the API server is and how to log in to it: the one loader every command uses.

A kubeconfig named on the command line is used as it is. Otherwise the pod's service account
(in cluster), else ``$KUBECONFIG`` (several files separated by ``os.pathsep`` are merged) or
``~/.kube/config``. What is loaded goes into a fresh Configuration handed to the caller; the
kubernetes_asyncio default Configuration is left alone.
"""

from __future__ import annotations

import os


class ClusterConfigError(Exception):
    """No usable cluster configuration. The message is one line naming the problem."""


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


async def load_config(kubeconfig: str | None = None):
    """A kubernetes_asyncio Configuration for the cluster; ClusterConfigError when there is none."""
    import yaml
    from kubernetes_asyncio import client, config

    cfg = client.Configuration()
    if kubeconfig is None:
        try:
            config.load_incluster_config(client_configuration=cfg)
            return cfg
        except config.ConfigException as exc:
            # Only worth naming when the pod's environment says it is in a cluster.
            in_cluster = f" ({_one_line(exc)})" if os.environ.get("KUBERNETES_SERVICE_HOST") else ""
        # KUBECONFIG read now: kubernetes_asyncio reads it once, at import.
        paths = os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
        missing = f"no in-cluster service account{in_cluster}, no kubeconfig at {paths}"
    else:
        paths, missing = kubeconfig, f"kubeconfig {kubeconfig}: no such file"
    if not any(os.path.exists(p) for p in paths.split(os.pathsep) if p):
        raise ClusterConfigError(missing)
    try:
        await config.load_kube_config(config_file=paths, client_configuration=cfg)
    except (config.ConfigException, OSError, TypeError, ValueError, yaml.YAMLError) as exc:
        raise ClusterConfigError(f"kubeconfig {paths}: {_one_line(exc)}") from None
    return cfg


async def api_client(kubeconfig: str | None = None):
    """A kubernetes_asyncio ApiClient over ``load_config(kubeconfig)``; the caller closes it."""
    from kubernetes_asyncio import client

    return client.ApiClient(await load_config(kubeconfig))


IN_CLUSTER_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def current_namespace(kubeconfig: str | None = None) -> str:
    """The namespace commands act in when none is given, as kubectl picks it: the kubeconfig's
    current context's namespace, else (in a pod, with no kubeconfig named) the pod's, else default."""
    from kubernetes_asyncio import config

    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST") and os.path.exists(IN_CLUSTER_NAMESPACE_FILE):
        with open(IN_CLUSTER_NAMESPACE_FILE, encoding="utf-8") as f:
            return f.read().strip() or "default"
    paths = kubeconfig or os.environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")
    if not any(os.path.exists(p) for p in paths.split(os.pathsep) if p):
        return "default"
    try:
        _, current = config.list_kube_config_contexts(paths)
    except (config.ConfigException, OSError, TypeError, ValueError) as exc:
        raise ClusterConfigError(f"kubeconfig {paths}: {_one_line(exc)}") from None
    return ((current or {}).get("context") or {}).get("namespace") or "default"

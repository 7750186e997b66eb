"""A victim's reservation is cleared only once a live list shows its pods gone; that list asks the
API for the Job's own pods by its selector, not for every pod of the namespace (issue 16)."""

from urllib.parse import parse_qs, urlsplit

from tests.controller_support import Harness
from tests.metrics_support import flame_reclaimed


async def test_the_victims_pods_are_listed_by_their_jobs_selector():
    async with Harness(pod_deletion_delay=0.05) as h:
        _, _, c_keys = await flame_reclaimed(h)
        lists = [urlsplit(path) for method, path in h.api.requests
                 if method == "GET" and urlsplit(path).path == "/api/v1/namespaces/team-c/pods"]
        assert lists, "the victims' pods were confirmed gone by a live list"
        selectors = {h.job(*k)["spec"]["selector"]["matchLabels"]["controller-uid"] for k in c_keys}
        for url in lists:
            (query,) = parse_qs(url.query)["labelSelector"]
            key, _, uid = query.partition("=")
            assert key == "controller-uid" and uid in selectors, url
        assert h.pods.violations == [] and h.observer.violations == []

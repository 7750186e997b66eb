import pytest

from gpuqueue.api.labelselector import LabelSelectorError, check_label_selector, selector_matches


@pytest.mark.parametrize(
    "selector,labels,expected",
    [
        (None, {"a": "1"}, False),
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_selector_matches(selector, labels, expected):
    check_label_selector(selector)
    assert selector_matches(selector, labels) is expected


@pytest.mark.parametrize(
    "selector,message",
    [
        ([], "must be an object"),
        ({"matchLabels": {"a": 1}}, "matchLabels"),
        ({"matchExpressions": [{"operator": "In", "values": ["x"]}]}, r"matchExpressions\[0\].key"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "values: Required"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "Forbidden"),
    ],
)
def test_invalid_selectors(selector, message):
    with pytest.raises(LabelSelectorError, match=message):
        check_label_selector(selector)


@pytest.mark.parametrize("selector", [
    {"matchLabels": {"controller-uid": "0b1c"}},
    {"matchLabels": {"app": "train", "team": "a"},
     "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]},
                          {"key": "zone", "operator": "NotIn", "values": ["x"]},
                          {"key": "owner", "operator": "Exists"},
                          {"key": "legacy", "operator": "DoesNotExist"}]},
    {},
])
def test_a_selector_as_a_query_selects_in_the_api_what_it_matches(selector):
    """The controller lists a Job's pods by its selector (issue 16): the API server's parse of the
    query (the stand-in's) must select exactly the pods the selector matches."""
    from itertools import product

    from gpuqueue.api.labelselector import selector_query
    from tests.standin.selectors import parse_label_selector

    chosen = parse_label_selector(selector_query(selector))
    keys = {"controller-uid": ["0b1c", "ffff"], "app": ["train"], "team": ["a", "b"], "tier": ["gpu", "cpu", "io"],
            "zone": ["x", "y"], "owner": ["me"], "legacy": ["1"]}
    for combo in product(*[[None, *vals] for vals in keys.values()]):
        labels = {k: v for k, v in zip(keys, combo) if v is not None}
        assert chosen(labels) == selector_matches(selector, labels), labels

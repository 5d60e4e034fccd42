"""The /metrics text-format parser, the offload counters it picks out and the loopback scrape
(in_container/metrics_text.py)."""

from __future__ import annotations

import math

import pytest

from tools.sglang_server.in_container import metrics_text
from tools.sglang_server.in_container.metrics_text import MetricsParseError, Sample
from tools.sglang_server.testing import EXPOSITION, serve_metrics


def test_samples_names_labels_values():
    samples = metrics_text.parse(EXPOSITION)
    assert len(samples) == 10  # comments skipped
    first = samples[0]
    assert first.name == "sglang:offload_events_total"
    assert first.labels == {"engine_type": "unified", "event": "uses", "model_name": "/model", "path": "tokenizer_process"}
    assert first.value == 2.0
    assert samples[-2].labels["le"] == "+Inf"
    assert samples[-1] == Sample("sglang:num_requests_total", {}, 5.0)


def test_label_values_with_quotes_escapes_commas_and_braces():
    text = 'm{a="say \\"hi\\"",b="back\\\\slash",c="two\\nlines",d="x,y}z",e="",f="\\q"} 1\n'
    (sample,) = metrics_text.parse(text)
    assert sample.labels == {"a": 'say "hi"', "b": "back\\slash", "c": "two\nlines", "d": "x,y}z", "e": "", "f": "\\q"}


def test_spaces_trailing_comma_timestamps_and_special_values():
    text = ("a_total { x = \"1\" , } 3 1700000000000\n"
            "b +Inf\n"
            "c -Inf\n"
            "d NaN\n"
            "e{} 1e3\n"
            "  \n"
            "# any other comment\n"
            "#TYPE without a space is a comment too\n")
    a, b, c, d, e = metrics_text.parse(text)
    assert (a.name, a.labels, a.value) == ("a_total", {"x": "1"}, 3.0)
    assert b.value == math.inf and c.value == -math.inf and math.isnan(d.value)
    assert (e.labels, e.value) == ({}, 1000.0)


@pytest.mark.parametrize("line", [
    'm{a="1"',            # no closing brace
    'm{a=1} 2',           # unquoted value
    'm{a="unterminated} 2',
    'm{="x"} 1',          # no label name
    'm{a="1" b="2"} 1',   # no comma
    'm',                  # no value
    'm 1 2 3',            # too many fields
    'm{a="1"} one',       # not a number
    '{a="1"} 1',          # no name
])
def test_malformed_lines_are_errors_naming_the_line(line):
    with pytest.raises(MetricsParseError, match="line 2"):
        metrics_text.parse("ok 1\n" + line + "\n")


def test_offload_counters_match_path_and_event_only_and_sum_other_label_sets():
    text = EXPOSITION + (
        'sglang:offload_events_total{engine_type="unified",event="uses",model_name="other",path="tokenizer_process"} 1\n'
        'sglang:offload_events_total{event="uses"} 9\n')  # no path: ignored
    counters = metrics_text.offload_counters(metrics_text.parse(text))
    assert counters["events"] == {
        "json_process.uses": 3, "preprocessing_lane_bulk.uses": 3, "preprocessing_lane_small.uses": 4,
        "tokenizer_process.fallbacks": 0, "tokenizer_process.uses": 3}
    assert counters["queue_depth"] == {"preprocessing_lane_bulk": 0, "preprocessing_lane_small": 1}
    assert all(isinstance(v, int) for v in counters["events"].values())


def test_no_offload_counters_is_none_not_zeros():
    stock = "# TYPE sglang:http_requests_total counter\nsglang:http_requests_total{endpoint=\"/health\"} 4\n"
    assert metrics_text.offload_counters(metrics_text.parse(stock)) is None
    # HELP/TYPE alone (a labelled counter before its first increment) has no sample either
    assert metrics_text.offload_counters(metrics_text.parse("# TYPE sglang:offload_events_total counter\n")) is None


def test_scrape_is_a_plain_get_on_loopback():
    server = serve_metrics(200, EXPOSITION.encode())
    try:
        status, text, error = metrics_text.scrape(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    assert (status, error) == (200, None)
    assert metrics_text.offload_counters(metrics_text.parse(text))["events"]["tokenizer_process.uses"] == 2


def test_scrape_reports_404_and_no_server():
    server = serve_metrics(404, b"Not Found")
    try:
        status, _, error = metrics_text.scrape(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
    assert status == 404 and "HTTP 404" in error
    port = server.server_address[1]  # closed now
    status, text, error = metrics_text.scrape(port, timeout_s=2)
    assert (status, text) == (0, "") and error

"""The benchmark's own helpers: statistics, the fake model's script, profile summaries."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import pytest

from bench import processes
from bench.fake_model import reply_for
from bench.p5_audit_scale import DEFAULT_TEXT_CASE, _cases, scope_label, scope_ratios
from bench.profiling import summarise
from bench.report import line, markdown_table
from bench.stats import also_within, judged, percentile, summary
from conversations.selectors.scopes import SCOPES

TOOLS = [{"type": "function", "function": {"name": "demo__calculate", "parameters": {}}}]


def test_percentiles_interpolate_between_the_closest_ranks() -> None:
    assert percentile([1, 2, 3, 4], 0.5) == 2.5
    assert percentile([10], 0.95) == 10
    assert summary([3, 1, 2])["median"] == 2


def test_a_result_passes_only_when_its_statistic_is_within_the_limit() -> None:
    assert judged(id="P", name="", unit="ms", target="", limit=5, samples=[1, 9, 2]).status == "pass"
    assert (
        judged(id="P", name="", unit="ms", target="", limit=5, samples=[1, 9, 2], statistic="max").status
        == "fail"
    )


def test_a_second_condition_of_a_target_turns_a_pass_into_a_named_miss() -> None:
    met = judged(id="P2", name="first step", unit="ms", target="", limit=30, samples=[20, 25, 90])
    assert met.status == "pass"

    also_within(met, what="p95 ms", value=float(met.spread["p95"]), limit=50)

    assert met.status == "fail" and met.details["missed"] == ["p95 ms 83.5 > 50"]
    assert [c["met"] for c in met.details["conditions"]] == [False]
    assert "(missed: p95 ms 83.5 > 50)" in line(met) and "(missed: p95 ms 83.5 > 50)" in markdown_table([met])
    kept = also_within(
        judged(id="P4", name="", unit="×", target="", limit=1.5, samples=[1.2]),
        what="÷ bare",
        value=1.1,
        limit=1.15,
    )
    assert kept.status == "pass" and "missed" not in kept.details


def test_percentile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError):
        percentile([], 0.5)


def test_the_fake_model_calls_the_calculator_steps_minus_one_times_then_answers() -> None:
    messages: list[dict[str, object]] = [{"role": "user", "content": "go"}]
    calls = 0
    while True:
        reply = reply_for({"model": "m", "messages": messages, "tools": TOOLS}, steps=4)
        message = reply["choices"][0]["message"]
        if not message.get("tool_calls"):
            break
        calls += 1
        assert message["tool_calls"][0]["function"]["name"] == "demo__calculate"
        messages += [message, {"role": "tool", "tool_call_id": "x", "content": "1"}]
    assert calls == 3
    assert reply["choices"][0]["finish_reason"] == "stop"


def test_the_fake_model_counts_only_the_tool_results_of_the_current_question() -> None:
    earlier = [
        {"role": "user", "content": "a"},
        {"role": "tool", "content": "1"},
        {"role": "tool", "content": "1"},
    ]
    reply = reply_for({"messages": [*earlier, {"role": "user", "content": "b"}], "tools": TOOLS}, steps=2)
    assert reply["choices"][0]["message"]["tool_calls"]


def test_a_profile_summary_puts_samples_in_areas_and_project_functions() -> None:
    collapsed = (
        "MainThread;turn_run (/srv/inspector/conversations/runner.py:1);_send (/srv/inspector/inspector/live.py:2);"
        "__call__ (/x/site-packages/asgiref/sync.py:3) 3\n"
        "MainThread;turn_run (/srv/inspector/conversations/runner.py:1);execute (/x/site-packages/psycopg/cursor.py:4) 1\n"
    )
    result = summarise(collapsed)
    assert result["samples"] == 4
    assert result["by_area_pct"]["publishing (asgiref async_to_sync → channels-redis)"] == 75.0
    assert ["turn_run (conversations/runner.py)", 100.0] in result["top_project_inclusive_pct"]


def test_pss_counts_pages_shared_between_processes_once_where_rss_counts_them_in_each() -> None:
    # Two children of one interpreter share its pages: their PSS adds up to less than their RSS.
    code = "import json, sys, time; data = b'x' * (8 << 20); sys.stdout.write('up\\n'); sys.stdout.flush(); time.sleep(30)"
    kids = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE) for _ in range(2)]
    try:
        for kid in kids:
            assert kid.stdout is not None and select.select([kid.stdout], [], [], 30)[0]
            assert kid.stdout.readline() == b"up\n"
        rss = [processes.rss_bytes(kid.pid) for kid in kids]
        pss = [processes.pss_bytes(kid.pid) for kid in kids]
        assert all(p > 8 << 20 for p in pss)  # each holds its own 8 MB privately
        assert sum(pss) < sum(rss)
        with processes.RssSampler(os.getpid(), interval=0.01, pss_every=2) as sampler:
            time.sleep(0.2)
        assert sampler.tree_pss and len(sampler.tree_pss) <= len(sampler.tree) // 2 + 1
        assert len(sampler.tree_at_pss) == len(sampler.tree_pss)
        assert all(pss <= rss for pss, rss in zip(sampler.tree_pss, sampler.tree_at_pss, strict=True))
        assert max(sampler.tree_pss) >= sum(pss) * 0.9  # the children are in the tree
    finally:
        for kid in kids:
            kid.kill()
            kid.wait()
    assert processes.pss_bytes(2**22 + 1) == 0  # no such process (above the kernel's pid_max)


def test_p5_reports_each_search_scope_with_its_ratio_to_the_default_scopes() -> None:
    p95 = {DEFAULT_TEXT_CASE: 40.0, scope_label("question"): 10.0, scope_label("raw"): 90.0}

    ratios = scope_ratios(p95)

    assert ratios == {
        "question": {"p95_ms": 10.0, "ratio_to_default": 0.25},
        "raw": {"p95_ms": 90.0, "ratio_to_default": 2.25},
    }
    assert set(_cases(object(), object())) >= {scope_label(scope) for scope in SCOPES}

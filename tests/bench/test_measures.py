"""The measures' numbering and the pure parts of P8 (recording throughput) and P9 (scale-out)."""

from __future__ import annotations

import argparse
import importlib

import pytest

from bench import report
from bench.__main__ import KNOWN, MEASURES, QUICK, _selected
from bench.host_load import shares
from bench.p8_recording import Leg, compared, turns_for
from bench.p9_scale_out import Configuration, Row, configurations, scaling_stops
from bench.stats import Result


def _only(value: str) -> list[str]:
    return _selected(argparse.Namespace(only=value, quick=False))


def test_the_measures_are_numbered_p1_to_p14_with_recording_and_scale_out_as_p8_and_p9() -> None:
    assert list(MEASURES) == [
        "P1",
        "P2",
        "P3",
        "P4",
        "P5",
        "P6",
        "P8",
        "P9",
        "P10",
        "P11",
        "P12",
        "P13",
        "P14",
    ]
    assert MEASURES["P8"] == ("bench.p8_recording", ("P8",))
    assert MEASURES["P9"] == ("bench.p9_scale_out", ("P9",))
    assert MEASURES["P10"] == ("bench.p10_big_payload", ("P10",))
    assert MEASURES["P11"] == ("bench.p11_streaming", ("P11",))
    assert MEASURES["P12"] == ("bench.p12_class", ("P12",))
    assert MEASURES["P13"] == ("bench.p13_proxies", ("P13.llm", "P13.streams", "P13.mcp"))
    assert MEASURES["P14"] == ("bench.p14_huge_turn", ("P14",))
    assert KNOWN == "P1-P14"
    assert QUICK == ("P1", "P3")
    for key in ("P8", "P9", "P10", "P11", "P12", "P13", "P14"):
        assert importlib.import_module(MEASURES[key][0]).ID == key
    # P13's two halves report their own ids.
    assert importlib.import_module("bench.p13_proxy_llm").ID == "P13.llm"
    assert importlib.import_module("bench.p13_proxy_mcp").ID == "P13.mcp"


def test_only_takes_ids_in_any_case_and_p7_runs_with_p4() -> None:
    assert _only("p8, P9,p11") == ["P8", "P9", "P11"]
    assert _only("P7,P4,P10") == ["P4", "P10"]
    assert _selected(argparse.Namespace(only="", quick=True)) == ["P1", "P3"]
    with pytest.raises(SystemExit, match="known: P1-P14"):
        _only("P15")


def test_the_report_orders_p10_to_p14_after_p9() -> None:
    assert report.ORDER[-9:] == ["P8", "P9", "P10", "P11", "P12", "P13.llm", "P13.streams", "P13.mcp", "P14"]
    results = [
        Result(id=i, name="", unit="", target="", status="not run", reason="-")
        for i in ("P12", "P11", "P10", "P9", "P1")
    ]
    rows = report.markdown_table(results).splitlines()[2:]
    assert [row.split()[1] for row in rows] == ["P1", "P9", "P10", "P11", "P12"]


def test_recording_legs_compare_throughput_and_cpu_per_exchange() -> None:
    product = Leg(exchanges=1000, wall=2.0, cpu=1.0, db_cpu=0.6)
    bare = Leg(exchanges=1000, wall=0.5, cpu=0.05, db_cpu=0.4)
    assert product.per_second == 500 and product.per_cpu_second == 1000 and product.cpu_ms == 1.0
    ratios = compared(product, bare)
    assert ratios["throughput"] == pytest.approx(0.25)
    assert ratios["cpu_per_exchange"] == pytest.approx(20)
    assert ratios["per_core"] == pytest.approx(0.05)
    assert ratios["db_cpu_per_exchange"] == pytest.approx(1.5)
    # A CPU reading of nothing gives 0, not a division by zero.
    assert compared(product, Leg(exchanges=1000, wall=1.0, cpu=0.0, db_cpu=0.0))["cpu_per_exchange"] == 0


def test_recording_replays_whole_tapes_and_cuts_the_last_to_fit() -> None:
    assert turns_for(40, 19) == [19, 19, 2]
    assert turns_for(38, 19) == [19, 19]
    with pytest.raises(ValueError):
        turns_for(10, 0)


def test_scale_out_runs_every_process_count_at_200_turns_then_2_and_8_at_1000() -> None:
    full = configurations()
    assert [(c.processes, c.turns) for c in full] == [(2, 200), (4, 200), (8, 200), (2, 1000), (8, 1000)]
    assert [(c.processes, c.turns) for c in configurations(quick=True)] == [(2, 200), (4, 200)]
    # The worker processes' pools together stay well under Postgres's 100 connections.
    assert [c.pool for c in full[:3]] == [20, 16, 8]
    assert Configuration(8, 1000).timeout >= 120


def _row(processes: int, turns: int, wall: float) -> Row:
    return Row(Configuration(processes, turns), wall, wall / 3, 0.04, 1.0, 1.3, [])


def test_scaling_stops_where_more_processes_no_longer_cut_the_wall() -> None:
    rows = [_row(2, 200, 7.0), _row(4, 200, 6.0), _row(8, 200, 6.1), _row(2, 1000, 30.0), _row(4, 1000, 29.5)]
    assert scaling_stops(rows) == {200: 4, 1000: 2}
    table = _row(4, 200, 6.0).as_json()
    assert table["workers"] == 4 and table["turns"] == 200 and table["wall_over_ideal"] == 2.0
    assert table["product_over_bare"] == pytest.approx(1.54)


def test_a_host_load_shares_its_turns_evenly_over_the_processes() -> None:
    assert shares(200, 8) == [25] * 8
    assert shares(10, 4) == [3, 3, 2, 2]

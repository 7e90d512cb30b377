import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
from mcp import Client, StdioServerParameters, stdio_client
from mcp.server.mcpserver import MCPServer
from mcp.types import CallToolResult, TextContent

from servers import demo_server
from tests.support import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
STARTUP_DEADLINE_SECONDS = 20.0
CALL_TIMEOUT_SECONDS = 20.0


@pytest.fixture
def server() -> MCPServer:
    """A fresh server, so no test sees another test's notes."""
    return demo_server.build_server()


def text_of(result: CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, TextContent))


# --- the server as a whole ---------------------------------------------------------------


async def test_module_level_server_introduces_itself_and_warns_the_data_is_made_up() -> None:
    async with Client(demo_server.server, mode="legacy") as client:
        server_info, instructions = client.server_info, client.instructions

    assert server_info is not None
    assert server_info.name == "inspector-demo"
    assert server_info.version == demo_server.SERVER_VERSION
    assert instructions is not None
    assert "made-up demo weather" in instructions


async def test_every_tool_is_listed_with_a_title_description_and_annotations(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        listed = await client.list_tools()

    tools = {tool.name: tool for tool in listed.tools}
    assert set(tools) == {
        "get_weather_forecast",
        "calculate",
        "convert_units",
        "write_note",
        "list_notes",
        "read_note",
    }
    for tool in tools.values():
        assert tool.title
        assert tool.description
        assert tool.annotations is not None
        assert tool.annotations.idempotent_hint is True
    write_hints, read_hints = tools["write_note"].annotations, tools["read_note"].annotations
    assert write_hints is not None and read_hints is not None
    assert (write_hints.read_only_hint, write_hints.destructive_hint) == (False, True)
    assert (read_hints.read_only_hint, read_hints.destructive_hint) == (True, False)


async def test_tool_parameters_are_described_in_the_input_schema(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        listed = await client.list_tools()

    for tool in listed.tools:
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
    weather = next(tool for tool in listed.tools if tool.name == "get_weather_forecast")
    assert weather.input_schema["required"] == ["city"]


# --- get_weather_forecast ----------------------------------------------------------------


async def test_weather_forecast_is_deterministic_and_structured(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        first = await client.call_tool("get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})
        second = await client.call_tool("get_weather_forecast", {"city": "Beijing", "day": "tomorrow"})

    assert first.is_error is False
    assert first.structured_content == second.structured_content
    forecast = first.structured_content
    assert forecast is not None
    assert forecast["city"] == "Beijing"
    assert forecast["day"] == "tomorrow"
    assert forecast["source"] == "demo data (made up)"
    assert forecast["low_c"] < forecast["high_c"]
    assert 0 <= forecast["precipitation_chance_pct"] <= 100
    separator = " to " if forecast["low_c"] < 0 else "–"
    assert forecast["summary"] == (
        f"Beijing tomorrow: {forecast['condition']}, "
        f"{forecast['low_c']}{separator}{forecast['high_c']} °C, "
        f"{forecast['precipitation_chance_pct']}% chance of precipitation, wind {forecast['wind_kph']} km/h."
    )


def test_weather_forecast_is_stable_across_processes_because_it_hashes_with_sha256() -> None:
    # Pinned values: Python's hash() is salted per process and would change these on every run.
    forecast = demo_server.get_weather_forecast("Beijing", "tomorrow")

    assert forecast.summary == "Beijing tomorrow: fog, -1 to 9 °C, 20% chance of precipitation, wind 34 km/h."


async def test_weather_structured_content_validates_against_the_published_output_schema(
    server: MCPServer,
) -> None:
    async with Client(server, mode="legacy") as client:
        listed = await client.list_tools()
        result = await client.call_tool("get_weather_forecast", {"city": "Oslo", "day": "friday"})

    tool = next(tool for tool in listed.tools if tool.name == "get_weather_forecast")
    assert tool.output_schema is not None
    jsonschema.Draft202012Validator.check_schema(tool.output_schema)
    jsonschema.Draft202012Validator(tool.output_schema).validate(result.structured_content)
    assert tool.output_schema["properties"]["source"]["const"] == "demo data (made up)"


async def test_weather_forecast_ignores_case_and_spacing_of_the_city_and_day(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        tidy = await client.call_tool("get_weather_forecast", {"city": "New York", "day": "Monday"})
        messy = await client.call_tool("get_weather_forecast", {"city": "  new   york ", "day": " MON "})

    assert tidy.structured_content == messy.structured_content


def test_weather_forecast_varies_between_cities_and_days() -> None:
    forecasts = {
        (forecast.condition, forecast.high_c)
        for forecast in (
            demo_server.get_weather_forecast(city, day)
            for city in ("Beijing", "Lima", "Oslo", "Nairobi")
            for day in ("today", "tomorrow", "Sunday")
        )
    }

    assert len(forecasts) > 3


@pytest.mark.parametrize(
    ("day", "normalized", "summary_start"),
    [
        ("today", "today", "Lagos today: "),
        ("Tomorrow", "tomorrow", "Lagos tomorrow: "),
        ("wednesday", "Wednesday", "Lagos on Wednesday: "),
        ("Sat", "Saturday", "Lagos on Saturday: "),
        ("2026-05-01", "2026-05-01", "Lagos on 2026-05-01: "),
    ],
)
async def test_weather_day_accepts_named_days_and_iso_dates(
    server: MCPServer, day: str, normalized: str, summary_start: str
) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("get_weather_forecast", {"city": "Lagos", "day": day})

    assert result.is_error is False
    assert result.structured_content is not None
    assert result.structured_content["day"] == normalized
    assert result.structured_content["summary"].startswith(summary_start)


async def test_weather_defaults_to_today(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        implicit = await client.call_tool("get_weather_forecast", {"city": "Lima"})
        explicit = await client.call_tool("get_weather_forecast", {"city": "Lima", "day": "today"})

    assert implicit.structured_content == explicit.structured_content


async def test_weather_rejects_an_unknown_day_and_says_what_is_accepted(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("get_weather_forecast", {"city": "Lima", "day": "next week"})

    assert result.is_error is True
    assert result.structured_content is None
    assert "Unknown day 'next week'" in text_of(result)
    assert "'tomorrow'" in text_of(result)


async def test_weather_rejects_a_blank_city(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("get_weather_forecast", {"city": "   "})

    assert result.is_error is True
    assert "city name is empty" in text_of(result)


# --- calculate ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("(3 + 4) * 2 ** 3", 56),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("7 % 3", 1),
        ("-2 ** 2", -4),
        ("sqrt(16) + abs(-3)", 7.0),
        ("round(2.345, 2)", 2.35),
        ("floor(pi) + ceil(e)", 6),
        ("2 ** 100", 2**100),
    ],
)
async def test_calculate_evaluates_arithmetic(server: MCPServer, expression: str, expected: float) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("calculate", {"expression": expression})

    assert result.is_error is False
    assert result.structured_content == {"result": expected}
    assert text_of(result) == str(expected)


async def test_calculate_publishes_a_numeric_output_schema(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        listed = await client.list_tools()
        result = await client.call_tool("calculate", {"expression": "1 + 1"})

    tool = next(tool for tool in listed.tools if tool.name == "calculate")
    assert tool.output_schema is not None
    jsonschema.Draft202012Validator(tool.output_schema).validate(result.structured_content)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("1 / 0", "Division by zero in '1 / 0'"),
        ("5 % 0", "Division by zero"),
        ("9 ** 9 ** 9", "exponent 387420489 is too large"),
        ("10 ** 999 * 10 ** 999 * 10 ** 999 * 10 ** 999", "result is too large"),
        ("10.0 ** 400", "too large to represent"),
        ("(-8) ** 0.5", "not a real number"),
        ("sqrt(-1)", "sqrt() cannot take -1"),
        ("__import__('os').getcwd()", "Unsupported expression"),
        ("open('/etc/passwd')", "Unknown function 'open'"),
        ("x + 1", "Unknown name 'x'"),
        ("().__class__", "Unsupported expression"),
        ("'a' * 3", "is not a number"),
        ("round(1, 2, 3)", "round() takes 1 or 2 argument(s), got 3"),
        ("1 +", "Could not parse '1 +'"),
    ],
)
async def test_calculate_rejects_anything_but_safe_arithmetic_with_a_tool_error(
    server: MCPServer, expression: str, message: str
) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("calculate", {"expression": expression})

    assert result.is_error is True
    assert message in text_of(result)


# --- convert_units -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "from_unit", "to_unit", "expected"),
    [
        (10, "km", "miles", "10 km = 6.21371 mi"),
        (100, "°C", "fahrenheit", "100 °C = 212 °F"),
        (0, "K", "degrees Celsius", "0 K = -273.15 °C"),
        (1, "gallon", "L", "1 gal = 3.78541 L"),
        (2.5, "Kilograms", "lb", "2.5 kg = 5.51156 lb"),
        (100, "km/h", "mph", "100 km/h = 62.1371 mph"),
        (1, "m3", "l", "1 m³ = 1000 L"),
    ],
)
async def test_convert_units_accepts_symbols_and_names(
    server: MCPServer, value: float, from_unit: str, to_unit: str, expected: str
) -> None:
    arguments = {"value": value, "from_unit": from_unit, "to_unit": to_unit}
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("convert_units", arguments)

    assert result.is_error is False
    assert text_of(result) == expected


async def test_convert_units_rejects_an_unknown_unit_and_lists_the_known_ones(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("convert_units", {"value": 1, "from_unit": "furlong", "to_unit": "m"})

    assert result.is_error is True
    assert "Unknown unit 'furlong'" in text_of(result)
    assert "length: mm, cm, m, km" in text_of(result)
    assert "temperature: °C, °F, K" in text_of(result)


async def test_convert_units_rejects_units_of_different_dimensions(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("convert_units", {"value": 1, "from_unit": "kg", "to_unit": "km"})

    assert result.is_error is True
    assert "Cannot convert kg (mass) to km (length)" in text_of(result)


async def test_convert_units_rejects_temperatures_below_absolute_zero(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("convert_units", {"value": -500, "from_unit": "C", "to_unit": "F"})

    assert result.is_error is True
    assert "below absolute zero" in text_of(result)


# --- notes -------------------------------------------------------------------------------


async def test_notes_persist_across_calls_within_one_session(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        empty = await client.call_tool("list_notes", {})
        saved = await client.call_tool("write_note", {"title": "Shopping", "text": "milk, eggs"})
        await client.call_tool("write_note", {"title": "Ideas", "text": "a teaching server"})
        listed = await client.call_tool("list_notes", {})
        read = await client.call_tool("read_note", {"title": "shopping"})

    assert text_of(empty) == "No notes yet. Use write_note to add one."
    assert text_of(saved) == "Saved note 'Shopping' (10 characters). 1 note stored."
    assert text_of(listed) == "2 notes:\n- Shopping (10 characters)\n- Ideas (17 characters)"
    assert read.is_error is False
    assert text_of(read) == "milk, eggs"


async def test_notes_outlive_a_session_because_they_belong_to_the_server_process(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        await client.call_tool("write_note", {"title": "Shopping", "text": "milk"})
    async with Client(server, mode="legacy") as client:
        read = await client.call_tool("read_note", {"title": "Shopping"})

    assert text_of(read) == "milk"


async def test_write_note_replaces_a_note_with_the_same_title_ignoring_case(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        await client.call_tool("write_note", {"title": "Shopping", "text": "milk"})
        replaced = await client.call_tool("write_note", {"title": "SHOPPING", "text": "bread"})
        read = await client.call_tool("read_note", {"title": "Shopping"})

    assert text_of(replaced) == "Replaced note 'SHOPPING' (5 characters). 1 note stored."
    assert text_of(read) == "bread"


async def test_read_note_of_a_missing_title_names_the_titles_that_exist(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        await client.call_tool("write_note", {"title": "Shopping", "text": "milk"})
        await client.call_tool("write_note", {"title": "Ideas", "text": "x"})
        result = await client.call_tool("read_note", {"title": "Holidays"})

    assert result.is_error is True
    assert "No note titled 'Holidays'. Existing notes: 'Shopping', 'Ideas'." in text_of(result)


async def test_read_note_with_no_notes_says_there_are_none(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("read_note", {"title": "Anything"})

    assert result.is_error is True
    assert "there are no notes yet" in text_of(result)


async def test_write_note_rejects_a_blank_title(server: MCPServer) -> None:
    async with Client(server, mode="legacy") as client:
        result = await client.call_tool("write_note", {"title": "   ", "text": "lost"})

    assert result.is_error is True
    assert "title is empty" in text_of(result)


async def test_each_server_instance_keeps_its_own_notebook() -> None:
    async with Client(demo_server.build_server(), mode="legacy") as alice:
        await alice.call_tool("write_note", {"title": "Secret", "text": "alice's"})
    async with Client(demo_server.build_server(), mode="legacy") as bob:
        listed = await bob.call_tool("list_notes", {})

    assert text_of(listed) == "No notes yet. Use write_note to add one."


# --- real subprocesses -------------------------------------------------------------------


async def test_stdio_subprocess_serves_the_weather_forecast(tmp_path: Path) -> None:
    params = StdioServerParameters(command=sys.executable, args=["-m", "servers.demo_server"], cwd=REPO_ROOT)
    expected = demo_server.get_weather_forecast("Beijing", "tomorrow").model_dump()

    with open(tmp_path / "stderr.log", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog), mode="legacy") as client:
            result = await client.call_tool(
                "get_weather_forecast",
                {"city": "Beijing", "day": "tomorrow"},
                read_timeout_seconds=CALL_TIMEOUT_SECONDS,
            )
            server_info = client.server_info

    assert server_info is not None and server_info.name == "inspector-demo"
    assert result.is_error is False
    assert result.structured_content == expected
    assert result.structured_content["summary"].startswith("Beijing tomorrow: ")


@pytest.fixture
def http_server_url(tmp_path: Path) -> Iterator[str]:
    """Run ``python -m servers.demo_server --http`` on a free port until the test ends."""
    port = free_port()
    stderr_path = tmp_path / "http-stderr.log"
    with open(stderr_path, "w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "servers.demo_server", "--http", "--port", str(port)],
            cwd=REPO_ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + STARTUP_DEADLINE_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"demo server exited early:\n{stderr_path.read_text()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"demo server did not listen within the deadline:\n{stderr_path.read_text()}")
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def test_http_subprocess_serves_tools_at_the_mcp_path(http_server_url: str) -> None:
    async with Client(http_server_url, mode="legacy") as client:
        result = await client.call_tool(
            "calculate", {"expression": "6 * 7"}, read_timeout_seconds=CALL_TIMEOUT_SECONDS
        )
        server_info = client.server_info

    assert server_info is not None and server_info.name == "inspector-demo"
    assert result.structured_content == {"result": 42}

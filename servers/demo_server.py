"""The bundled teaching MCP server of the Tool-Call Inspector.

A small, offline MCP server whose tools show the interesting shapes of tool calling: a
structured result with an output schema (``get_weather_forecast``), plain numeric and text
results (``calculate``, ``convert_units``), tool errors that explain themselves, and state kept
in the server process across calls (the notes tools), which shows that the host reuses one
pooled process.

It must stay independent of Django and of the rest of the project, because the inspector
launches it as a subprocess::

    python -m servers.demo_server                              # stdio (the default)
    python -m servers.demo_server --http --port 8765           # Streamable HTTP at /mcp
"""

import argparse
import ast
import asyncio
import functools
import hashlib
import math
import operator
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from typing import Annotated, Literal, NamedTuple

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

SERVER_NAME = "inspector-demo"
SERVER_VERSION = "0.1.0"
DemoSource = Literal["demo data (made up)"]
DEMO_SOURCE: DemoSource = "demo data (made up)"

INSTRUCTIONS = """\
A teaching server bundled with the Tool-Call Inspector. Everything runs offline.
- get_weather_forecast returns made-up demo weather: stable for a given city and day, but not \
real. Say so when you report it.
- calculate evaluates arithmetic safely (numbers, + - * / // % **, parentheses, abs, round, \
sqrt, floor, ceil, pi, e). Use it instead of doing arithmetic in your head.
- convert_units converts length, mass, temperature, volume and speed.
- write_note, list_notes and read_note keep short notes in this server process's memory: they \
last across calls while the process runs and are lost when it restarts."""

# One annotation set per kind of tool: everything here is offline, so nothing is open-world.
_READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
# Writing a note replaces any note with the same title, hence destructive; repeating the same
# write leaves the same state, hence idempotent.
_OVERWRITING_WRITE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


# --------------------------------------------------------------------------------------------
# Weather forecast (made up, deterministic)
# --------------------------------------------------------------------------------------------

_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


class _Condition(NamedTuple):
    label: str
    frozen_label: str
    min_precipitation_pct: int
    max_precipitation_pct: int


_CONDITIONS = (
    _Condition("sunny", "sunny", 0, 10),
    _Condition("partly cloudy", "partly cloudy", 5, 25),
    _Condition("overcast", "overcast", 15, 40),
    _Condition("fog", "freezing fog", 10, 30),
    _Condition("light rain", "light snow", 50, 75),
    _Condition("rain showers", "snow showers", 60, 90),
    _Condition("thunderstorms", "heavy snow", 70, 95),
)


class WeatherForecast(BaseModel):
    """A made-up forecast for one city and day; the same inputs always give the same forecast."""

    city: str = Field(
        description="The city as asked for, whitespace tidied; all-lowercase names are title-cased."
    )
    day: str = Field(
        description="The day, normalized: 'today', 'tomorrow', a weekday such as 'Monday', "
        "or an ISO date such as '2026-05-01'."
    )
    condition: str = Field(description="Sky and precipitation, e.g. 'light rain'.")
    high_c: int = Field(description="Daytime high in degrees Celsius.")
    low_c: int = Field(description="Overnight low in degrees Celsius.")
    precipitation_chance_pct: int = Field(ge=0, le=100, description="Chance of precipitation, percent.")
    wind_kph: int = Field(ge=0, description="Average wind speed in km/h.")
    summary: str = Field(description="The forecast as one readable sentence.")
    source: DemoSource = Field(
        description="Where the data comes from: always made-up demo data, never a real forecast."
    )


def _normalize_day(day: str) -> str:
    """Return the canonical spelling of ``day``.

    Raises:
        ToolError: ``day`` is not 'today', 'tomorrow', a weekday name (or its three-letter
            abbreviation), or an ISO 8601 date.
    """
    cleaned = day.strip()
    key = cleaned.lower()
    if key in ("today", "tomorrow"):
        return key
    for weekday in _WEEKDAYS:
        if key in (weekday, weekday[:3]):
            return weekday.capitalize()
    try:
        return date.fromisoformat(cleaned).isoformat()
    except ValueError:
        raise ToolError(
            f"Unknown day {day!r}. Use 'today', 'tomorrow', a weekday name such as 'Monday', "
            "or an ISO date such as '2026-05-01'."
        ) from None


def _temperature_range(low_c: int, high_c: int) -> str:
    # An en dash between two numbers reads as a minus sign once the low is negative.
    separator = " to " if low_c < 0 else "–"
    return f"{low_c}{separator}{high_c} °C"


def get_weather_forecast(
    city: Annotated[
        str,
        Field(min_length=1, max_length=100, description="City name, e.g. 'Beijing' or 'New York'."),
    ],
    day: Annotated[
        str,
        Field(
            max_length=40,
            description="'today', 'tomorrow', a weekday name such as 'Monday', "
            "or an ISO date such as '2026-05-01'. Defaults to 'today'.",
        ),
    ] = "today",
) -> WeatherForecast:
    """Return a deterministic, made-up forecast for ``city`` on ``day``.

    The forecast is derived from a SHA-256 digest of the case-folded city and the normalized
    day, so it is stable across processes and runs (unlike ``hash()``), and "today" is a label,
    not a date: it gives the same forecast on every calendar day.

    Raises:
        ToolError: ``city`` is blank, or ``day`` is not a recognised day (see ``_normalize_day``).
    """
    city_name = " ".join(city.split())
    if not city_name:
        raise ToolError("The city name is empty. Pass a city such as 'Beijing'.")
    if city_name.islower():
        city_name = city_name.title()
    normalized_day = _normalize_day(day)

    digest = hashlib.sha256(f"{city_name.casefold()}|{normalized_day.lower()}".encode()).digest()
    condition = _CONDITIONS[digest[0] % len(_CONDITIONS)]
    high_c = -5 + digest[1] % 38
    low_c = high_c - (3 + digest[2] % 8)
    steps = (condition.max_precipitation_pct - condition.min_precipitation_pct) // 5 + 1
    precipitation = condition.min_precipitation_pct + 5 * (digest[3] % steps)
    wind_kph = 3 + digest[4] % 35 + (12 if condition.label == "thunderstorms" else 0)
    label = condition.frozen_label if high_c <= 1 else condition.label

    when = normalized_day if normalized_day in ("today", "tomorrow") else f"on {normalized_day}"
    summary = (
        f"{city_name} {when}: {label}, {_temperature_range(low_c, high_c)}, "
        f"{precipitation}% chance of precipitation, wind {wind_kph} km/h."
    )
    return WeatherForecast(
        city=city_name,
        day=normalized_day,
        condition=label,
        high_c=high_c,
        low_c=low_c,
        precipitation_chance_pct=precipitation,
        wind_kph=wind_kph,
        summary=summary,
        source=DEMO_SOURCE,
    )


# --------------------------------------------------------------------------------------------
# Calculator (an AST walker; never eval)
# --------------------------------------------------------------------------------------------

Number = int | float

_MAX_EXPRESSION_LENGTH = 500
_MAX_EXPONENT = 1000
# About 1000 decimal digits: keeps every step fast and the answer printable (CPython refuses
# to turn integers above 4300 digits into text).
_MAX_INTEGER_BITS = 3322

_BINARY_OPERATORS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY_OPERATORS: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _round(value: Number, digits: Number = 0) -> Number:
    if not isinstance(digits, int):
        raise ToolError("round() takes a whole number of digits, e.g. round(2.345, 2).")
    return round(value) if digits == 0 else round(value, digits)


_FUNCTIONS: dict[str, tuple[Callable[..., Number], tuple[int, ...]]] = {
    "abs": (abs, (1,)),
    "round": (_round, (1, 2)),
    "sqrt": (math.sqrt, (1,)),
    "floor": (math.floor, (1,)),
    "ceil": (math.ceil, (1,)),
}
_CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

_ALLOWED = (
    "numbers, + - * / // % **, parentheses, the functions "
    + ", ".join(_FUNCTIONS)
    + " and the constants "
    + ", ".join(_CONSTANTS)
)


def _checked(value: object) -> Number:
    """Return ``value`` if it is a finite real number of printable size.

    Raises:
        ToolError: it is not a real number, is infinite or NaN, or is an integer too large.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError("The result is not a real number.")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("The result is too large to represent.")
    if isinstance(value, int) and value.bit_length() > _MAX_INTEGER_BITS:
        raise ToolError("The result is too large (more than about 1000 digits).")
    return value


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > _MAX_EXPONENT:
        raise ToolError(f"The exponent {exponent} is too large (the limit is {_MAX_EXPONENT}).")
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0:
        # Refuse before computing when even a lower bound on the result's size is too big.
        if (abs(base).bit_length() - 1) * exponent > _MAX_INTEGER_BITS:
            raise ToolError("The result is too large (more than about 1000 digits).")
    return _checked(base**exponent)


def _evaluate(node: ast.expr) -> Number:
    """Evaluate one node of an arithmetic expression tree.

    Raises:
        ToolError: the node is not arithmetic, or evaluating it fails.
        ZeroDivisionError, OverflowError: left for ``calculate`` to explain.
    """
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ToolError(f"{ast.unparse(node)} is not a number. Allowed: {_ALLOWED}.")
        return _checked(node.value)
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _power(left, right)
        binary = _BINARY_OPERATORS.get(type(node.op))
        if binary is not None:
            return _checked(binary(left, right))
    if isinstance(node, ast.UnaryOp):
        unary = _UNARY_OPERATORS.get(type(node.op))
        if unary is not None:
            return _checked(unary(_evaluate(node.operand)))
    if isinstance(node, ast.Name):
        if node.id in _CONSTANTS:
            return _CONSTANTS[node.id]
        raise ToolError(f"Unknown name {node.id!r}. Allowed: {_ALLOWED}.")
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        if node.func.id not in _FUNCTIONS:
            raise ToolError(f"Unknown function {node.func.id!r}. Allowed: {_ALLOWED}.")
        function, arities = _FUNCTIONS[node.func.id]
        if len(node.args) not in arities:
            expected = " or ".join(str(arity) for arity in arities)
            raise ToolError(f"{node.func.id}() takes {expected} argument(s), got {len(node.args)}.")
        arguments = [_evaluate(argument) for argument in node.args]
        try:
            return _checked(function(*arguments))
        except ValueError as exc:
            raise ToolError(f"{node.func.id}() cannot take {ast.unparse(node.args[0])}: {exc}.") from None
    raise ToolError(f"Unsupported expression {ast.unparse(node)!r}. Allowed: {_ALLOWED}.")


def calculate(
    expression: Annotated[
        str,
        Field(
            min_length=1,
            max_length=_MAX_EXPRESSION_LENGTH,
            description="An arithmetic expression, e.g. '(3 + 4) * 2 ** 3' or 'sqrt(2) / 2'.",
        ),
    ],
) -> Number:
    """Evaluate an arithmetic expression without ``eval``, by walking its syntax tree.

    Integers stay exact; ``/`` gives a float as in Python.

    Raises:
        ToolError: the expression does not parse, uses anything beyond plain arithmetic,
            divides by zero, has an exponent above 1000, or its result is not a finite real
            number of at most about 1000 digits.
    """
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"Could not parse {expression!r}: {exc.msg}. Allowed: {_ALLOWED}.") from None
    try:
        return _evaluate(tree.body)
    except ZeroDivisionError:
        raise ToolError(f"Division by zero in {expression!r}.") from None
    except OverflowError:
        raise ToolError(f"The result of {expression!r} is too large to represent.") from None
    except RecursionError:
        raise ToolError(f"{expression!r} is nested too deeply.") from None


# --------------------------------------------------------------------------------------------
# Unit conversion
# --------------------------------------------------------------------------------------------


class _Unit(NamedTuple):
    """A unit as an affine map onto its dimension's base unit: base = value * scale + offset."""

    symbol: str
    dimension: str
    scale: float
    offset: float = 0.0


# (unit, aliases). Base units: metre, kilogram, kelvin, litre, metre per second. Volume units
# are US customary.
_UNIT_TABLE: tuple[tuple[_Unit, tuple[str, ...]], ...] = (
    (_Unit("mm", "length", 0.001), ("millimeter", "millimeters", "millimetre", "millimetres")),
    (_Unit("cm", "length", 0.01), ("centimeter", "centimeters", "centimetre", "centimetres")),
    (_Unit("m", "length", 1.0), ("meter", "meters", "metre", "metres")),
    (_Unit("km", "length", 1000.0), ("kilometer", "kilometers", "kilometre", "kilometres")),
    (_Unit("in", "length", 0.0254), ("inch", "inches", '"')),
    (_Unit("ft", "length", 0.3048), ("foot", "feet", "'")),
    (_Unit("yd", "length", 0.9144), ("yard", "yards")),
    (_Unit("mi", "length", 1609.344), ("mile", "miles")),
    (_Unit("nmi", "length", 1852.0), ("nautical mile", "nautical miles")),
    (_Unit("mg", "mass", 1e-6), ("milligram", "milligrams", "milligramme", "milligrammes")),
    (_Unit("g", "mass", 0.001), ("gram", "grams", "gramme", "grammes")),
    (_Unit("kg", "mass", 1.0), ("kilogram", "kilograms", "kilo", "kilos", "kilogramme", "kilogrammes")),
    (_Unit("t", "mass", 1000.0), ("tonne", "tonnes", "metric ton", "metric tons")),
    (_Unit("oz", "mass", 0.028349523125), ("ounce", "ounces")),
    (_Unit("lb", "mass", 0.45359237), ("lbs", "pound", "pounds")),
    (_Unit("st", "mass", 6.35029318), ("stone", "stones")),
    (_Unit("°C", "temperature", 1.0, 273.15), ("c", "celsius", "degc", "centigrade")),
    (_Unit("°F", "temperature", 5 / 9, 273.15 - 32 * 5 / 9), ("f", "fahrenheit", "degf")),
    (_Unit("K", "temperature", 1.0), ("k", "kelvin", "kelvins")),
    (_Unit("mL", "volume", 0.001), ("ml", "milliliter", "milliliters", "millilitre", "millilitres")),
    (_Unit("L", "volume", 1.0), ("l", "liter", "liters", "litre", "litres")),
    (_Unit("m³", "volume", 1000.0), ("m3", "cubic meter", "cubic meters", "cubic metre", "cubic metres")),
    (_Unit("fl oz", "volume", 0.0295735295625), ("floz", "fluid ounce", "fluid ounces")),
    (_Unit("cup", "volume", 0.2365882365), ("cups",)),
    (_Unit("pt", "volume", 0.473176473), ("pint", "pints")),
    (_Unit("qt", "volume", 0.946352946), ("quart", "quarts")),
    (_Unit("gal", "volume", 3.785411784), ("gallon", "gallons")),
    (_Unit("m/s", "speed", 1.0), ("mps", "meter per second", "meters per second", "metres per second")),
    (_Unit("km/h", "speed", 1 / 3.6), ("kph", "kmh", "kmph", "kilometers per hour", "kilometres per hour")),
    (_Unit("mph", "speed", 0.44704), ("mi/h", "miles per hour")),
    (_Unit("kn", "speed", 0.514444), ("kt", "knot", "knots")),
    (_Unit("ft/s", "speed", 0.3048), ("fps", "feet per second")),
)


def _unit_key(text: str) -> str:
    # "°C", "degrees Celsius" and "  Celsius " all meet at "celsius" or "c".
    words = text.lower().replace("°", " ").split()
    if words and words[0] in ("degree", "degrees", "deg"):
        words = words[1:]
    return " ".join(words)


_UNITS_BY_KEY: dict[str, _Unit] = {
    _unit_key(name): unit for unit, aliases in _UNIT_TABLE for name in (unit.symbol, *aliases)
}


def _known_units() -> str:
    by_dimension: dict[str, list[str]] = {}
    for unit, _aliases in _UNIT_TABLE:
        by_dimension.setdefault(unit.dimension, []).append(unit.symbol)
    return "; ".join(f"{dimension}: {', '.join(symbols)}" for dimension, symbols in by_dimension.items())


def _find_unit(name: str) -> _Unit:
    """Return the unit ``name`` spells (symbol or alias, any case, with or without "°").

    Raises:
        ToolError: no known unit is spelled that way; the message lists the known units.
    """
    unit = _UNITS_BY_KEY.get(_unit_key(name))
    if unit is None:
        raise ToolError(f"Unknown unit {name!r}. Known units — {_known_units()}.")
    return unit


def _format_number(value: float) -> str:
    """Format ``value`` with six significant digits, in plain notation where that stays short."""
    if value == 0:
        return "0"
    if 1e-4 <= abs(value) < 1e15:
        decimals = max(0, 5 - math.floor(math.log10(abs(value))))
        text = f"{value:.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    return f"{value:.6g}"


def convert_units(
    value: Annotated[float, Field(allow_inf_nan=False, description="The number to convert, e.g. 10.")],
    from_unit: Annotated[
        str, Field(max_length=40, description="The unit of value, e.g. 'km', 'miles', '°C', 'lb', 'mph'.")
    ],
    to_unit: Annotated[
        str, Field(max_length=40, description="The unit to convert to; it must measure the same thing.")
    ],
) -> str:
    """Convert ``value`` between two units of the same dimension; return e.g. "10 km = 6.21371 mi".

    Raises:
        ToolError: a unit is unknown, the units measure different things (length vs mass), or
            a temperature is below absolute zero.
    """
    source, target = _find_unit(from_unit), _find_unit(to_unit)
    if source.dimension != target.dimension:
        raise ToolError(
            f"Cannot convert {source.symbol} ({source.dimension}) to {target.symbol} "
            f"({target.dimension}): both units must measure the same thing."
        )
    base = value * source.scale + source.offset
    if source.dimension == "temperature" and base < 0:
        raise ToolError(f"{_format_number(value)} {source.symbol} is below absolute zero.")
    result = (base - target.offset) / target.scale
    return f"{_format_number(value)} {source.symbol} = {_format_number(result)} {target.symbol}"


# --------------------------------------------------------------------------------------------
# Notes (in the memory of this server process)
# --------------------------------------------------------------------------------------------

_MAX_NOTES = 100
_MAX_TITLE_LENGTH = 100
_MAX_NOTE_LENGTH = 10_000


class _Note(NamedTuple):
    title: str
    text: str


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


class Notebook:
    """Notes kept in memory for the life of the server process.

    Titles are matched case-insensitively and keep the spelling they were last written with.
    The methods are registered as tools; MCPServer runs synchronous tools on worker threads,
    so every access holds a lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._notes: dict[str, _Note] = {}

    def write_note(
        self,
        title: Annotated[
            str,
            Field(min_length=1, max_length=_MAX_TITLE_LENGTH, description="A short title, e.g. 'Shopping'."),
        ],
        text: Annotated[str, Field(max_length=_MAX_NOTE_LENGTH, description="The note's text.")],
    ) -> str:
        """Store ``text`` under ``title``, replacing a note with the same title.

        Raises:
            ToolError: the title is blank, or the notebook is full.
        """
        clean_title = " ".join(title.split())
        if not clean_title:
            raise ToolError("The note title is empty. Pass a short title such as 'Shopping'.")
        key = clean_title.casefold()
        with self._lock:
            replaced = key in self._notes
            if not replaced and len(self._notes) >= _MAX_NOTES:
                raise ToolError(f"The notebook is full ({_MAX_NOTES} notes); overwrite an existing title.")
            self._notes[key] = _Note(clean_title, text)
            count = len(self._notes)
        verb = "Replaced" if replaced else "Saved"
        return (
            f"{verb} note {clean_title!r} ({_count(len(text), 'character')}). {_count(count, 'note')} stored."
        )

    def list_notes(self) -> str:
        """Return the titles of all notes with their lengths, oldest first, one per line."""
        with self._lock:
            notes = list(self._notes.values())
        if not notes:
            return "No notes yet. Use write_note to add one."
        lines = [f"{_count(len(notes), 'note')}:"]
        lines += [f"- {note.title} ({_count(len(note.text), 'character')})" for note in notes]
        return "\n".join(lines)

    def read_note(
        self,
        title: Annotated[
            str,
            Field(max_length=_MAX_TITLE_LENGTH, description="The title of the note; case does not matter."),
        ],
    ) -> str:
        """Return the text of the note titled ``title``.

        Raises:
            ToolError: there is no such note; the message names the titles that exist.
        """
        key = " ".join(title.split()).casefold()
        with self._lock:
            note = self._notes.get(key)
            titles = [existing.title for existing in self._notes.values()]
        if note is not None:
            return note.text
        if not titles:
            raise ToolError(f"No note titled {title!r}: there are no notes yet. Use write_note first.")
        raise ToolError(f"No note titled {title!r}. Existing notes: {', '.join(map(repr, titles))}.")


# --------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------


def build_server() -> MCPServer:
    """Return a new demo server with its own, empty notebook.

    Each call gives independent state, so tests can start clean; the process-wide instance is
    the module-level ``server``.
    """
    mcp_server = MCPServer(
        SERVER_NAME,
        title="Tool-Call Inspector demo server",
        version=SERVER_VERSION,
        instructions=INSTRUCTIONS,
    )
    mcp_server.add_tool(
        get_weather_forecast,
        title="Weather forecast (demo data)",
        description=(
            "Get a weather forecast for a city: condition, high and low in °C, chance of "
            "precipitation and wind. Use it when the user asks about the weather or whether to "
            "expect rain. The data is MADE UP for demonstrations (stable for the same city and "
            "day), so tell the user it is demo data."
        ),
        annotations=_READ_ONLY,
    )
    mcp_server.add_tool(
        calculate,
        title="Calculator",
        description=(
            "Evaluate an arithmetic expression exactly and safely, e.g. '(3 + 4) * 2 ** 3' or "
            f"'sqrt(2) / 2'. Supports {_ALLOWED}. Use it for any arithmetic rather than "
            "computing by hand."
        ),
        annotations=_READ_ONLY,
        structured_output=True,
    )
    mcp_server.add_tool(
        convert_units,
        title="Unit converter",
        description=(
            "Convert a value between units of length, mass, temperature (°C, °F, K), volume "
            "(metric and US customary) or speed, e.g. 10 km to miles or 100 °F to °C. Accepts "
            "symbols and names such as 'km', 'kilometers', 'mi', 'miles', '°C', 'celsius'."
        ),
        annotations=_READ_ONLY,
        structured_output=False,
    )
    notebook = Notebook()
    mcp_server.add_tool(
        notebook.write_note,
        title="Write note",
        description=(
            "Save a short text note under a title, replacing any note with that title. Use it "
            "when the user asks you to remember or jot something down. Notes live in this "
            "server's memory until it restarts."
        ),
        annotations=_OVERWRITING_WRITE,
        structured_output=False,
    )
    mcp_server.add_tool(
        notebook.list_notes,
        title="List notes",
        description="List the titles of all saved notes. Use it before read_note if unsure of a title.",
        annotations=_READ_ONLY,
        structured_output=False,
    )
    mcp_server.add_tool(
        notebook.read_note,
        title="Read note",
        description="Read the text of a saved note by its title (case-insensitive).",
        annotations=_READ_ONLY,
        structured_output=False,
    )
    return mcp_server


server = build_server()


@functools.cache
def tool_names() -> tuple[str, ...]:
    """The names of the tools this server offers, read from its fixed catalogue without starting it.

    Listed on a thread of its own, so a caller inside a running event loop can ask too.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        tools = pool.submit(asyncio.run, build_server().list_tools()).result()
    return tuple(tool.name for tool in tools)


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the module-level ``server`` over stdio, or over Streamable HTTP with ``--http``."""
    parser = argparse.ArgumentParser(
        prog="python -m servers.demo_server",
        description="The Tool-Call Inspector's teaching MCP server.",
    )
    parser.add_argument("--http", action="store_true", help="serve Streamable HTTP at /mcp instead of stdio")
    parser.add_argument("--host", default="127.0.0.1", help="HTTP bind address (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8765, help="HTTP port (default: 8765)")
    args = parser.parse_args(argv)
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port, streamable_http_path="/mcp")
    else:
        server.run()


if __name__ == "__main__":
    main()

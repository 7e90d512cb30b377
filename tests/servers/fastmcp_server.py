"""A small stdio MCP server built with FastMCP (the ``fastmcp`` package), as many third-party
servers are: its tools' parameters are typed Python, which FastMCP turns into JSON Schema with
``format`` (email, date, date-time, uri), ``enum``, ``minimum``/``maximum``, ``default`` and
``examples``. The demo model's argument filling is tested against it. Run as
``python tests/servers/fastmcp_server.py``.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Annotated, Literal

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from pydantic import AnyUrl, EmailStr, Field

server = FastMCP("bookings")
# Rooms already taken, to answer a booking the way a real service refuses one.
BOOKED = {"Blue"}


@server.tool
def schedule_meeting(
    attendee: Annotated[EmailStr, Field(description="The e-mail address of the person to invite")],
    start: Annotated[datetime, Field(description="When the meeting starts, ISO 8601")],
    duration_minutes: Annotated[int, Field(ge=15, le=240, description="How long it lasts, in minutes")] = 30,
    room: Literal["Blue", "Green", "Red"] = "Blue",
) -> str:
    """Schedule a meeting with someone and book a room for it."""
    if room in BOOKED:
        raise ToolError(f"Invalid value for room: {room!r} is fully booked at {start.isoformat()}")
    return f"Meeting with {attendee} at {start.isoformat()} for {duration_minutes} minutes in {room}."


@server.tool
def plan_visit(
    day: Annotated[date, Field(description="The day of the visit")],
    website: Annotated[AnyUrl, Field(description="The page of the place to visit")],
    guests: Annotated[int, Field(ge=1, le=12, examples=[2, 4], description="How many people come")],
    language: Annotated[str, Field(examples=["en", "fr"], description="The language of the guide")],
) -> str:
    """Plan a guided visit of a place on a day."""
    return f"Visit of {website} on {day.isoformat()} for {guests} in {language}."


if __name__ == "__main__":
    server.run(show_banner=False)

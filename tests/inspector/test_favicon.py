"""The site has an icon: linked from every page, served as a static file, and /favicon.ico (which
browsers ask for on their own) leads to it, signed in or not."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

ICON = "/static/img/favicon.svg"


def _body(response: object) -> bytes:
    return b"".join(response) if getattr(response, "streaming", False) else response.content  # type: ignore[attr-defined]


def test_favicon_ico_leads_to_the_icon_without_signing_in(client: Client) -> None:
    response = client.get("/favicon.ico")

    assert response.status_code == 301
    assert response["Location"] == ICON


def test_the_icon_is_served_as_a_small_svg_image(client: Client) -> None:
    response = client.get(ICON)

    assert response.status_code == 200
    assert response["Content-Type"].startswith("image/svg+xml")
    body = _body(response)
    assert len(body) < 2048
    assert ET.fromstring(body).tag == "{http://www.w3.org/2000/svg}svg"
    assert finders.find("img/favicon.svg")


def test_every_page_links_the_icon(client: Client) -> None:
    page = client.get(reverse("login")).content.decode()

    assert f'<link rel="icon" href="{ICON}" type="image/svg+xml">' in page

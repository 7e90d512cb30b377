"""Chat templates this app ships: the demo model's (Qwen2.5-7B-Instruct's, Apache-2.0; source and
licence in this package's README.md).

The demo model's endpoint renders its requests with :data:`DEMO_CHAT_TEMPLATE` and reads the
text (:mod:`conversations.demo.prompt`); the demo profiles carry it, so the spliced prompt the
conversation page shows is the demo's own (docs/chat-templates.md §6). Data only: the file is
read once, at import.
"""

from __future__ import annotations

from pathlib import Path

DEMO_CHAT_TEMPLATE_FILE = Path(__file__).with_name("Qwen-Qwen2.5-7B-Instruct.jinja")
DEMO_CHAT_TEMPLATE = DEMO_CHAT_TEMPLATE_FILE.read_text(encoding="utf-8")
# Where a demo profile's prompt comes from: its source line on the page, and the argument mode
# (docs/chat-templates.md §3: parsed into objects, as vLLM does).
DEMO_CHAT_TEMPLATE_SOURCE = (
    "the demo model's chat template (Qwen2.5-7B-Instruct's), rendered as vLLM renders it: "
    "the demo reads this text"
)
# The tokenizer of the template's family: the demo counts the text it reads with it (the usage it
# reports), and the demo profiles count their spliced prompts with it, so the two agree.
DEMO_TOKENIZER = "qwen3"

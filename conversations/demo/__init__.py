"""The demo model: a fake provider, deterministic and offline, served over HTTP by this app.

It answers the OpenAI Chat Completions, OpenAI Responses, Anthropic Messages and Gemini wire
formats at ``/demo-model/``, so a class can run the real client code, the raw capture, the
parser, the validator and the repair loop with no API key and no network.

The rest of the app reaches it only over HTTP, as it reaches any real provider (the runner may
carry those requests in-process, through a WSGI transport, but they are the same HTTP requests):
nothing outside this package imports it except the URL configuration that mounts
:mod:`conversations.demo.urls`.
It lives inside ``conversations/`` because the top level of the repository is fixed (``manage.py``,
``pyproject.toml``, ``inspector``, ``conversations``, ``servers``, ``templates``, ``static``,
``tests``) and the demo is a stand-in for the providers the conversations app talks to.

Modules, in the order a request passes through them:

* :mod:`~conversations.demo.views`, :mod:`~conversations.demo.urls` — the HTTP endpoints: key
  check, body limits, simulated latency, streaming.
* the dialects — one :class:`~conversations.demo.base.Dialect` per wire format, each in its own
  module (``openai_chat``, ``openai_responses``, ``anthropic``, ``gemini``) over the contract and
  shared helpers of :mod:`~conversations.demo.base`; each format's view names its own.
* :mod:`~conversations.demo.model` — :func:`~conversations.demo.model.complete`, the one entry
  point: a Chat Completions request in, a reply out.
* :mod:`~conversations.demo.request` — validating the request as a real endpoint would.
* :mod:`~conversations.demo.conventions` — which format the reply must speak (native calls,
  structured output, or a text paradigm's convention read from the system prompt).
* :mod:`~conversations.demo.understanding` — reading the question: its facts and the best tool.
* :mod:`~conversations.demo.fit` — the description rule: whether the chosen tool's description
  fits the question.
* :mod:`~conversations.demo.arguments` — filling a tool's arguments from those facts.
* :mod:`~conversations.demo.scenarios` — the ``[demo:…]`` switches that make it misbehave.
* :mod:`~conversations.demo.replies` — deciding, repairing and writing the answer.
"""

// The host side of an MCP App (the io.modelcontextprotocol/ui extension; docs/mcp-apps.md):
// frame the tool's ui:// resource sandboxed without this page's origin, answer the JSON-RPC it
// speaks over postMessage, and post every message both ways to the server's transcript.
// An app viewed before is replayed: its tool calls are answered with what was recorded then
// (nothing is re-run, nothing recorded again) until the user presses "Re-run the app's tool
// calls", which reloads it live (each call a new recorded operation).
// Only messages whose source is that frame are read; what the app sends is untrusted and is
// only ever shown as text.
(function () {
  "use strict";

  const box = document.getElementById("mcp-app");
  const dataNode = document.getElementById("mcp-app-data");
  if (!box || !dataNode) return;
  const app = JSON.parse(dataNode.textContent);
  const csrf = (box.querySelector("input[name=csrfmiddlewaretoken]") || {}).value || "";
  const status = document.getElementById("mcp-app-status");
  const holder = document.getElementById("mcp-app-frame");
  const notes = document.getElementById("mcp-app-notes");

  const PROTOCOL = "2026-01-26";
  const MESSAGE_CHARS = 63800; // servers.mcp_apps.MESSAGE_CHARS less room for the cut marker
  const BATCH_CHARS = 1000000; // one post stays well under the server's request size limit
  const BATCH_MESSAGES = 100;
  const RECORD_AT_MOST = 2000; // as servers.mcp_apps.MESSAGES_PER_OPERATION
  const NOTES_AT_MOST = 50;
  const HEIGHT = { min: 40, max: 3000 };

  let frame = null;
  let opened = null;
  let toolDataSent = false;
  let recorded = 0;
  // While replaying: the recorded calls not yet answered from (null: live).
  let replay = null;
  const queue = [];
  let sending = false;

  function note(text, link) {
    if (notes.children.length >= NOTES_AT_MOST) notes.firstElementChild.remove();
    const item = document.createElement("li");
    item.textContent = text;
    if (link) {
      item.append(" ");
      item.append(link);
    }
    notes.append(item);
  }

  function textOf(message) {
    try {
      const text = JSON.stringify(message);
      return text === undefined ? String(message) : text;
    } catch (error) {
      // Cycles, BigInts, nesting deeper than the engine's stack: kept as a description.
      return `[a message the host page could not write as JSON: ${String(error && error.message).slice(0, 200)}]`;
    }
  }

  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(body),
    });
    let answer = {};
    try {
      answer = await response.json();
    } catch (error) {
      answer = {};
    }
    return { ok: response.ok, status: response.status, body: answer };
  }

  async function flush() {
    if (sending) return;
    sending = true;
    while (queue.length) {
      const batch = [];
      let size = 0;
      while (queue.length && batch.length < BATCH_MESSAGES && (batch.length === 0 || size + queue[0].message.length < BATCH_CHARS)) {
        const item = queue.shift();
        size += item.message.length;
        batch.push(item);
      }
      try {
        await post(box.dataset.trafficUrl, { messages: batch });
      } catch (error) {
        note("Some app messages could not be recorded (the server did not answer).");
      }
    }
    sending = false;
  }

  function record(side, message) {
    if (replay) return; // a replay's messages were recorded when the app was first viewed
    recorded += 1;
    if (recorded > RECORD_AT_MOST) {
      if (recorded === RECORD_AT_MOST + 1) note(`The app sent more than ${RECORD_AT_MOST} messages: later ones are not recorded.`);
      return;
    }
    let text = textOf(message);
    if (text.length > MESSAGE_CHARS) {
      text = `${text.slice(0, MESSAGE_CHARS)}\n… cut by the host page: ${text.length} characters in all`;
    }
    const item = { side, message: text };
    if (message && typeof message === "object" && typeof message.method === "string") item.method = message.method.slice(0, 120);
    queue.push(item);
    flush();
  }

  function send(message) {
    record("host", message);
    if (frame && frame.contentWindow) frame.contentWindow.postMessage(message, "*");
  }

  function theme() {
    const chosen = document.documentElement.dataset.theme;
    if (chosen === "dark" || chosen === "light") return chosen;
    return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }

  function initializeResult(params) {
    return {
      protocolVersion: typeof params.protocolVersion === "string" ? params.protocolVersion.slice(0, 40) : PROTOCOL,
      hostInfo: { name: "tool-call-inspector", version: "1" },
      hostCapabilities: {
        openLinks: {},
        serverTools: {},
        logging: {},
        message: { text: {} },
        updateModelContext: { text: {} },
        sandbox: { permissions: {}, csp: (opened && opened.csp) || {} },
      },
      hostContext: {
        theme: theme(),
        displayMode: "inline",
        availableDisplayModes: ["inline"],
        platform: "web",
        locale: navigator.language,
        timeZone: Intl.DateTimeFormat().resolvedOptions().timeZone,
        containerDimensions: { maxHeight: HEIGHT.max },
        toolInfo: { tool: app.tool },
      },
    };
  }

  function sendToolData() {
    if (toolDataSent) return;
    toolDataSent = true;
    send({ jsonrpc: "2.0", method: "ui/notifications/tool-input", params: { arguments: app.arguments || {} } });
    send({ jsonrpc: "2.0", method: "ui/notifications/tool-result", params: app.result });
  }

  function replayed(name, args) {
    const wanted = textOf(args);
    let index = replay.findIndex((call) => call.name === name && textOf(call.arguments) === wanted);
    if (index < 0) index = replay.findIndex((call) => call.name === name);
    if (index < 0) {
      note(`The app called the tool ${name.slice(0, 100)}: not re-run (this view shows what was recorded; press “Re-run the app's tool calls” to call the server).`);
      throw new Error(`not re-run: ${name.slice(0, 100)} was not called when this app was recorded`);
    }
    const [call] = replay.splice(index, 1);
    note(`The app called the tool ${name.slice(0, 100)}: answered with the recorded result (not re-run).`);
    if (call.error) throw new Error(String(call.error).slice(0, 500));
    return call.result;
  }

  async function callTool(params) {
    const name = typeof params.name === "string" ? params.name : "";
    const args = params.arguments && typeof params.arguments === "object" && !Array.isArray(params.arguments) ? params.arguments : {};
    if (replay) return replayed(name, args);
    const answer = await post(box.dataset.callUrl, { name, arguments: args });
    const link = answer.body.operation ? Object.assign(document.createElement("a"), { href: answer.body.operation, textContent: "the call" }) : null;
    note(`The app called the tool ${name.slice(0, 100)}.`, link);
    if (!answer.ok || answer.body.result === null || answer.body.result === undefined) {
      throw new Error(String(answer.body.error || `the host could not call ${name} (HTTP ${answer.status})`).slice(0, 500));
    }
    return answer.body.result;
  }

  function blocksText(content) {
    const blocks = Array.isArray(content) ? content : [content];
    return blocks
      .map((block) => (block && typeof block === "object" && typeof block.text === "string" ? block.text : `[${block && block.type ? String(block.type).slice(0, 40) : "content"}]`))
      .join(" ")
      .slice(0, 2000);
  }

  function showLink(params) {
    let url = null;
    try {
      url = new URL(String(params.url));
    } catch (error) {
      url = null;
    }
    if (!url || (url.protocol !== "https:" && url.protocol !== "http:")) {
      note("The app asked to open a link that is not http(s): refused.");
      return false;
    }
    const link = Object.assign(document.createElement("a"), { href: url.href, textContent: url.href.slice(0, 300), target: "_blank", rel: "noopener noreferrer" });
    note("The app asked to open a link (not opened for you):", link);
    return true;
  }

  function resize(params) {
    const height = Number(params.height);
    if (!Number.isFinite(height)) return;
    const clamped = Math.round(Math.min(HEIGHT.max, Math.max(HEIGHT.min, height)));
    frame.style.height = `${clamped}px`;
    frame.dataset.height = String(clamped);
  }

  function handle(message) {
    if (!message || typeof message !== "object" || message.jsonrpc !== "2.0" || typeof message.method !== "string") return;
    const isRequest = typeof message.id === "string" || typeof message.id === "number";
    const params = message.params && typeof message.params === "object" ? message.params : {};
    const reply = (result) => { if (isRequest) send({ jsonrpc: "2.0", id: message.id, result }); };
    const fail = (code, text) => { if (isRequest) send({ jsonrpc: "2.0", id: message.id, error: { code, message: text } }); };
    switch (message.method) {
      case "ui/initialize":
        reply(initializeResult(params));
        break;
      case "ui/notifications/initialized":
        sendToolData();
        break;
      case "tools/call":
        callTool(params).then(reply, (error) => fail(-32603, error.message));
        break;
      case "ui/message":
        note(`The app sent a message for the model (this workbench has no model; it is kept in the transcript): ${blocksText(params.content)}`);
        reply({});
        break;
      case "ui/open-link":
        if (showLink(params)) reply({});
        else fail(-32602, "only http(s) links are opened");
        break;
      case "ui/notifications/size-changed":
        resize(params);
        break;
      case "ui/request-display-mode":
        reply({ mode: "inline" });
        break;
      case "ui/update-model-context":
      case "ping":
        reply({});
        break;
      case "notifications/message":
        break;
      default:
        fail(-32601, `the inspector's host does not support ${message.method.slice(0, 100)}`);
    }
  }

  window.addEventListener("message", (event) => {
    if (!frame || event.source !== frame.contentWindow) return;
    const message = event.data;
    record("app", message);
    try {
      handle(message);
    } catch (error) {
      note(`A message from the app could not be answered: ${String(error && error.message).slice(0, 200)}`);
    }
  });

  async function open() {
    let answer;
    try {
      answer = await post(box.dataset.openUrl, {});
    } catch (error) {
      status.textContent = "The app could not be loaded: the server did not answer.";
      return;
    }
    if (!answer.ok) {
      status.textContent = `The app could not be loaded: ${String(answer.body.error || `HTTP ${answer.status}`).slice(0, 500)}`;
      return;
    }
    opened = answer.body;
    if (opened.replay) {
      replay = Array.isArray(opened.recorded) ? opened.recorded.slice() : [];
      rerunButton();
    }
    load();
    if ((opened.permissions || []).length) note(`The app asked for permissions that are not granted: ${opened.permissions.join(", ")}.`);
    if ((opened.refused || []).length) note(`CSP entries that are not plain scheme://host sources were left out: ${opened.refused.join(" ")}.`);
  }

  function rerunButton() {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "button";
    button.id = "mcp-app-rerun";
    button.textContent = "Re-run the app's tool calls";
    button.addEventListener("click", () => {
      // Live from here on: the app is loaded again, its calls reach the server as new
      // operations and its messages are recorded.
      replay = null;
      toolDataSent = false;
      button.remove();
      load();
    });
    status.after(button);
  }

  function load() {
    if (frame) frame.remove();
    frame = document.createElement("iframe");
    // Scripts only: no same-origin (the app cannot reach this page, its cookies or the API),
    // no forms, no popups, no top navigation.
    frame.setAttribute("sandbox", "allow-scripts");
    frame.setAttribute("referrerpolicy", "no-referrer");
    frame.id = "mcp-app-iframe";
    frame.title = `The app of ${app.uri}`;
    frame.src = opened.view;
    holder.append(frame);
    status.textContent = replay
      ? "The app is loaded, replaying what was recorded when it was first viewed: its tool calls are answered from the record, not run again."
      : "The app is loaded.";
  }

  open();
})();

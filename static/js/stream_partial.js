// A streamed model reply, shown while it arrives. conversation_detail.js hands every websocket
// message of type "partial" to this file as an "inspector:partial" event on #conversation:
// {turn_id, step_id, text, calls: [{index, id, name, arguments}]}, each a snapshot of the reply
// so far. It is drawn in the step's "raw model response" cell, as text only (textContent: model
// and tool text never becomes markup). Partials are never stored: when the step is saved its
// row is re-rendered from the database and replaces the whole element, display included; a
// partial that comes after that (or for a row the page does not have) is dropped.
(function () {
  "use strict";

  var root = document.getElementById("conversation");
  if (!root) {
    return;
  }

  var shownIn = {}; // step id → the row element the display was drawn in

  function el(tag, className, text) {
    var node = document.createElement(tag);
    node.className = className;
    if (tag === "pre") {
      // A body scrolls: the keyboard must reach it (as every <pre> the server renders).
      node.tabIndex = 0;
    }
    if (text !== undefined) {
      node.textContent = text;
    }
    return node;
  }

  function box(row) {
    var existing = row.querySelector(".partial-stream");
    if (existing) {
      return existing;
    }
    var display = el("div", "partial-stream");
    display.setAttribute("aria-live", "polite");
    var head = el("p", "partial-head");
    head.appendChild(el("span", "spinner"));
    head.appendChild(document.createTextNode("streaming — the reply so far"));
    display.appendChild(head);
    display.appendChild(el("pre", "body plain partial-text"));
    display.appendChild(el("ol", "partial-calls"));
    var cell = row.querySelector(".exchange-pending .ex-response") || row.querySelector(".area-model");
    (cell || row).appendChild(display);
    return display;
  }

  function drawCall(list, call, position) {
    var item = list.children[position];
    if (!item) {
      item = el("li", "partial-call");
      var head = el("div", "partial-call-head");
      head.appendChild(el("code", "partial-name"));
      head.appendChild(el("span", "partial-id"));
      item.appendChild(head);
      item.appendChild(el("pre", "body plain partial-arguments"));
      list.appendChild(item);
    }
    item.querySelector(".partial-name").textContent = String(call.name || "");
    item.querySelector(".partial-id").textContent = call.id ? String(call.id) : "";
    item.querySelector(".partial-arguments").textContent = String(call.arguments || "");
  }

  function show(message) {
    var row = document.getElementById("step-" + message.step_id);
    if (!row) {
      return;
    }
    if (shownIn[message.step_id] && shownIn[message.step_id] !== row) {
      return; // the stored step has replaced the display: this partial came late
    }
    shownIn[message.step_id] = row;
    var display = box(row);
    // The reply is arriving: no "waiting for the model…" in the row while it streams (the row
    // may have been re-rendered with one since the display was drawn).
    row.querySelectorAll(".placeholder").forEach(function (placeholder) {
      if (placeholder.querySelector(".spinner")) {
        placeholder.hidden = true;
      }
    });
    var text = display.querySelector(".partial-text");
    text.textContent = String(message.text || "");
    text.hidden = !message.text;
    var list = display.querySelector(".partial-calls");
    var calls = Array.isArray(message.calls) ? message.calls : [];
    calls.forEach(function (call, position) {
      drawCall(list, call || {}, position);
    });
  }

  root.addEventListener("inspector:partial", function (event) {
    show(event.detail || {});
  });
})();

// The conversation page, live: a websocket says which row or turn changed and carries its
// server-rendered HTML (the same fragment templates as the page). On every (re)connect the
// page asks for everything changed since the newest thing it has seen, so nothing is lost
// while disconnected. Message formats: see inspector/fragments.py.
(function () {
  "use strict";

  var root = document.getElementById("conversation");
  if (!root) {
    return;
  }

  var BACKOFF_FIRST_MS = 1000;
  var BACKOFF_MAX_MS = 30000;
  // A row's updated_at is taken before its transaction commits, so a row can become visible
  // slightly after a newer-stamped one; catching up from a little earlier picks it up.
  // Re-sent rows replace themselves, so the overlap is harmless.
  var CATCH_UP_OVERLAP_MS = 5000;
  var FINISHED = ["done", "failed", "interrupted", "cancelled"];

  var wsPath = root.dataset.wsUrl;
  var rowsUrl = root.dataset.rowsUrl;
  var lastSeen = root.dataset.since || "";
  var indicator = document.getElementById("live-status");
  var turnsBox = document.getElementById("turns");
  var followUp = document.getElementById("follow-up");

  var socket = null;
  var attempt = 0;
  var reconnectTimer = null;
  // Rows that arrived before their turn's container: applied once the turn shell is in.
  var pendingRows = {};
  // Changes to a long turn's left-out rows that arrived while those rows were loading.
  var pendingEarlier = {};

  function setState(state, text) {
    if (indicator) {
      indicator.dataset.state = state;
      indicator.textContent = text;
    }
  }

  // Timestamps share one fixed format (UTC, microseconds), so they order as strings.
  function noteSeen(stamp) {
    if (stamp && stamp > lastSeen) {
      lastSeen = stamp;
    }
  }

  function catchUpFrom() {
    if (!lastSeen) {
      return "1970-01-01T00:00:00+00:00";
    }
    // Date.parse wants at most milliseconds.
    var ms = Date.parse(lastSeen.replace(/(\.\d{3})\d+/, "$1"));
    if (isNaN(ms)) {
      return lastSeen;
    }
    return new Date(ms - CATCH_UP_OVERLAP_MS).toISOString();
  }

  function fragment(html) {
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  // Keep what the reader opened: a re-rendered row would otherwise collapse it.
  function carryOpenDetails(oldEl, newEl) {
    oldEl.querySelectorAll("details[open][data-key]").forEach(function (details) {
      var twin = newEl.querySelector('details[data-key="' + CSS.escape(details.dataset.key) + '"]');
      if (twin) {
        twin.open = true;
      }
    });
  }

  function replaceIfNewer(oldEl, newEl) {
    if ((newEl.dataset.updatedAt || "") < (oldEl.dataset.updatedAt || "")) {
      return; // a late copy of something already shown in a newer state
    }
    carryOpenDetails(oldEl, newEl);
    carryLoadedCalls(oldEl, newEl);
    oldEl.replaceWith(newEl);
  }

  // A row of many calls shows its first and last few; the reader may have loaded some between
  // (each marked data-loaded). A re-rendered row keeps them, after its first few, and its
  // control then offers only the calls still not shown. A loaded call that the new row now
  // shows itself (its last few moved on) is dropped: the row's copy is the newer.
  function carryLoadedCalls(oldEl, newEl) {
    ["parsed", "tools"].forEach(function (part) {
      var loaded = oldEl.querySelectorAll('[data-loaded="' + part + '"]');
      var control = newEl.querySelector('.more-calls[data-part="' + part + '"]');
      if (!loaded.length || !control) {
        return;
      }
      var start = Number(control.dataset.start);
      var stop = Number(control.dataset.stop);
      loaded.forEach(function (item) {
        var index = Number(item.dataset.index);
        if (index < start || index >= stop) {
          return;
        }
        control.parentNode.insertBefore(item, control);
        start = Math.max(start, index + 1);
      });
      setCallsStart(control, start);
    });
  }

  function setCallsStart(control, start) {
    var stop = Number(control.dataset.stop);
    if (start >= stop) {
      control.remove();
      return;
    }
    control.dataset.start = String(start);
    control.dataset.url = control.dataset.url.replace(/([?&]start=)\d+/, "$1" + start);
    var left = control.querySelector(".calls-left");
    if (left) {
      left.textContent = String(stop - start);
    }
    var button = control.querySelector("button.load-calls");
    if (button) {
      button.textContent = "Show " + Math.min(Number(control.dataset.batch) || 100, stop - start) + " more";
    }
  }

  function insertBySeq(container, el) {
    var seq = Number(el.dataset.seq);
    var children = container.children;
    for (var i = 0; i < children.length; i++) {
      if (Number(children[i].dataset.seq) > seq) {
        container.insertBefore(el, children[i]);
        return;
      }
    }
    container.appendChild(el);
  }

  // The first row a long turn shows: the rows before it are left out until asked for.
  function firstShownSeq(earlier) {
    return Number(earlier.dataset.beforeSeq) || 0;
  }

  function applyRow(message) {
    var el = fragment(message.html);
    if (!el) {
      return;
    }
    var existing = document.getElementById("step-" + message.step_id);
    if (existing) {
      replaceIfNewer(existing, el);
      return;
    }
    var turn = document.getElementById("turn-" + message.turn_id);
    if (turn && turn.dataset.folded) {
      return; // a folded turn shows no rows: opening it loads them all, fresh
    }
    var container = turn && turn.querySelector(".rows");
    var earlier = container && container.querySelector(".earlier-steps");
    if (earlier && Number(el.dataset.seq) < firstShownSeq(earlier)) {
      // A row the page leaves out until asked: showing them loads them fresh. A change that
      // arrives while they load may be newer than what the server rendered: applied after.
      if (earlier.dataset.loading) {
        (pendingEarlier[message.turn_id] = pendingEarlier[message.turn_id] || []).push(message);
      }
      return;
    }
    if (!container) {
      (pendingRows[message.turn_id] = pendingRows[message.turn_id] || []).push(message);
      return;
    }
    insertBySeq(container, el);
  }

  function applyTurn(message) {
    var shell = fragment(message.html_shell);
    var turn = document.getElementById("turn-" + message.turn_id);
    if (!turn) {
      var unlisted = turnsBox.querySelector(".earlier-turns");
      if (shell && unlisted && Number(shell.dataset.seq) < Number(unlisted.dataset.beforeSeq)) {
        return; // a turn the page does not list yet: listing it loads it fresh
      }
      if (shell) {
        insertBySeq(turnsBox, shell);
      }
      // A turn first seen finished (it ended between two messages) is sealed too.
      if (FINISHED.indexOf(message.status) !== -1) {
        turnEnded();
      }
    } else {
      var status = document.getElementById("turn-status-" + message.turn_id);
      var fresh = fragment(message.html);
      var wasFinished = status && FINISHED.indexOf(status.dataset.status) !== -1;
      if (status && fresh) {
        replaceIfNewer(status, fresh);
      }
      // A turn that ends is sealed with its end: the record's badge verifies again.
      var now = document.getElementById("turn-status-" + message.turn_id);
      if (!wasFinished && now && FINISHED.indexOf(now.dataset.status) !== -1) {
        turnEnded();
      }
      // The header holds the tools offered, known only after the servers were listed.
      var meta = document.getElementById("turn-meta-" + message.turn_id);
      var freshMeta = shell && shell.querySelector("#turn-meta-" + message.turn_id);
      if (meta && freshMeta && message.updated_at >= (status ? status.dataset.updatedAt : "")) {
        carryOpenDetails(meta, freshMeta);
        meta.replaceWith(freshMeta);
      }
    }
    var waiting = pendingRows[message.turn_id];
    if (waiting) {
      delete pendingRows[message.turn_id];
      waiting.forEach(applyRow);
    }
    updateFollowUp();
  }

  // The follow-up form opens once the newest turn has finished.
  function updateFollowUp() {
    if (!followUp) {
      return;
    }
    var statuses = turnsBox.querySelectorAll(".turn-status");
    var newest = statuses.length ? statuses[statuses.length - 1].dataset.status : "done";
    var busy = FINISHED.indexOf(newest) === -1;
    followUp.classList.toggle("is-busy", busy);
    var button = followUp.querySelector("button[type=submit]");
    if (button) {
      button.disabled = busy;
    }
  }

  function apply(message) {
    if (message.type === "row") {
      applyRow(message);
    } else if (message.type === "turn") {
      applyTurn(message);
    } else if (message.type === "partial") {
      // A streamed reply so far (never stored): stream_partial.js draws it.
      root.dispatchEvent(new CustomEvent("inspector:partial", { detail: message }));
      return;
    } else if (message.type === "error") {
      console.warn("inspector:", message.message);
      return;
    } else if (message.type === "changed") {
      // Another process stored something (the embedded server hears no doorbell of it): ask for
      // what changed since the newest thing this page has seen.
      if (socket && socket.readyState === WebSocket.OPEN) {
        var since = catchUpFrom();
        socket.send(JSON.stringify({ type: "catch_up", since: since, view: pageView(since) }));
      }
      return;
    } else if (message.type === "caught_up") {
      // Everything the catch-up had for this page has arrived: what it shows is current.
      if (indicator) {
        indicator.dataset.caughtUp = "1";
      }
      root.dispatchEvent(new CustomEvent("inspector:caught-up", { detail: message }));
      return;
    } else {
      return;
    }
    noteSeen(message.updated_at);
  }

  // What the page shows, so the catch-up sends only what apply() would keep (the server's
  // side is inspector.fragments.PageView): per turn shown live, the first row it shows and the
  // version of its status and of each row it holds from `since` on (those are not sent again).
  // Folded turns are left out: nothing of them is shown live. Turns newer than `newest_seq`
  // are new to the page.
  function pageView(since) {
    var turns = {};
    var newest = 0;
    turnsBox.querySelectorAll(":scope > section.turn[data-turn-id]").forEach(function (turn) {
      newest = Math.max(newest, Number(turn.dataset.seq) || 0);
      if (turn.dataset.folded) {
        return;
      }
      var earlier = turn.querySelector(".earlier-steps");
      // While the left-out rows load, changes to them are held for after (pendingEarlier).
      var fromSeq = earlier && !earlier.dataset.loading ? firstShownSeq(earlier) : 0;
      var status = document.getElementById("turn-status-" + turn.dataset.turnId);
      var held = {};
      turn.querySelectorAll(".rows > [id^=step-]").forEach(function (row) {
        if (row.dataset.updatedAt && row.dataset.updatedAt >= since) {
          held[row.id.slice("step-".length)] = row.dataset.updatedAt;
        }
      });
      turns[turn.dataset.turnId] = {
        from_seq: fromSeq,
        held: held,
        status_at: (status && status.dataset.updatedAt) || null,
      };
    });
    return { turns: turns, newest_seq: newest };
  }

  // Without a websocket (a proxy that refuses upgrades) the page still moves: each retry
  // also fetches what changed over plain HTTP, with the page's view as the socket's catch-up
  // sends it (only what the page would apply comes back). A view too long for a URL is left
  // out, and so is one the server refuses: then everything changed in the window comes.
  var VIEW_URL_MAX = 6000;

  function fetchRows(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  }

  function catchUpOverHttp() {
    var since = catchUpFrom();
    var plain = rowsUrl + "?since=" + encodeURIComponent(since);
    var viewed = plain + "&view=" + encodeURIComponent(JSON.stringify(pageView(since)));
    var url = viewed.length <= VIEW_URL_MAX ? viewed : plain;
    return fetchRows(url)
      .then(function (response) {
        return response.status === 400 && url !== plain ? fetchRows(plain) : response;
      })
      .then(function (response) {
        return response.ok ? response.json() : { messages: [] };
      })
      .then(function (data) {
        (data.messages || []).forEach(apply);
      })
      .catch(function () {
        /* offline: the next retry tries again */
      });
  }

  function scheduleReconnect() {
    if (reconnectTimer !== null) {
      return;
    }
    var delay = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * Math.pow(2, attempt));
    attempt += 1;
    setState("offline", "offline — retrying in " + Math.round(delay / 1000) + " s");
    reconnectTimer = window.setTimeout(function () {
      reconnectTimer = null;
      catchUpOverHttp().then(connect);
    }, delay);
  }

  function connect() {
    if (!wsPath || !window.WebSocket || !location.host) {
      setState("offline", "live updates unavailable");
      return;
    }
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    setState("connecting", "connecting…");
    try {
      socket = new WebSocket(scheme + location.host + wsPath);
    } catch (error) {
      scheduleReconnect();
      return;
    }
    socket.addEventListener("open", function () {
      attempt = 0;
      setState("live", "live");
      var since = catchUpFrom();
      socket.send(JSON.stringify({ type: "catch_up", since: since, view: pageView(since) }));
    });
    socket.addEventListener("message", function (event) {
      var message;
      try {
        message = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      apply(message);
    });
    socket.addEventListener("close", function (event) {
      socket = null;
      if (indicator) {
        delete indicator.dataset.caughtUp;
      }
      if (event.code === 4401 || event.code === 4404) {
        setState("offline", event.code === 4401 ? "signed out — reload to sign in" : "conversation not found");
        return;
      }
      scheduleReconnect();
    });
  }

  // A body too big to show whole is a preview with a "load the full body" button; the
  // server renders the whole body (highlighted, escaped) and it replaces the preview.
  function loadFullBody(button) {
    var note = button.closest(".preview-more");
    var details = note && note.closest("details");
    var preview = details && details.querySelector("pre.body");
    var state = note.querySelector(".load-state");
    button.disabled = true;
    state.textContent = "loading…";
    fetch(note.dataset.bodyUrl, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("the server answered " + response.status);
        }
        return response.text();
      })
      .then(function (html) {
        var full = fragment(html);
        if (preview && full) {
          preview.replaceWith(full);
        }
        var badge = details.querySelector(".preview-badge");
        if (badge) {
          badge.remove();
        }
        note.remove();
      })
      .catch(function (error) {
        button.disabled = false;
        state.textContent = "could not load it: " + error.message;
      });
  }

  function fetchHtml(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } }).then(function (response) {
      if (!response.ok) {
        throw new Error("the server answered " + response.status);
      }
      return response.text();
    });
  }

  // An older turn is folded (its header only); opening it loads the whole turn block, the
  // same fragment the page renders for a turn it shows.
  function loadTurn(link, then) {
    var folded = link.closest(".turn-folded");
    var state = folded.querySelector(".load-state");
    if (folded.dataset.loading) {
      return;
    }
    folded.dataset.loading = "1";
    state.textContent = "loading…";
    fetchHtml(folded.dataset.turnUrl)
      .then(function (html) {
        var turn = fragment(html);
        if (turn) {
          folded.replaceWith(turn);
        }
        if (then) {
          then();
        }
      })
      .catch(function (error) {
        delete folded.dataset.loading;
        state.textContent = "could not load it: " + error.message;
      });
  }

  // A control's HTML (at its data-url) loads once, in front of it: each element of the answer
  // goes to ``place(element)``; then the control is removed. Resolves true once placed, false
  // when a load was already under way; on a failure the control says so and can be used again.
  function loadInFront(control, place) {
    var state = control.querySelector(".load-state");
    if (control.dataset.loading) {
      return Promise.resolve(false);
    }
    control.dataset.loading = "1";
    state.textContent = "loading…";
    return fetchHtml(control.dataset.url).then(
      function (html) {
        var template = document.createElement("template");
        template.innerHTML = html;
        Array.prototype.slice.call(template.content.children).forEach(place);
        control.remove();
        return true;
      },
      function (error) {
        delete control.dataset.loading;
        state.textContent = "could not load them: " + error.message;
        throw error;
      }
    );
  }

  // A long turn shows its last rows; the earlier ones load in place, as the page renders rows.
  function loadEarlier(button) {
    var earlier = button.closest(".earlier-steps");
    var turnId = earlier.closest(".turn").dataset.turnId;
    loadInFront(earlier, function (row) {
      var existing = document.getElementById(row.id);
      if (existing) {
        replaceIfNewer(existing, row);
      } else {
        earlier.parentNode.insertBefore(row, earlier);
      }
    })
      .then(function (placed) {
        if (placed) {
          var waiting = pendingEarlier[turnId] || [];
          delete pendingEarlier[turnId];
          waiting.forEach(applyRow);
        }
      })
      .catch(function () {
        delete pendingEarlier[turnId];
      });
  }

  // A row of many calls loads those between its first and last few a batch at a time, in
  // front of the control (which the batch replaces with its own when more remain). Each loaded
  // call is marked with its part and number, so a live re-render of the row keeps it.
  function loadCalls(button) {
    var control = button.closest(".more-calls");
    var part = control.dataset.part;
    var index = Number(control.dataset.start);
    loadInFront(control, function (item) {
      if (!item.classList.contains("more-calls")) {
        item.dataset.loaded = part;
        item.dataset.index = String(index);
        index += 1;
      }
      control.parentNode.insertBefore(item, control);
    }).catch(function () {});
  }

  // A long conversation's page lists its newest turns; the ones before load a batch at a time,
  // folded, in front of the control (which the batch replaces with its own when more remain).
  function loadEarlierTurns(button) {
    var earlier = button.closest(".earlier-turns");
    loadInFront(earlier, function (element) {
      if (!element.id || !document.getElementById(element.id)) {
        earlier.parentNode.insertBefore(element, earlier);
      }
    }).catch(function () {});
  }

  // The line diff of a spliced prompt against the previous one is computed when it is opened.
  function loadDiff(details) {
    var body = details.querySelector(".diff-body");
    if (!body || details.dataset.loaded || details.dataset.loading) {
      return;
    }
    details.dataset.loading = "1";
    var state = body.querySelector(".diff-state");
    if (state) {
      state.textContent = "loading the line diff…";
    }
    fetchHtml(details.dataset.diffUrl)
      .then(function (html) {
        body.innerHTML = html;
        details.dataset.loaded = "1";
      })
      .catch(function (error) {
        if (state) {
          state.textContent = "could not load it: " + error.message;
        }
      })
      .then(function () {
        delete details.dataset.loading;
      });
  }

  // The broken record's row may be in a folded turn: open the turn, then go to the row.
  function showBroken(link, event) {
    var target = document.getElementById(link.getAttribute("href").slice(1));
    var folded = link.dataset.turnId && document.getElementById("turn-" + link.dataset.turnId);
    if (target || !folded || !folded.dataset.folded) {
      return; // the browser follows the link
    }
    event.preventDefault();
    var opener = folded.querySelector("a.load-turn");
    if (opener) {
      loadTurn(opener, function () {
        var row = document.getElementById(link.getAttribute("href").slice(1)) || document.getElementById("turn-" + link.dataset.turnId);
        if (row) {
          row.scrollIntoView();
        }
      });
    }
  }

  // A turn that ends changes what the page derived from the whole record: the chain badge
  // verifies again, and a replay's differences from its original are read again (the section
  // of this same page, rendered afresh), all without a reload.
  function turnEnded() {
    loadChain(false);
    loadReplayDiff();
  }

  function loadReplayDiff() {
    var diff = document.getElementById("replay-diff");
    if (!diff) {
      return;
    }
    fetchHtml(location.pathname)
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("replay-diff");
        var current = document.getElementById("replay-diff");
        if (fresh && current) {
          var adopted = document.importNode(fresh, true);
          carryOpenDetails(current, adopted);
          current.replaceWith(adopted);
        }
      })
      .catch(function () {
        /* offline: a reload shows it */
      });
  }

  // The hash chain is verified after the page has painted (it re-hashes every exchange).
  function loadChain(onRequest) {
    var badge = document.getElementById("chain-badge");
    if (!badge || !badge.dataset.chainUrl || !(onRequest || badge.dataset.auto)) {
      return;
    }
    badge.textContent = "verifying the record…";
    fetchHtml(badge.dataset.chainUrl)
      .then(function (html) {
        var fresh = fragment(html);
        if (fresh) {
          badge.replaceWith(fresh);
        }
      })
      .catch(function (error) {
        badge.textContent = "could not verify the record: " + error.message;
      });
  }

  root.addEventListener("click", function (event) {
    var button = event.target.closest("button.load-full");
    if (button) {
      loadFullBody(button);
      return;
    }
    if (event.target.closest("button.verify-chain")) {
      loadChain(true);
      return;
    }
    var broken = event.target.closest("a.chain-broken");
    if (broken) {
      showBroken(broken, event);
      return;
    }
    var earlierTurns = event.target.closest("button.load-earlier-turns");
    if (earlierTurns) {
      loadEarlierTurns(earlierTurns);
      return;
    }
    var callsButton = event.target.closest("button.load-calls");
    if (callsButton) {
      loadCalls(callsButton);
      return;
    }
    var earlierButton = event.target.closest("button.load-earlier");
    if (earlierButton) {
      loadEarlier(earlierButton);
      return;
    }
    var turnLink = event.target.closest("a.load-turn");
    if (turnLink) {
      event.preventDefault();
      loadTurn(turnLink);
    }
  });

  // "toggle" does not bubble: listen in the capture phase. It also fires when a re-rendered
  // row re-opens a diff the reader had open, which loads it again.
  root.addEventListener(
    "toggle",
    function (event) {
      var details = event.target;
      if (details.open && details.matches && details.matches("details.prompt-diff[data-diff-url]")) {
        loadDiff(details);
      }
    },
    true
  );

  // Turn blocks that arrived live were rendered without a request, so their forms carry no
  // CSRF token: lend them the page's.
  root.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.querySelector("input[name=csrfmiddlewaretoken]") && root.dataset.csrfToken) {
      var token = document.createElement("input");
      token.type = "hidden";
      token.name = "csrfmiddlewaretoken";
      token.value = root.dataset.csrfToken;
      form.appendChild(token);
    }
  });

  connect();
  loadChain(false);
})();

// The comparison page, live. Each unfinished run is an ordinary conversation, so the page opens
// the conversation websocket of each one and uses it as a doorbell only: whatever a socket
// says, the page re-fetches the rendered columns (data-summary-url, the same
// _compare_columns.html the page was rendered with) and swaps them in. Socket open and every
// reconnect also re-fetch, so nothing is missed while disconnected; when every run has
// finished (data-finished on #compare-columns) the sockets are closed.
(function () {
  "use strict";

  var root = document.getElementById("comparison");
  if (!root) {
    return;
  }

  var REFRESH_DELAY_MS = 250; // many rows land at once: one fetch per burst
  var BACKOFF_FIRST_MS = 1000;
  var BACKOFF_MAX_MS = 30000;
  var CLOSE_FOR_GOOD = [4401, 4404];

  var summaryUrl = root.dataset.summaryUrl;
  var indicator = document.getElementById("live-status");
  var sockets = {}; // ws path → WebSocket
  var retries = {}; // ws path → attempts so far
  var refreshTimer = null;
  var fetching = false;
  var refetch = false;

  function setState(state, text) {
    if (indicator) {
      indicator.dataset.state = state;
      indicator.textContent = text;
    }
  }

  function columns() {
    return document.getElementById("compare-columns");
  }

  function allFinished() {
    var box = columns();
    return Boolean(box) && box.dataset.finished === "true";
  }

  function fragment(html) {
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  // Keep what the reader opened: the fresh columns would otherwise collapse it.
  function carryOpenDetails(oldEl, newEl) {
    oldEl.querySelectorAll("details[open][data-key]").forEach(function (details) {
      var twin = newEl.querySelector('details[data-key="' + CSS.escape(details.dataset.key) + '"]');
      if (twin) {
        twin.open = true;
      }
    });
  }

  function refreshNow() {
    if (fetching) {
      refetch = true;
      return;
    }
    fetching = true;
    fetch(summaryUrl, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        return response.ok ? response.text() : null;
      })
      .then(function (html) {
        var fresh = html && fragment(html);
        var current = columns();
        if (fresh && current) {
          carryOpenDetails(current, fresh);
          current.replaceWith(fresh);
        }
      })
      .catch(function () {
        /* offline: the next doorbell or retry fetches again */
      })
      .then(function () {
        fetching = false;
        if (refetch) {
          refetch = false;
          refreshNow();
        } else {
          follow();
        }
      });
  }

  function refresh() {
    if (refreshTimer === null) {
      refreshTimer = window.setTimeout(function () {
        refreshTimer = null;
        refreshNow();
      }, REFRESH_DELAY_MS);
    }
  }

  function showState() {
    if (allFinished()) {
      setState("done", "all runs finished");
      return;
    }
    var paths = Object.keys(sockets);
    var open = paths.filter(function (path) {
      return sockets[path] && sockets[path].readyState === WebSocket.OPEN;
    });
    if (paths.length && open.length === paths.length) {
      setState("live", "live");
    } else {
      setState("connecting", "connecting…");
    }
  }

  function connect(path) {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket;
    try {
      socket = new WebSocket(scheme + location.host + path);
    } catch (error) {
      retry(path);
      return;
    }
    sockets[path] = socket;
    socket.addEventListener("open", function () {
      retries[path] = 0;
      showState();
      refresh(); // catch up with what happened before the socket opened
    });
    socket.addEventListener("message", function (event) {
      var message = null;
      try {
        message = JSON.parse(event.data);
      } catch (error) {
        /* not ours to read: still a doorbell */
      }
      // A streamed reply so far changes nothing in the columns: only stored rows do.
      if (!message || message.type !== "partial") {
        refresh();
      }
    });
    socket.addEventListener("close", function (event) {
      if (sockets[path] !== socket) {
        return;
      }
      delete sockets[path];
      if (CLOSE_FOR_GOOD.indexOf(event.code) !== -1) {
        setState("offline", event.code === 4401 ? "signed out — reload to sign in" : "run not found");
        return;
      }
      retry(path);
    });
  }

  function retry(path) {
    if (allFinished()) {
      return;
    }
    var attempt = retries[path] || 0;
    var delay = Math.min(BACKOFF_MAX_MS, BACKOFF_FIRST_MS * Math.pow(2, attempt));
    retries[path] = attempt + 1;
    sockets[path] = null;
    setState("offline", "offline — retrying in " + Math.round(delay / 1000) + " s");
    window.setTimeout(function () {
      if (sockets[path] === null) {
        delete sockets[path];
        refreshNow(); // also keeps the page moving without websockets; follow() reconnects
      }
    }, delay);
  }

  // One socket per unfinished run; none once they have all finished.
  function follow() {
    var box = columns();
    if (!box) {
      return;
    }
    if (!window.WebSocket || !location.host) {
      setState("offline", "live updates unavailable — reload to refresh");
      return;
    }
    box.querySelectorAll("[data-ws-url]").forEach(function (head) {
      var path = head.dataset.wsUrl;
      var socket = sockets[path];
      if (head.dataset.finished === "true") {
        if (socket) {
          delete sockets[path];
          socket.close();
        }
      } else if (!(path in sockets)) {
        connect(path);
      }
    });
    showState();
  }

  follow();
})();

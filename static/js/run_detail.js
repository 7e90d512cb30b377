// An eval run's page, live. An eval run is many ordinary conversations at once, so instead of a
// websocket per conversation the page polls one small JSON document (data-progress-url: how
// many case runs have ended of how many, and whether the run is over: "done") about once a second,
// and moves the progress bar. When the run has finished it fetches the rendered results
// (data-results-url, the same _results.html the page is rendered with) once and swaps them in:
// the page is never reloaded. The server is the record; the page only asks it again.
(function () {
  "use strict";

  var root = document.getElementById("eval-run");
  if (!root) {
    return;
  }

  var POLL_MS = 1000;
  var BACKOFF_MAX_MS = 15000;

  var progressUrl = root.dataset.progressUrl;
  var resultsUrl = root.dataset.resultsUrl;
  var bar = document.getElementById("eval-progress");
  var label = document.getElementById("eval-progress-label");
  var indicator = document.getElementById("live-status");
  var failures = 0;

  function setState(state, text) {
    if (indicator) {
      indicator.dataset.state = state;
      indicator.textContent = text;
    }
  }

  function results() {
    return document.getElementById("eval-results");
  }

  function fragment(html) {
    var template = document.createElement("template");
    template.innerHTML = html.trim();
    return template.content.firstElementChild;
  }

  function show(progress) {
    var total = Math.max(Number(progress.total) || 0, 0);
    var ended = Math.min(Math.max(Number(progress.finished) || 0, 0), total);
    if (bar) {
      bar.max = total || 1;
      bar.value = total ? ended : progress.done ? 1 : 0;
    }
    if (label) {
      var percent = total ? Math.floor((100 * ended) / total) : progress.done ? 100 : 0;
      var running = Number(progress.running) || 0;
      label.textContent =
        ended + " of " + total + " case runs · " + percent + "%" + (running && !progress.done ? " · " + running + " running" : "");
    }
    root.dataset.status = String(progress.status || "");
  }

  function swapResults(status) {
    return fetch(resultsUrl, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (response) {
        return response.ok ? response.text() : Promise.reject(new Error(String(response.status)));
      })
      .then(function (html) {
        var fresh = fragment(html);
        var current = results();
        if (fresh && current) {
          current.replaceWith(fresh);
        }
        root.dataset.finished = "true";
        var cancel = document.getElementById("eval-cancel");
        if (cancel) {
          cancel.remove();
        }
        setState("done", status === "done" ? "run finished" : "run " + status);
      });
  }

  function poll() {
    fetch(progressUrl, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (response.status === 404) {
          setState("offline", "run not found");
          return null;
        }
        return response.ok ? response.json() : Promise.reject(new Error(String(response.status)));
      })
      .then(function (progress) {
        if (!progress) {
          return;
        }
        failures = 0;
        show(progress);
        if (progress.done) {
          return swapResults(String(progress.status));
        }
        setState("live", "running");
        window.setTimeout(poll, POLL_MS);
      })
      .catch(function () {
        failures += 1;
        var delay = Math.min(BACKOFF_MAX_MS, POLL_MS * Math.pow(2, failures));
        setState("offline", "offline — retrying in " + Math.round(delay / 1000) + " s");
        window.setTimeout(poll, delay);
      });
  }

  if (root.dataset.finished !== "true") {
    poll();
  }
})();

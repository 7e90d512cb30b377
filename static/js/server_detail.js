// One server's page: suggestions for prompt arguments and template variables, asked of the
// server with completion/complete when a field is focused or typed in.
(function () {
  "use strict";

  const page = document.getElementById("server");
  if (!page || !page.dataset.completions) return;
  const url = page.dataset.completeUrl;
  const csrf = (document.querySelector("input[name=csrfmiddlewaretoken]") || {}).value || "";
  const timers = new WeakMap();

  async function suggest(input) {
    const form = input.form;
    const context = {};
    form.querySelectorAll("input[data-argument]").forEach((other) => {
      if (other !== input && other.value) context[other.dataset.argument] = other.value;
    });
    const body = new URLSearchParams({
      ref_type: input.dataset.refType,
      ref: input.dataset.ref,
      argument: input.dataset.argument,
      value: input.value,
      context: JSON.stringify(context),
    });
    const response = await fetch(url, { method: "POST", body, headers: { "X-CSRFToken": csrf } });
    if (!response.ok) return;
    const data = await response.json();
    const list = document.getElementById(input.getAttribute("list"));
    if (!list) return;
    list.replaceChildren(...(data.values || []).map((value) => new Option(value, value)));
  }

  page.addEventListener("input", (event) => {
    const input = event.target;
    if (!(input instanceof HTMLInputElement) || !input.dataset.argument) return;
    window.clearTimeout(timers.get(input));
    timers.set(input, window.setTimeout(() => suggest(input), 350));
  });
  page.addEventListener("focusin", (event) => {
    const input = event.target;
    if (input instanceof HTMLInputElement && input.dataset.argument && !input.dataset.asked) {
      input.dataset.asked = "1";
      suggest(input);
    }
  });
})();

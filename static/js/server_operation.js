// An operation page: while it runs, poll its state and redraw its body (records arrive as the
// server sends them, a request as soon as it is sent, marked pending until answered); questions
// from the server (elicitation) get a small form; a sampling request held for review, its own.
(function () {
  "use strict";

  const box = document.getElementById("operation");
  if (!box) return;
  const stateUrl = box.dataset.stateUrl;
  let dirty = false;

  function field(name, schema, required) {
    const id = `elicit-${name}`;
    const wrap = document.createElement("div");
    wrap.className = "sf-field";
    const label = document.createElement("label");
    label.htmlFor = id;
    label.textContent = (schema.title || name) + (required ? " *" : "");
    wrap.append(label);
    if (schema.description) {
      const help = document.createElement("p");
      help.className = "help";
      help.textContent = schema.description;
      wrap.append(help);
    }
    let input;
    // Single select: enum (with legacy enumNames) or titled oneOf consts; multi-select: an array
    // whose items are such a choice.
    const many = schema.type === "array";
    const choice = many ? schema.items || {} : schema;
    const options = choice.enum
      ? choice.enum.map((value, i) => [value, (choice.enumNames || [])[i] || String(value)])
      : (choice.oneOf || choice.anyOf || []).filter((o) => "const" in o).map((o) => [o.const, o.title || String(o.const)]);
    if (options.length) {
      input = document.createElement("select");
      const chosen = new Set([].concat(schema.default === undefined ? [] : schema.default).map(String));
      if (many) input.multiple = true;
      else input.append(new Option("— choose —", ""));
      options.forEach(([value, text]) => {
        const option = new Option(text, String(value));
        option.selected = chosen.has(String(value));
        input.append(option);
      });
    } else if (schema.type === "boolean") {
      input = document.createElement("input");
      input.type = "checkbox";
      if (schema.default) input.checked = true;
    } else {
      input = document.createElement("input");
      const numeric = schema.type === "number" || schema.type === "integer";
      // The formats an elicitation may ask for, checked by the browser before sending (the
      // server checks them again); date-time has no input type with an offset: a pattern.
      input.type = numeric ? "number" : { email: "email", uri: "url", date: "date" }[schema.format] || "text";
      if (schema.format === "date-time") {
        input.pattern = "\\d{4}-\\d{2}-\\d{2}[Tt]\\d{2}:\\d{2}:\\d{2}(\\.\\d+)?([Zz]|[+\\-]\\d{2}:\\d{2})";
        input.placeholder = "2026-12-05T10:00:00Z";
      }
      if (typeof schema.minLength === "number") input.minLength = schema.minLength;
      if (typeof schema.maxLength === "number") input.maxLength = schema.maxLength;
      if (numeric) {
        // Without a step the browser allows only whole numbers and blocks 3.14 from being sent:
        // any number the schema allows must pass (its multipleOf when it has one).
        input.step = typeof schema.multipleOf === "number" ? String(schema.multipleOf) : schema.type === "integer" ? "1" : "any";
        if (typeof schema.minimum === "number") input.min = String(schema.minimum);
        if (typeof schema.maximum === "number") input.max = String(schema.maximum);
      }
      if (schema.default !== undefined) input.value = String(schema.default);
    }
    input.id = id;
    input.dataset.name = name;
    input.dataset.type = schema.type || "string";
    wrap.append(input);
    return wrap;
  }

  function bindQuestions() {
    box.querySelectorAll(".elicit-form").forEach((form) => {
      const fields = form.querySelector(".elicit-fields");
      const area = form.querySelector("textarea[name=content]");
      if (!fields || fields.dataset.bound) return;
      fields.dataset.bound = "1";
      let schema = {};
      try { schema = JSON.parse(fields.dataset.schema || "{}"); } catch (e) { schema = {}; }
      const required = new Set(schema.required || []);
      for (const [name, sub] of Object.entries(schema.properties || {})) fields.append(field(name, sub, required.has(name)));
      const write = () => {
        dirty = true;
        const value = {};
        fields.querySelectorAll("[data-name]").forEach((input) => {
          const type = input.dataset.type;
          if (input.type === "checkbox") value[input.dataset.name] = input.checked;
          else if (input.multiple) {
            const picked = [...input.selectedOptions].map((option) => option.value);
            if (picked.length) value[input.dataset.name] = picked;
          }
          else if (input.value === "") return;
          else if (type === "number" || type === "integer") value[input.dataset.name] = Number(input.value);
          else value[input.dataset.name] = input.value;
        });
        area.value = JSON.stringify(value);
      };
      fields.addEventListener("input", write);
      fields.addEventListener("change", write);
      area.addEventListener("input", () => { dirty = true; });
      write();
      dirty = false;
    });
  }

  async function poll() {
    if (box.dataset.finished === "true") return;
    try {
      const response = await fetch(stateUrl, { headers: { Accept: "application/json" } });
      if (response.ok) {
        const state = await response.json();
        const open = new Set([...box.querySelectorAll("details[open][data-key]")].map((d) => d.dataset.key));
        if (!dirty || state.finished) {
          box.innerHTML = state.html;
          box.querySelectorAll("details[data-key]").forEach((d) => { if (open.has(d.dataset.key)) d.open = true; });
          bindQuestions();
        } else {
          // An answer is being typed: keep its form, but the wire still shows each message as
          // it is sent (the pending call, the server's question, a progress notification).
          const fresh = document.createElement("template");
          fresh.innerHTML = state.html;
          const wire = fresh.content.getElementById("wire");
          const shown = box.querySelector("#wire");
          if (wire && shown) {
            shown.replaceWith(wire);
            wire.querySelectorAll("details[data-key]").forEach((d) => { if (open.has(d.dataset.key)) d.open = true; });
          }
        }
        if (state.finished) {
          box.dataset.finished = "true";
          window.location.reload();
          return;
        }
      }
    } catch (e) {
      // A dropped poll is retried on the next tick.
    }
    window.setTimeout(poll, 600);
  }

  // A sampling request under review: once the user edits it, polling keeps the form as typed.
  box.addEventListener("input", (event) => {
    if (event.target.closest && event.target.closest(".review-form")) dirty = true;
  });

  bindQuestions();
  window.setTimeout(poll, 300);
})();

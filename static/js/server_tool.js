// The tool page: a form generated from the tool's inputSchema writes the JSON arguments.
// The raw JSON textarea is what is posted; the server validates it against the schema.
(function () {
  "use strict";

  const root = JSON.parse(document.getElementById("input-schema").textContent || "{}") || {};
  const host = document.getElementById("schema-form");
  const raw = document.getElementById("id_arguments");
  const rawOnly = document.getElementById("raw-only");
  let counter = 0;

  function resolve(schema, depth) {
    if (!schema || typeof schema !== "object") return {};
    if (schema.$ref && depth < 20) {
      const path = schema.$ref.replace(/^#\//, "").split("/").map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
      let target = root;
      for (const part of path) target = target && target[part];
      const rest = Object.assign({}, schema);
      delete rest.$ref;
      return Object.assign({}, resolve(target, depth + 1), rest);
    }
    return schema;
  }

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key === "text") node.textContent = value;
      else if (key === "class") node.className = value;
      else node.setAttribute(key, value);
    }
    for (const child of children || []) if (child) node.append(child);
    return node;
  }

  function typeOf(schema) {
    if (Array.isArray(schema.type)) return schema.type.filter((t) => t !== "null");
    return schema.type ? [schema.type] : [];
  }

  // A union with null (type: [x, "null"], or anyOf/oneOf with a {type: null} branch) → nullable x.
  function nullable(schema) {
    if (Array.isArray(schema.type) && schema.type.includes("null")) {
      const rest = schema.type.filter((t) => t !== "null");
      if (rest.length === 1) return Object.assign({}, schema, { type: rest[0] });
    }
    for (const key of ["anyOf", "oneOf"]) {
      const branches = schema[key];
      if (Array.isArray(branches)) {
        const others = branches.filter((b) => resolve(b, 0).type !== "null");
        if (others.length === 1 && others.length < branches.length) {
          const merged = Object.assign({}, schema, resolve(others[0], 0));
          delete merged[key];
          return merged;
        }
      }
    }
    return null;
  }

  function jsonField(schema, id) {
    const area = el("textarea", { id, rows: "3", spellcheck: "false", placeholder: "JSON" });
    return {
      el: area,
      get() {
        if (area.value.trim() === "") return [false, undefined];
        try {
          area.classList.remove("sf-invalid");
          return [true, JSON.parse(area.value)];
        } catch (e) {
          area.classList.add("sf-invalid");
          return [false, undefined];
        }
      },
      set(value) { area.value = value === undefined ? "" : JSON.stringify(value, null, 2); },
    };
  }

  function build(schemaIn, id, required) {
    const schema = resolve(schemaIn, 0);
    const asNullable = nullable(schema);
    if (asNullable) {
      const inner = build(asNullable, id, required);
      const box = el("input", { type: "checkbox", class: "sf-null-box" });
      const label = el("label", { class: "sf-null" }, [box, " null"]);
      box.addEventListener("change", () => { inner.el.hidden = box.checked; });
      return {
        el: el("div", { class: "sf-row" }, [inner.el, label]),
        get() { return box.checked ? [true, null] : inner.get(); },
        set(value) { box.checked = value === null; inner.el.hidden = box.checked; if (value !== null) inner.set(value); },
      };
    }
    if ("const" in schema) {
      return { el: el("code", { text: JSON.stringify(schema.const) }), get: () => [true, schema.const], set() {} };
    }
    const types = typeOf(schema);
    if (Array.isArray(schema.enum)) {
      const select = el("select", { id }, [el("option", { value: "", text: required ? "— choose —" : "— unset —" })]);
      schema.enum.forEach((option, index) => select.append(el("option", { value: String(index), text: String(option) })));
      return {
        el: select,
        get() { return select.value === "" ? [false, undefined] : [true, schema.enum[Number(select.value)]]; },
        set(value) {
          const index = schema.enum.findIndex((o) => JSON.stringify(o) === JSON.stringify(value));
          select.value = index < 0 ? "" : String(index);
        },
      };
    }
    if (types.length !== 1) return jsonField(schema, id);
    const type = types[0];
    if (type === "string") {
      const long = (schema.maxLength || 0) > 200 || /text|content|body|query|code/i.test(id);
      const input = long ? el("textarea", { id, rows: "3" }) : el("input", { id, type: "text" });
      if (schema.format) input.setAttribute("placeholder", schema.format);
      if (schema.pattern) input.setAttribute("pattern", schema.pattern);
      return {
        el: input,
        get() { return input.value === "" && !input.dataset.touchedEmpty ? [false, undefined] : [true, input.value]; },
        set(value) { input.value = value === undefined ? "" : String(value); },
      };
    }
    if (type === "number" || type === "integer") {
      const input = el("input", { id, type: "number", step: type === "integer" ? "1" : "any" });
      if (schema.minimum !== undefined) input.setAttribute("min", schema.minimum);
      if (schema.maximum !== undefined) input.setAttribute("max", schema.maximum);
      return {
        el: input,
        get() { return input.value === "" ? [false, undefined] : [true, Number(input.value)]; },
        set(value) { input.value = value === undefined ? "" : String(value); },
      };
    }
    if (type === "boolean") {
      const select = el("select", { id }, [
        el("option", { value: "", text: "— unset —" }), el("option", { value: "true", text: "true" }), el("option", { value: "false", text: "false" }),
      ]);
      return {
        el: select,
        get() { return select.value === "" ? [false, undefined] : [true, select.value === "true"]; },
        set(value) { select.value = value === undefined ? "" : String(Boolean(value)); },
      };
    }
    if (type === "object") return objectField(schema, id);
    if (type === "array") return arrayField(schema, id);
    return jsonField(schema, id);
  }

  function labelled(name, schema, required, node, id) {
    const resolved = resolve(schema, 0);
    const typeText = resolved.type ? [].concat(resolved.type).join(" | ") : (resolved.anyOf || resolved.oneOf ? "union" : "any");
    const head = el("label", { class: "sf-label", for: id }, [
      el("span", { text: name }), required ? el("span", { class: "sf-required", text: "*", title: "required" }) : null,
      el("span", { class: "sf-type", text: typeText }),
    ]);
    const help = resolved.description ? el("p", { class: "sf-help", text: resolved.description }) : null;
    return el("div", { class: "sf-field", "data-name": name }, [head, help, node.el]);
  }

  function objectField(schema, id) {
    const properties = schema.properties || {};
    const required = new Set(schema.required || []);
    const names = Object.keys(properties);
    if (names.length === 0) return jsonField(schema, id);
    const children = {};
    const box = el("div", { class: "sf-object" });
    for (const name of names) {
      const childId = `${id}-${++counter}`;
      const node = build(properties[name], childId, required.has(name));
      children[name] = node;
      box.append(labelled(name, properties[name], required.has(name), node, childId));
    }
    return {
      el: box,
      get() {
        const value = {};
        let any = false;
        for (const [name, node] of Object.entries(children)) {
          const [present, item] = node.get();
          if (present) { value[name] = item; any = true; }
        }
        return [any, value];
      },
      set(value) {
        for (const [name, node] of Object.entries(children)) node.set(value && typeof value === "object" ? value[name] : undefined);
      },
    };
  }

  function arrayField(schema, id) {
    const itemSchema = resolve(schema.items || {}, 0);
    const list = el("div", { class: "sf-array" });
    const items = [];
    const add = el("button", { type: "button", class: "button", text: "+ add item" });
    function addItem(value) {
      const itemId = `${id}-${++counter}`;
      const node = build(itemSchema, itemId, true);
      const remove = el("button", { type: "button", class: "link-button", text: "remove" });
      const wrap = el("div", { class: "sf-item" }, [node.el, remove]);
      const entry = { node, wrap };
      remove.addEventListener("click", () => { items.splice(items.indexOf(entry), 1); wrap.remove(); sync(); });
      items.push(entry);
      list.append(wrap);
      if (value !== undefined) node.set(value);
    }
    add.addEventListener("click", () => { addItem(undefined); sync(); });
    return {
      el: el("div", {}, [list, add]),
      get() {
        if (items.length === 0) return [false, undefined];
        return [true, items.map((entry) => { const [present, v] = entry.node.get(); return present ? v : null; })];
      },
      set(value) {
        items.splice(0).forEach((entry) => entry.wrap.remove());
        if (Array.isArray(value)) value.forEach((v) => addItem(v));
      },
    };
  }

  function defaults(schema) {
    const resolved = resolve(schema, 0);
    if ("default" in resolved) return resolved.default;
    if (resolved.type === "object" && resolved.properties) {
      const value = {};
      let any = false;
      for (const [name, sub] of Object.entries(resolved.properties)) {
        const d = defaults(sub);
        if (d !== undefined) { value[name] = d; any = true; }
      }
      return any ? value : undefined;
    }
    return undefined;
  }

  const form = build(Object.assign({ type: "object" }, root), "arg", true);
  host.append(form.el);

  function sync() {
    if (rawOnly.checked) return;
    const [, value] = form.get();
    raw.value = JSON.stringify(value || {}, null, 2);
  }

  // Refused arguments stay exactly as typed (the form would drop or reshape what breaks the
  // schema): the raw JSON is what "send anyway" sends, until the user unticks hand-editing.
  if (document.getElementById("argument-errors")) rawOnly.checked = true;

  let initial;
  try { initial = JSON.parse(raw.value || "{}"); } catch (e) { initial = undefined; }
  if (initial && typeof initial === "object" && Object.keys(initial).length) {
    form.set(initial);
  } else {
    const d = defaults(root);
    if (d !== undefined) form.set(d);
  }
  sync();
  host.addEventListener("input", sync);
  host.addEventListener("change", sync);
  rawOnly.addEventListener("change", () => {
    host.querySelectorAll("input, select, textarea, button").forEach((node) => { node.disabled = rawOnly.checked; });
    if (rawOnly.checked) document.getElementById("raw-editor").open = true;
    else sync();
  });
  if (document.getElementById("argument-errors")) {
    document.getElementById("raw-editor").open = true;
    host.querySelectorAll("input, select, textarea, button").forEach((node) => { node.disabled = true; });
  }
})();

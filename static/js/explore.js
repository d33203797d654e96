/* The explorable lab: a control per parameter, and the model's tables and charts
 * redrawn as the learner moves one (course/explore.py, GET /course/<slug>/model.json).
 *
 * 1. Each parameter's text field (the form that works without JavaScript, and what
 *    "Run the lab" sends) gets a control that suits it: a slider beside the number
 *    for a bounded number, − and + for a small count or a seed, chips with remove
 *    buttons and an "add" box for a list, a select for a text with known choices.
 *    The text field stays the one truth: a control writes into it, and typing into
 *    it moves the control.
 * 2. A change asks the model after 150 ms of quiet; a newer change aborts the request
 *    in flight (AbortController) and only the latest answer is drawn. The answer for
 *    a parameter set is the same every time (ETag, max-age): the browser keeps it.
 * 3. The answer's charts and tables replace the previous ones in place, the cells
 *    that moved since the previous values marked (and read out as "was …"); one
 *    polite status line says how many moved. A wide table keeps its scroll position.
 * 4. A value the form refuses is marked on its field as Run marks it (400, nothing
 *    moves the focus); a set too costly without an account (403), past the
 *    minute's new sets (429) or waiting too long for a model run (503: both asked
 *    again after Retry-After) is said in the status line; the last answer stays.
 * 5. The panel's data-draws, data-fetch-ms and data-render-ms say when the latest
 *    answer was drawn and how long it took (the browser tests and bench/explore.py
 *    read them).
 */
(function () {
  "use strict";

  const DEBOUNCE_MS = 150;
  const BUSY_AFTER_MS = 120;

  const configNode = document.getElementById("explore-config");
  const form = document.getElementById("lab-form");
  const panel = document.querySelector("[data-explore]");
  if (!configNode || !form || !panel || !window.fetch || !window.AbortController) return;
  const config = JSON.parse(configNode.textContent);
  const output = panel.querySelector("[data-explore-output]");
  const status = panel.querySelector("[data-explore-status]");
  const hold = panel.querySelector("[data-explore-hold]");

  const controls = new Map(); // name -> {spec, input, sync()}
  let timer = null;
  let retryTimer = null;
  let busyTimer = null;
  let inflight = null; // {controller, query}
  let sequence = 0;
  let shown = null; // {key, query}
  let draws = 0;

  function node(tag, className, text) {
    const element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function squeeze(text) {
    return String(text).replace(/\s+/g, "");
  }

  // --- the controls ------------------------------------------------------------------
  function numberText(spec, value) {
    let number = Number(value);
    if (spec.minimum !== null && number < spec.minimum) number = spec.minimum;
    if (spec.maximum !== null && number > spec.maximum) number = spec.maximum;
    if (spec.integer) return String(Math.round(number));
    return String(Number(number.toFixed(6)));
  }

  function described(element, input) {
    const help = document.getElementById(`${input.id}_helptext`);
    if (help) element.setAttribute("aria-describedby", help.id);
  }

  function labelOf(field, input) {
    const label = field.querySelector(`label[for="${CSS.escape(input.id)}"]`);
    if (label && !label.id) label.id = `${input.id}_label`;
    return label;
  }

  function slider(spec, field, input) {
    const label = labelOf(field, input);
    const range = node("input", "explore-range");
    range.type = "range";
    range.id = `${input.id}_slider`;
    range.min = String(spec.low);
    range.max = String(spec.high);
    range.step = String(spec.step);
    if (label) range.setAttribute("aria-labelledby", label.id);
    described(range, input);
    const row = node("div", "explore-row explore-slider");
    input.replaceWith(row);
    row.append(input, range);
    input.classList.add("explore-number");
    range.addEventListener("input", () => {
      input.value = numberText(spec, range.value);
      range.setAttribute("aria-valuetext", input.value);
    });
    return () => {
      const text = input.value.trim() || spec.default;
      const value = Number(text);
      range.value = String(Number.isFinite(value) ? value : Number(spec.default));
      range.setAttribute("aria-valuetext", text);
    };
  }

  function stepper(spec, field, input) {
    const down = node("button", "btn btn-sm explore-step", "−");
    const up = node("button", "btn btn-sm explore-step", "+");
    down.type = up.type = "button";
    down.setAttribute("aria-label", `Decrease ${spec.name}`);
    up.setAttribute("aria-label", `Increase ${spec.name}`);
    const row = node("div", "explore-row explore-stepper");
    input.replaceWith(row);
    row.append(down, input, up);
    input.classList.add("explore-number");
    const move = (by) => {
      const current = Number(input.value.trim() || spec.default);
      if (!Number.isFinite(current)) return;
      input.value = numberText(spec, current + by);
      input.dispatchEvent(new Event("input", { bubbles: true }));
    };
    down.addEventListener("click", () => move(-1));
    up.addEventListener("click", () => move(1));
    input.addEventListener("keydown", (event) => {
      if (event.key === "ArrowUp" || event.key === "ArrowDown") {
        event.preventDefault();
        move(event.key === "ArrowUp" ? 1 : -1);
      }
    });
    return () => {};
  }

  function listValues(spec, text) {
    const raw = text.trim();
    if (raw === "") return listValues(spec, spec.default); // empty keeps the default
    if (raw.toLowerCase() === "none") return [];
    return raw.split(",").map((part) => part.trim()).filter((part) => part !== "");
  }

  function list(spec, field, input) {
    const label = labelOf(field, input);
    const box = node("div", "explore-list");
    const chips = node("ul", "explore-chips");
    chips.setAttribute("aria-label", `Values of ${spec.name}`);
    const add = node("input", "explore-add");
    add.type = "text";
    add.id = `${input.id}_add`;
    add.inputMode = "numeric";
    add.autocomplete = "off";
    add.placeholder = "add a value";
    described(add, input);
    const addButton = node("button", "btn btn-sm", "Add");
    addButton.type = "button";
    addButton.setAttribute("aria-label", `Add the value to ${spec.name}`);
    const row = node("div", "explore-row");
    row.append(add, addButton);
    box.append(chips, row);
    // The add box comes first among the field's inputs: Run's error marks land on it.
    input.before(box);
    input.hidden = true;
    if (label) {
      label.htmlFor = add.id;
      label.append(node("span", "sr-only", ", add a value"));
    }

    const write = (values) => {
      input.value = values.length ? values.join(",") : "none";
      input.dispatchEvent(new Event("input", { bubbles: true }));
      draw();
    };
    const draw = () => {
      const values = listValues(spec, input.value);
      chips.replaceChildren(
        ...values.map((value, index) => {
          const chip = node("li", "explore-chip");
          chip.appendChild(node("span", "", value));
          const remove = node("button", "explore-chip-remove", "×");
          remove.type = "button";
          remove.setAttribute("aria-label", `Remove ${value} from ${spec.name}`);
          remove.addEventListener("click", () => {
            const next = values.filter((_, at) => at !== index);
            write(next);
            const buttons = chips.querySelectorAll(".explore-chip-remove");
            (buttons[Math.min(index, buttons.length - 1)] || add).focus();
          });
          chip.appendChild(remove);
          return chip;
        }),
      );
      if (!values.length) chips.appendChild(node("li", "explore-chip-none muted small", "none"));
    };
    const take = () => {
      const value = add.value.trim();
      if (!value) return;
      add.value = "";
      write([...listValues(spec, input.value), ...value.split(",").map((v) => v.trim()).filter(Boolean)]);
    };
    addButton.addEventListener("click", take);
    add.addEventListener("keydown", (event) => {
      if (event.key === "Enter") {
        event.preventDefault(); // not a Run: the value goes into the list
        take();
      }
    });
    return draw;
  }

  function select(spec, field, input) {
    const label = labelOf(field, input);
    const choice = node("select", "explore-select");
    choice.id = `${input.id}_select`;
    described(choice, input);
    input.before(choice);
    input.hidden = true;
    if (label) label.htmlFor = choice.id;
    choice.addEventListener("change", () => {
      input.value = choice.value;
    });
    return () => {
      const value = input.value.trim() || spec.default;
      const options = spec.choices.includes(value) ? spec.choices : [...spec.choices, value];
      choice.replaceChildren(...options.map((option) => node("option", "", option)));
      choice.value = value;
    };
  }

  const BUILDERS = { slider, stepper, list, select };

  for (const spec of config.controls || []) {
    const field = form.querySelector(`[data-field="${CSS.escape(spec.name)}"]`);
    const input = field && field.querySelector(`input[name="${CSS.escape(spec.name)}"]`);
    if (!input) continue;
    const build = BUILDERS[spec.kind];
    const sync = build ? build(spec, field, input) : () => {};
    field.classList.add(`explore-${spec.kind}`);
    sync();
    controls.set(spec.name, { spec, input, sync });
  }
  if (!controls.size) return;

  // --- asking the model ----------------------------------------------------------------
  function queryOf() {
    const query = new URLSearchParams();
    for (const [name, { spec, input }] of controls) {
      const text = input.value.trim();
      if (text !== "" && squeeze(text) !== squeeze(spec.default)) query.set(name, text);
    }
    return query.toString();
  }

  function schedule() {
    clearTimeout(timer);
    timer = setTimeout(ask, DEBOUNCE_MS);
  }

  function say(...parts) {
    status.replaceChildren(...parts);
  }

  function busy(on) {
    clearTimeout(busyTimer);
    if (on) {
      // Only a slow answer dims the old figures: a kept one arrives before this.
      busyTimer = setTimeout(() => output.classList.add("is-busy"), BUSY_AFTER_MS);
      output.setAttribute("aria-busy", "true");
    } else {
      output.classList.remove("is-busy");
      output.removeAttribute("aria-busy");
    }
  }

  async function ask() {
    clearTimeout(retryTimer);
    const query = queryOf();
    if (shown && shown.query === query && !panel.dataset.error) return;
    if (inflight && inflight.query === query) return; // already asked: its answer comes
    if (inflight) inflight.controller.abort();
    const controller = new AbortController();
    inflight = { controller, query };
    const mine = ++sequence;
    const url = new URLSearchParams(query);
    if (shown) url.set("since", shown.key);
    busy(true);
    const started = performance.now();
    let response;
    let body;
    try {
      response = await fetch(`${config.url}?${url}`, {
        signal: controller.signal,
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      body = await response.json().catch(() => ({}));
    } catch (error) {
      if (error.name === "AbortError" || mine !== sequence) return;
      inflight = null;
      busy(false);
      fail("The model could not be reached. It answers again when the connection is back.");
      return;
    }
    if (mine !== sequence) return; // a newer change is being asked
    inflight = null;
    busy(false);
    if (response.ok) {
      drawAnswer(body, query, performance.now() - started, response.headers.get("X-Model-Source"));
    } else if (response.status === 400 && body.errors) {
      refused(body.errors);
    } else if (response.status === 429 || response.status === 503) {
      const retry = Number(response.headers.get("Retry-After")) || 10;
      fail(body.error || "The model is busy; it answers again in a moment.");
      retryTimer = setTimeout(ask, retry * 1000);
    } else if (body.error) {
      failWithLink(body);
    } else {
      fail(`The model could not answer (HTTP ${response.status}). Try again in a moment.`);
    }
  }

  function fail(text) {
    panel.dataset.error = "true";
    say(node("span", "explore-problem", text), " The figures below are for the previous values.");
  }

  function failWithLink(body) {
    fail(body.error);
    if (body.signup_url) {
      const link = node("a", "", "Sign up");
      link.href = `${body.signup_url}?next=${encodeURIComponent(location.pathname)}`;
      status.append(" ", link, ".");
    }
  }

  // --- the fields' error marks (as lab.js marks them for Run) -------------------------
  function fieldParts(field) {
    const input = field.querySelector("input:not([type=hidden]):not([hidden]), select, textarea");
    const error = field.querySelector("[data-field-error]");
    if (input && error && !error.id) error.id = `${input.id}_error`;
    return { input, error };
  }

  function describedBy(input, id, on) {
    const ids = (input.getAttribute("aria-describedby") || "").split(/\s+/).filter((x) => x && x !== id);
    if (on) ids.push(id);
    if (ids.length) input.setAttribute("aria-describedby", ids.join(" "));
    else input.removeAttribute("aria-describedby");
  }

  function mark(name, messages) {
    const field = form.querySelector(`[data-field="${CSS.escape(name)}"]`);
    if (!field) return;
    const { input, error } = fieldParts(field);
    field.classList.toggle("has-error", Boolean(messages));
    if (error) error.textContent = messages ? messages.join(" ") : "";
    if (input && error) {
      if (messages) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
      describedBy(input, error.id, Boolean(messages));
    }
  }

  function refused(errors) {
    for (const name of controls.keys()) mark(name, errors[name] || null);
    const whole = errors.__all__;
    const names = Object.keys(errors).filter((name) => controls.has(name));
    const text = whole
      ? whole.join(" ")
      : `The model cannot run with ${names.join(", ")} as given: see the field${names.length === 1 ? "" : "s"} above.`;
    fail(text);
  }

  // --- drawing an answer ----------------------------------------------------------------
  function cellText(cell) {
    return cell === null ? "—" : String(cell);
  }

  function renderTable(name, table, moved) {
    const section = node("section", "result-table");
    const heading = node("h4");
    heading.appendChild(node("code", "", name));
    section.appendChild(heading);
    const wrap = node("div", "table-wrap");
    wrap.dataset.exploreTable = name;
    // A wide table scrolls in its own box; the keyboard can scroll it too.
    wrap.tabIndex = 0;
    wrap.setAttribute("role", "region");
    wrap.setAttribute("aria-label", `Model table ${name}`);
    const element = node("table", "data");
    element.dataset.exploreTable = name;
    const numeric = table.columns.map((_, i) =>
      table.rows.length > 0 && table.rows.every((row) => row[i] === null || typeof row[i] === "number"),
    );
    const headRow = node("tr");
    table.columns.forEach((column, i) => {
      const th = node("th", numeric[i] ? "num" : "", column);
      th.scope = "col";
      headRow.appendChild(th);
    });
    const head = node("thead");
    head.appendChild(headRow);
    const before = new Map((moved || []).map(([r, c, was]) => [`${r}:${c}`, was]));
    const body = node("tbody");
    table.rows.forEach((row, r) => {
      const tr = node("tr");
      row.forEach((cell, c) => {
        const td = node("td", numeric[c] ? "num" : "", cellText(cell));
        td.dataset.exploreColumn = table.columns[c];
        if (before.has(`${r}:${c}`)) {
          td.classList.add("is-moved");
          td.appendChild(node("span", "sr-only", ` (moved; was ${cellText(before.get(`${r}:${c}`))})`));
        }
        tr.appendChild(td);
      });
      body.appendChild(tr);
    });
    element.append(head, body);
    wrap.appendChild(element);
    section.appendChild(wrap);
    return section;
  }

  function renderCharts(answer) {
    const charts = node("div", "lab-charts");
    if (!window.LabChart) return charts;
    const specs = (answer.charts || []).filter((spec) => answer.tables[spec.table]);
    const full = output.clientWidth || panel.clientWidth || 640;
    const columns = full >= 860 ? Math.min(2, specs.length) : 1;
    const width = (full - (columns - 1) * 16) / Math.max(1, columns) - 34;
    charts.style.setProperty("--chart-columns", String(Math.max(1, columns)));
    for (const spec of specs) {
      const figure = window.LabChart.render(spec, answer.tables[spec.table], width);
      if (figure) charts.appendChild(figure);
    }
    return charts;
  }

  function movedNote(answer) {
    if (!answer.moved) return answer.changed.length ? "" : "The defaults: the lesson's own numbers.";
    const counts = Object.entries(answer.moved)
      .filter(([, cells]) => cells.length)
      .map(([name, cells]) => `${name} ${cells.length}`);
    const total = Object.values(answer.moved).reduce((sum, cells) => sum + cells.length, 0);
    const reshaped = (answer.reshaped || []).length ? ` Reshaped: ${answer.reshaped.join("; ")}.` : "";
    if (!total) return `No figure moved since the previous values.${reshaped}`;
    const marked = `${total} figure${total === 1 ? "" : "s"} moved since the previous values (${counts.join(", ")}), marked below.`;
    return marked + reshaped;
  }

  function drawAnswer(answer, query, fetchMs, source) {
    const began = performance.now();
    const scrolled = new Map(
      Array.from(output.querySelectorAll(".table-wrap[data-explore-table]")).map((wrap) => [wrap.dataset.exploreTable, wrap.scrollLeft]),
    );
    const tables = node("div", "lab-tables");
    for (const [name, table] of Object.entries(answer.tables || {})) {
      tables.appendChild(renderTable(name, table, answer.moved ? answer.moved[name] : null));
    }
    output.replaceChildren(renderCharts(answer), tables);
    for (const wrap of output.querySelectorAll(".table-wrap[data-explore-table]")) {
      const left = scrolled.get(wrap.dataset.exploreTable);
      if (left) wrap.scrollLeft = left;
    }
    for (const name of controls.keys()) mark(name, null);
    delete panel.dataset.error;
    shown = { key: answer.key, query };
    const changed = answer.changed.map((name) => `${name}=${answer.params[name]}`);
    const what = changed.length ? `The model with ${changed.join(", ")}.` : "The model with the defaults.";
    say(`${what} ${movedNote(answer)}`.trim());
    // Drawn once the browser has laid out and painted the new figures.
    requestAnimationFrame(() =>
      requestAnimationFrame(() => {
        draws += 1;
        panel.dataset.fetchMs = fetchMs.toFixed(1);
        panel.dataset.renderMs = (performance.now() - began).toFixed(1);
        panel.dataset.source = source || "";
        panel.dataset.key = answer.key;
        panel.dataset.draws = String(draws);
      }),
    );
  }

  // --- when to ask ------------------------------------------------------------------------
  function ownsEvent(event) {
    const field = event.target.closest && event.target.closest("[data-field]");
    return Boolean(field && controls.has(field.dataset.field));
  }

  form.addEventListener("input", (event) => {
    if (!ownsEvent(event)) return;
    const name = event.target.closest("[data-field]").dataset.field;
    const control = controls.get(name);
    if (event.target === control.input) control.sync();
    schedule();
  });
  form.addEventListener("change", (event) => {
    if (ownsEvent(event)) schedule();
  });
  form.addEventListener("reset", () =>
    setTimeout(() => {
      for (const control of controls.values()) control.sync();
      schedule();
    }, 0),
  );

  panel.hidden = false;
  // Held back until the learner predicts: asked for once it opens (predict.js opens it).
  if (!hold || hold.open) ask();
  else hold.addEventListener("toggle", () => hold.open && ask());
})();

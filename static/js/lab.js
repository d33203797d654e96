/* Lab runner on a lesson page.
 *
 * 1. The parameter form is sent with fetch (CSRF token in a header); the server answers
 *    202 with the job id, or 400 with one reason per field.
 * 2. The job is followed over server-sent events (progress.js), or by short polling
 *    when the stream fails: GET /jobs/<id>/status?version=N every ~500 ms. 204
 *    means "nothing new", 200 carries the job and its new version.
 * 3. Network errors and 5xx answers back off exponentially with jitter, so a restarting
 *    server is not hit by every open tab at the same instant.
 * 4. The job id lives in the address (?job=<id>), so a reload resumes the same run.
 * 5. "Also measure the live system" (any signed-in learner) adds the live part: its
 *    steps show in the progress line ("live: …") and its tables (live_…) follow the
 *    model's.
 * 6. The server may join the run to an identical one already waiting or running
 *    (202 with joined), reuse a finished model run (202 with reused), or offer a
 *    finished identical live run (200 with offer): the learner then takes its
 *    result or runs their own anyway. A refusal names why, and a 429/503 when a
 *    retry helps (Retry-After): the Run button counts down to it.
 * 7. Focus is never dropped: Run disables its button, so focus moves to the progress
 *    line, and to the result once it arrives (unless the learner has moved on). A
 *    rejected field gets aria-invalid and its error in its aria-describedby. Only
 *    the state badge is a live region: the tables are not read out as they appear.
 */
(function () {
  "use strict";

  const POLL_MS = 500;
  const MAX_BACKOFF_MS = 15000;
  const ZERO_ID = "00000000-0000-0000-0000-000000000000";

  const configNode = document.getElementById("lab-config");
  const form = document.getElementById("lab-form");
  const panel = document.getElementById("lab-results");
  if (!configNode || !form || !panel) return;
  const config = JSON.parse(configNode.textContent);

  const runButton = form.querySelector("[data-run]");
  const resetButton = form.querySelector("[data-reset]");
  const formErrors = form.querySelector("[data-form-errors]");
  const stateBadge = panel.querySelector("[data-state]");
  const progressBox = panel.querySelector("[data-progress]");
  const progressBar = panel.querySelector(".progress-bar");
  const progressRole = panel.querySelector("[role=progressbar]");
  const messageLine = panel.querySelector("[data-message]");
  const output = panel.querySelector("[data-output]");
  const explainedBox = panel.querySelector("[data-explained]");
  const offerBox = form.querySelector("[data-offer]");
  const offerText = form.querySelector("[data-offer-text]");
  const runActions = form.querySelector("[data-run-actions]");
  const sharedLine = panel.querySelector("[data-shared]");

  let current = null; // the run being followed: {id, version, failures, timer}

  function csrfToken() {
    const input = form.querySelector("input[name=csrfmiddlewaretoken]");
    if (input && input.value) return input.value;
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  function statusUrl(id, version) {
    return `${config.statusUrl.replace(ZERO_ID, id)}?version=${encodeURIComponent(version)}`;
  }

  function node(tag, className, text) {
    const element = document.createElement(tag);
    if (className) element.className = className;
    if (text !== undefined) element.textContent = text;
    return element;
  }

  function alertBox(kind, text) {
    const box = node("div", `alert alert-${kind}`);
    box.setAttribute("role", kind === "error" ? "alert" : "status");
    box.appendChild(node("p", "", text));
    return box;
  }

  // --- focus -----------------------------------------------------------------------
  // Focus what the learner should read next, if focus would otherwise be lost (on
  // the body, on a disabled button, or on the last place this script put it).
  let placed = null;
  let awaiting = false; // a run started from this page: its result takes the focus
  function focusLost() {
    const active = document.activeElement;
    return !active || active === document.body || active === placed || active.disabled;
  }

  function place(element) {
    if (!element) return;
    if (!element.hasAttribute("tabindex")) element.setAttribute("tabindex", "-1");
    placed = element;
    element.focus();
  }

  // --- form ------------------------------------------------------------------------
  function describedBy(input, id, on) {
    const ids = (input.getAttribute("aria-describedby") || "").split(/\s+/).filter((x) => x && x !== id);
    if (on) ids.push(id);
    if (ids.length) input.setAttribute("aria-describedby", ids.join(" "));
    else input.removeAttribute("aria-describedby");
  }

  function fieldParts(field) {
    const input = field.querySelector("input:not([type=hidden]), select, textarea");
    const error = field.querySelector("[data-field-error]");
    if (input && error && !error.id) error.id = `${input.id}_error`;
    return { input, error };
  }

  function clearErrors() {
    formErrors.replaceChildren();
    form.querySelectorAll("[data-field]").forEach((field) => {
      const { input, error } = fieldParts(field);
      field.classList.remove("has-error");
      error.textContent = "";
      if (input) {
        input.removeAttribute("aria-invalid");
        describedBy(input, error.id, false);
      }
    });
  }

  function showFieldErrors(errors) {
    for (const [name, messages] of Object.entries(errors || {})) {
      const field = form.querySelector(`[data-field="${CSS.escape(name)}"]`);
      if (field) {
        const { input, error } = fieldParts(field);
        field.classList.add("has-error");
        error.textContent = messages.join(" ");
        if (input) {
          input.setAttribute("aria-invalid", "true");
          describedBy(input, error.id, true);
        }
      } else {
        formErrors.appendChild(alertBox("error", messages.join(" ")));
      }
    }
    const first = form.querySelector(".has-error input");
    if (first) first.focus();
    else if (formErrors.firstChild) place(formErrors.firstChild);
  }

  function setBusy(busy) {
    runButton.disabled = busy;
    runButton.textContent = busy ? "Running…" : "Run the lab";
  }

  function showOffer(text) {
    if (!offerBox) return;
    offerText.textContent = text;
    offerBox.hidden = !text;
    runActions.hidden = Boolean(text);
  }

  function showShared(text) {
    if (!sharedLine) return;
    sharedLine.textContent = text || "";
    sharedLine.hidden = !text;
  }

  // A refusal a retry cures (429, 503 with Retry-After): count the button down.
  function holdUntilRetry(seconds) {
    let left = Math.max(1, Math.ceil(seconds));
    runButton.disabled = true;
    const tick = () => {
      if (left <= 0) {
        setBusy(false);
        return;
      }
      runButton.textContent = `Run again in ${left} s`;
      left -= 1;
      setTimeout(tick, 1000);
    };
    tick();
  }

  function refusalBox(body) {
    const box = alertBox("error", body.error || "The run was refused.");
    if (body.signup_url) {
      const link = node("a", "btn btn-sm btn-primary", "Sign up");
      link.href = `${body.signup_url}?next=${encodeURIComponent(location.pathname)}`;
      const line = node("p");
      line.appendChild(link);
      box.appendChild(line);
    }
    return box;
  }

  function defaultsDiffer() {
    const texts = Array.from(form.querySelectorAll("input[type=text]"));
    const boxes = Array.from(form.querySelectorAll("input[type=checkbox]"));
    return (
      texts.some((input) => input.value !== input.defaultValue) ||
      boxes.some((input) => input.checked !== input.defaultChecked)
    );
  }

  form.addEventListener("change", () => {
    resetButton.hidden = !defaultsDiffer();
  });
  form.addEventListener("input", () => {
    resetButton.hidden = !defaultsDiffer();
  });
  resetButton.addEventListener("click", () => {
    form.reset();
    clearErrors();
    resetButton.hidden = true;
  });

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    clearErrors();
    setBusy(true);
    let response;
    try {
      // The submitter carries the learner's choice on an offer (reuse or fresh).
      response = await fetch(config.runUrl, {
        method: "POST",
        body: new FormData(form, event.submitter || null),
        credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": csrfToken() },
      });
    } catch (error) {
      formErrors.appendChild(alertBox("error", "The server could not be reached. Check the connection and run again."));
      setBusy(false);
      place(formErrors.lastChild);
      return;
    }
    const body = await response.json().catch(() => ({}));
    if (response.status === 202) {
      showOffer("");
      history.replaceState(null, "", body.lesson_url);
      follow(body.job, 0);
      showShared(body.message);
      awaiting = true;
      if (focusLost()) place(messageLine);
      return;
    }
    setBusy(false);
    if (response.status === 200 && body.offer) {
      showOffer(body.offer.message);
      offerBox.querySelector("[data-choice=reuse]").focus();
    } else if (body.errors) {
      // 400: one reason per field; 403: the live part refused for this account.
      showFieldErrors(body.errors);
    } else if (body.error) {
      formErrors.appendChild(refusalBox(body));
      const retry = Number(response.headers.get("Retry-After"));
      if (retry > 0) holdUntilRetry(retry);
      if (focusLost()) place(formErrors.lastChild);
    } else if (response.status === 403) {
      formErrors.appendChild(alertBox("error", "The page's security token is no longer valid. Reload the page and run again."));
      if (focusLost()) place(formErrors.lastChild);
    } else {
      formErrors.appendChild(alertBox("error", `The run could not be started (HTTP ${response.status}). Try again in a moment.`));
      if (focusLost()) place(formErrors.lastChild);
    }
  });

  // --- following a run ---------------------------------------------------------------
  function follow(id, version) {
    if (current && current.timer) clearTimeout(current.timer);
    if (current && current.stop) current.stop();
    current = { id, version, failures: 0, timer: null };
    showState({ state: "queued", progress: 0, message: "waiting for a worker", finished: false });
    output.replaceChildren();
    if (explainedBox) explainedBox.replaceChildren();
    track(current, 0);
  }

  // progress.js: follow the run over server-sent events; short polling (below)
  // takes over from the last version seen when the stream keeps failing.
  function track(run, delay) {
    const follow = window.followProgress;
    if (!follow || !follow.jobEventsUrl) return schedule(run, delay);
    run.stop = follow({
      version: run.version,
      eventsUrl: follow.jobEventsUrl.replace(ZERO_ID, run.id),
      onJob: (job) => {
        if (run !== current) return;
        run.version = job.version;
        showJob(job);
      },
      onGone: () => run === current && schedule(run, 0),
      fallback: (version) => {
        if (run !== current) return;
        run.version = version;
        schedule(run, 0);
      },
    });
  }

  function schedule(run, delay) {
    run.timer = setTimeout(() => poll(run), delay);
  }

  function backoff(run, reason) {
    run.failures += 1;
    // Full jitter on an exponential ceiling: spreads the retries of many tabs.
    const ceiling = Math.min(MAX_BACKOFF_MS, POLL_MS * Math.pow(2, run.failures));
    const delay = POLL_MS + Math.random() * (ceiling - POLL_MS);
    messageLine.textContent = `${reason}; retrying in ${(delay / 1000).toFixed(1)} s`;
    schedule(run, delay);
  }

  async function poll(run) {
    if (run !== current) return;
    let response;
    try {
      // retry.js: a shed answer (503, Retry-After) is retried with backoff and jitter.
      const get = window.fetchWithRetry || ((url, init) => fetch(url, init));
      response = await get(statusUrl(run.id, run.version), {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      }, { attempts: 4 });
    } catch (error) {
      if (run === current) backoff(run, "Connection lost");
      return;
    }
    if (run !== current) return;
    if (response.status === 204) {
      run.failures = 0;
      schedule(run, POLL_MS);
    } else if (response.status === 200) {
      run.failures = 0;
      const job = await response.json();
      run.version = job.version;
      showJob(job);
      if (!job.finished) schedule(run, POLL_MS);
    } else if (response.status === 404) {
      setBusy(false);
      showState({ state: "missing", progress: 0, message: "", finished: true });
      output.replaceChildren(alertBox("warning", "This run no longer exists. Start a new one."));
    } else if (response.status === 429 || response.status >= 500) {
      backoff(run, `The server answered ${response.status}`);
    } else {
      setBusy(false);
      output.replaceChildren(alertBox("error", `Following the run failed (HTTP ${response.status}).`));
    }
  }

  const BADGES = { queued: "badge-info", running: "badge-warning", done: "badge-success", failed: "badge-danger", cancelled: "badge-danger" };

  function showState(job) {
    stateBadge.className = `badge ${BADGES[job.state] || ""}`;
    stateBadge.textContent = job.state;
    progressBox.hidden = false;
    const percent = Math.max(0, Math.min(100, job.progress || 0));
    progressBar.style.width = `${percent}%`;
    progressBar.classList.toggle("is-danger", job.state === "failed");
    progressRole.setAttribute("aria-valuenow", String(percent));
    messageLine.textContent = job.message || "";
  }

  function showJob(job) {
    showState(job);
    if (!job.finished) return;
    const moveFocus = awaiting && focusLost();
    awaiting = false;
    setBusy(false);
    if (job.state === "done" && job.result) {
      renderResult(job.result);
      explain(job.id);
    } else if (job.state === "failed") {
      // The form still holds the run's parameters: one press runs it again.
      const box = alertBox("error", job.error || "The run failed.");
      const again = node("button", "btn btn-sm", "Run it again");
      again.type = "submit";
      again.setAttribute("form", "lab-form");
      const line = node("p");
      line.appendChild(again);
      box.appendChild(line);
      output.replaceChildren(box);
    } else {
      output.replaceChildren(alertBox("warning", `The run ended as ${job.state}.`));
    }
    if (moveFocus && output.firstElementChild) place(output.firstElementChild);
  }

  // The server writes "what just happened" from the stored run: the parameters moved,
  // the figures that moved with them, live beside model, the prediction checked.
  async function explain(id) {
    if (!explainedBox || !config.explainUrl) return;
    try {
      const response = await fetch(config.explainUrl.replace(ZERO_ID, id), {
        credentials: "same-origin",
        headers: { Accept: "text/html" },
      });
      if (response.status === 200 && current && current.id === id) {
        explainedBox.innerHTML = await response.text(); // our own rendered, escaped fragment
      }
    } catch (error) {
      // The tables are already shown; the explanation returns on the next reload.
    }
  }

  // --- result ------------------------------------------------------------------------
  function renderTable(name, table) {
    const section = node("section", "result-table");
    const heading = node("h3");
    heading.appendChild(node("code", "", name));
    section.appendChild(heading);
    const wrap = node("div", "table-wrap");
    const element = node("table", "data");
    element.dataset.table = name;
    const numeric = table.columns.map((_, i) =>
      table.rows.length > 0 && table.rows.every((row) => row[i] === null || typeof row[i] === "number"),
    );
    const head = node("thead");
    const headRow = node("tr");
    table.columns.forEach((column, i) => {
      const th = node("th", numeric[i] ? "num" : "", column);
      th.scope = "col";
      headRow.appendChild(th);
    });
    head.appendChild(headRow);
    const body = node("tbody");
    for (const row of table.rows) {
      const tr = node("tr");
      row.forEach((cell, i) => {
        const td = node("td", numeric[i] ? "num" : "", cell === null ? "—" : String(cell));
        td.dataset.column = table.columns[i];
        if (cell === null) td.title = "not a number";
        tr.appendChild(td);
      });
      body.appendChild(tr);
    }
    element.append(head, body);
    wrap.appendChild(element);
    section.appendChild(wrap);
    return section;
  }

  // A raw stream the live part recorded (the lab's transcripts): one monospace block
  // per connection, each line as it came over the wire, blank lines kept.
  function renderTranscript(name, table) {
    const section = node("section", "result-table result-transcript");
    section.dataset.transcript = name;
    const heading = node("h3");
    heading.appendChild(node("code", "", name));
    section.appendChild(heading);
    const blocks = new Map();
    for (const [label, line] of table.rows) {
      if (!blocks.has(label)) blocks.set(label, []);
      blocks.get(label).push(line === null ? "" : String(line));
    }
    for (const [label, lines] of blocks) {
      const figure = node("figure", "wire");
      figure.appendChild(node("figcaption", "", `${table.columns[0]} ${label}`));
      const pre = node("pre", "wire-lines", lines.join("\n"));
      pre.tabIndex = 0; // a long line scrolls sideways: keyboard users can too
      figure.appendChild(pre);
      section.appendChild(figure);
    }
    return section;
  }

  function renderResult(result) {
    const parts = [];
    const params = Object.entries(result.params || {})
      .map(([name, value]) => `${name}=${Array.isArray(value) ? value.join(",") : value}`)
      .join("  ");
    if (params) parts.push(node("p", "lab-params muted small", `Parameters: ${params}`));
    if (window.LabChart) {
      const specs = (config.charts || []).filter((spec) => result.tables[spec.table]);
      // Two charts side by side on wide screens, one per row otherwise; each is
      // drawn at its real width so its labels keep their size.
      const full = output.clientWidth || 640;
      const columns = full >= 860 ? Math.min(2, specs.length) : 1;
      const width = (full - (columns - 1) * 16) / Math.max(1, columns) - 34;
      const charts = node("div", "lab-charts");
      charts.style.setProperty("--chart-columns", String(Math.max(1, columns)));
      for (const spec of specs) {
        const figure = window.LabChart.render(spec, result.tables[spec.table], width);
        if (figure) charts.appendChild(figure);
      }
      if (charts.childElementCount) parts.push(charts);
    }
    const tables = node("div", "lab-tables");
    const transcripts = config.transcripts || [];
    for (const [name, table] of Object.entries(result.tables || {})) {
      tables.appendChild(transcripts.includes(name) ? renderTranscript(name, table) : renderTable(name, table));
    }
    parts.push(tables);
    const raw = node("details", "lab-raw");
    raw.appendChild(node("summary", "", "Raw JSON (same as the lab command's --json)"));
    raw.appendChild(node("pre", "", JSON.stringify(result)));
    parts.push(raw);
    output.replaceChildren(...parts);
  }

  // --- resume after a reload -----------------------------------------------------------
  if (config.job) {
    current = { id: config.job.id, version: config.job.version, failures: 0, timer: null };
    if (config.job.finished) {
      showJob(config.job);
    } else {
      setBusy(true);
      showState(config.job);
      track(current, POLL_MS);
    }
  }
})();

/* The loan report's page: live progress by short polling, Cancel and Resume.
 *
 * 1. GET /jobs/<id>/status?version=N every ~700 ms while the report is queued or
 *    running: 204 means nothing changed, 200 carries the row and its new version.
 * 2. Network errors, 429 and 5xx back off exponentially with full jitter.
 * 3. Cancel and Resume post their form with fetch (CSRF token in a header) and poll
 *    at once; without JavaScript the same forms post and the page reloads.
 * 4. A cancel is a request: the report stops at its next chunk boundary, so the
 *    page says "stopping at the next chunk" until the row turns cancelled.
 */
(function () {
  "use strict";

  const POLL_MS = 700;
  const MAX_BACKOFF_MS = 15000;
  const root = document.querySelector("[data-report]");
  const configNode = document.getElementById("report-config");
  if (!root || !configNode) return;
  const config = JSON.parse(configNode.textContent);

  const badge = root.querySelector("[data-state]");
  const bar = root.querySelector(".progress-bar");
  const role = root.querySelector("[role=progressbar]");
  const percentText = root.querySelector("[data-percent]");
  const counts = root.querySelector("[data-counts]");
  const message = root.querySelector("[data-message]");
  const cancelButton = root.querySelector("[data-cancel]");
  const resumeButton = root.querySelector("[data-resume]");
  const download = root.querySelector("[data-download]");
  const errors = root.querySelector("[data-errors]");
  const reason = document.querySelector("[data-reason]");
  const days = document.querySelector("[data-days]");
  const average = document.querySelector("[data-average]");

  const BADGES = { queued: "badge-info", running: "badge-warning", done: "badge-success", failed: "badge-danger", cancelled: "badge-danger" };
  let version = config.job.version;
  let failures = 0;
  let timer = null;

  const number = (n) => (typeof n === "number" ? n.toLocaleString("en") : "0");

  function show(job) {
    const percent = Math.max(0, Math.min(100, job.progress || 0));
    badge.className = `badge ${BADGES[job.state] || ""}`;
    badge.textContent = job.state;
    bar.style.width = `${percent}%`;
    bar.classList.toggle("is-warning", job.state === "cancelled");
    bar.classList.toggle("is-danger", job.state === "failed");
    role.setAttribute("aria-valuenow", String(Math.round(percent)));
    percentText.textContent = `${Math.round(percent)}%`;
    counts.textContent = `${number(job.processed)} of ${number(job.total)} loans`;
    // While running, the counts say it all; the message matters once it stops.
    let line = job.state === "running" ? "" : job.message || "";
    if (job.cancel_requested && !job.finished) line = "Cancel requested · stopping at the next chunk";
    if (job.state === "failed" && job.error) line = job.error;
    message.textContent = line;
    cancelButton.hidden = job.finished || job.cancel_requested;
    resumeButton.hidden = !job.resumable;
    download.hidden = job.state !== "done";
    if (reason) reason.textContent = job.cancel_reason || "—";
    if (job.result && days) days.textContent = number(job.result.days);
    if (job.result && average) average.textContent = job.result.average_days ?? "—";
  }

  function schedule(delay) {
    clearTimeout(timer);
    timer = setTimeout(poll, delay);
  }

  function backoff(text) {
    failures += 1;
    const ceiling = Math.min(MAX_BACKOFF_MS, POLL_MS * Math.pow(2, failures));
    const delay = POLL_MS + Math.random() * (ceiling - POLL_MS);
    message.textContent = `${text}; retrying in ${(delay / 1000).toFixed(1)} s`;
    schedule(delay);
  }

  async function poll() {
    let response;
    try {
      response = await fetch(`${config.statusUrl}?version=${encodeURIComponent(version)}`, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      });
    } catch (error) {
      backoff("Connection lost");
      return;
    }
    if (response.status === 204) {
      failures = 0;
      schedule(POLL_MS);
    } else if (response.status === 200) {
      failures = 0;
      const job = await response.json();
      version = job.version;
      show(job);
      if (!job.finished) schedule(POLL_MS);
    } else if (response.status === 429 || response.status >= 500) {
      backoff(`The server answered ${response.status}`);
    } else {
      message.textContent = `Following the report failed (HTTP ${response.status}).`;
    }
  }

  function alertBox(text) {
    const box = document.createElement("div");
    box.className = "alert alert-error";
    box.setAttribute("role", "alert");
    const p = document.createElement("p");
    p.textContent = text;
    box.appendChild(p);
    return box;
  }

  function wire(form) {
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const button = form.querySelector("button");
      button.disabled = true;
      errors.replaceChildren();
      const token = form.querySelector("input[name=csrfmiddlewaretoken]").value;
      try {
        const response = await fetch(form.action, {
          method: "POST",
          body: new FormData(form),
          credentials: "same-origin",
          headers: { Accept: "application/json", "X-CSRFToken": token },
        });
        if (response.status !== 202) {
          const body = await response.json().catch(() => ({}));
          errors.appendChild(alertBox(body.error || `That did not work (HTTP ${response.status}). Reload the page and try again.`));
        }
      } catch (error) {
        errors.appendChild(alertBox("The server could not be reached. Try again in a moment."));
      } finally {
        button.disabled = false;
      }
      schedule(0);
    });
  }

  root.querySelectorAll("form[data-action]").forEach(wire);
  show(config.job);
  if (!config.job.finished) schedule(POLL_MS);
})();

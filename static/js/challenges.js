/* A lesson's challenges: check an answer and open hints without leaving the page.
 *
 * Without JavaScript each challenge is two plain forms (the answer, the next hint)
 * that the server answers by sending the learner back to the challenge. With it the
 * same forms are sent in the background (Accept: application/json): the outcome
 * goes into the challenge's live region, a solved challenge shows its debrief and
 * the page's counts (the header chip, the panel's badge) follow; a new hint is
 * added to the list and takes the focus. An answer the server cannot check (400)
 * is shown as an error next to the fields, which are marked invalid.
 *
 * A solved challenge with a live check has a third form, "Check it on the live
 * system", which asks the lab service for a live run of the solved answer. Its
 * block (server-rendered: course.challenge_views) is swapped for the one the
 * server answers with, and, while the run waits or runs, read again every few
 * seconds from its JSON until the verdict is there.
 */
(function () {
  "use strict";

  const panel = document.querySelector("[data-challenges]");
  if (!panel) return;

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function post(form, submitter) {
    const token = form.querySelector("input[name=csrfmiddlewaretoken]");
    const data = new FormData(form);
    // The pressed button's value (the offer's "Use that run" / "Run my own").
    if (submitter && submitter.name) data.set(submitter.name, submitter.value);
    // getAttribute: the form's own "action" input hides the form.action property.
    return fetch(form.getAttribute("action"), {
      method: "POST",
      body: new URLSearchParams(data),
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRFToken": token ? token.value : "" },
    }).then((response) =>
      response.json().then(
        (body) => ({ status: response.status, body }),
        () => ({ status: response.status, body: {} }),
      ),
    );
  }

  function fieldsInvalid(item, invalid) {
    item.querySelectorAll("[data-challenge-form] .field").forEach((field) => {
      field.classList.toggle("has-error", invalid);
      const input = field.querySelector("input");
      if (!input) return;
      if (invalid) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    });
  }

  function showOutcome(item, body) {
    const box = item.querySelector("[data-challenge-feedback]");
    box.textContent = "";
    const alert = el("div", `alert ${body.solved ? "alert-success" : "alert-warning"}`);
    const head = el("p");
    head.appendChild(el("strong", "", body.headline || ""));
    alert.appendChild(head);
    if (Array.isArray(body.details) && body.details.length) {
      const list = el("ul");
      body.details.forEach((line) => list.appendChild(el("li", "", line)));
      alert.appendChild(list);
    }
    box.appendChild(alert);
  }

  function showError(item, message) {
    const box = item.querySelector("[data-challenge-feedback]");
    box.textContent = "";
    // The server's reasons are sentences already (course.challenge_views).
    const alert = el("div", "alert alert-error");
    alert.appendChild(el("p", "", String(message || "That answer could not be checked.")));
    box.appendChild(alert);
  }

  function showSolved(item, body) {
    item.classList.add("is-solved");
    if (body.live_html) liveSwap(item, body.live_html);
    const badge = item.querySelector("[data-challenge-solved]");
    if (badge) badge.hidden = false;
    const debrief = item.querySelector("[data-challenge-debrief]");
    if (debrief && body.debrief) {
      debrief.textContent = "";
      const why = el("p");
      why.appendChild(el("strong", "", "Why it works. "));
      // The server's HTML: escaped text with <code> spans (grading.inline_html).
      const text = el("span");
      text.innerHTML = body.debrief;
      why.appendChild(text);
      debrief.appendChild(why);
      if (Array.isArray(body.lessons) && body.lessons.length) {
        const more = el("p", "small", "Goes further in: ");
        body.lessons.forEach((lesson, index) => {
          const link = el("a", "", lesson.title);
          link.href = lesson.url;
          more.appendChild(link);
          if (index < body.lessons.length - 1) more.appendChild(document.createTextNode(", "));
        });
        debrief.appendChild(more);
      }
      debrief.hidden = false;
    }
  }

  function showCounts(progress) {
    if (!progress) return;
    const done = progress.solved === progress.total;
    const badge = panel.querySelector("[data-challenges-count]");
    if (badge) {
      badge.textContent = `${progress.solved} of ${progress.total} solved`;
      badge.classList.toggle("badge-success", done);
    }
    const chip = document.querySelector("[data-chip-challenges]");
    if (chip) {
      chip.textContent = `${progress.solved} of ${progress.total} challenge${progress.total === 1 ? "" : "s"} solved`;
      chip.classList.toggle("is-done", done);
    }
  }

  function showAttempts(item, attempts) {
    const line = item.querySelector("[data-challenge-attempts]");
    if (line && typeof attempts === "number") {
      line.textContent = `${attempts} answer${attempts === 1 ? "" : "s"} checked`;
    }
  }

  // --- the live check ---------------------------------------------------------------
  const LIVE_POLL_MS = 3000;
  const LIVE_MAX_BACKOFF_MS = 30000;

  function liveSwap(item, html) {
    const region = item.querySelector("[data-challenge-live-region]");
    if (!region || typeof html !== "string") return;
    const fresh = document.createElement("template");
    fresh.innerHTML = html; // our own rendered, escaped fragment
    const words = (node) => node.textContent.replace(/\s+/g, " ").trim();
    // Rewriting the same words would make a screen reader read them out again.
    if (words(fresh.content) === words(region)) return;
    region.replaceChildren(fresh.content);
    liveFollow(item);
  }

  function liveError(item, message) {
    const block = item.querySelector("[data-challenge-live]");
    if (!block) return;
    const old = block.querySelector("[data-live-error]");
    if (old) old.remove();
    const alert = el("div", "alert alert-error");
    alert.dataset.liveError = "";
    alert.appendChild(el("p", "", String(message || "The live run could not be asked for.")));
    block.appendChild(alert);
  }

  function liveFollow(item) {
    const block = item.querySelector("[data-challenge-live]");
    if (!block || !block.hasAttribute("data-live-pending") || item.liveTimer) return;
    let failures = 0;
    const tick = () => {
      item.liveTimer = null;
      fetch(block.dataset.liveUrl, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        cache: "no-store",
      })
        .then((response) => (response.ok ? response.json() : Promise.reject(response.status)))
        .then((body) => {
          failures = 0;
          liveSwap(item, body.html);
          const current = item.querySelector("[data-challenge-live]");
          if (body.pending && current === block) {
            item.liveTimer = setTimeout(tick, LIVE_POLL_MS);
          }
        })
        .catch(() => {
          // Full jitter on a capped exponential ceiling: many tabs do not retry at once.
          failures += 1;
          const ceiling = Math.min(LIVE_MAX_BACKOFF_MS, LIVE_POLL_MS * 2 ** failures);
          item.liveTimer = setTimeout(tick, LIVE_POLL_MS + Math.random() * (ceiling - LIVE_POLL_MS));
        });
    };
    item.liveTimer = setTimeout(tick, LIVE_POLL_MS);
  }

  function liveWire(item) {
    // Delegated: the block and its forms are replaced whenever the server answers.
    item.addEventListener("submit", (event) => {
      const form = event.target;
      if (!form.closest || !form.closest("[data-challenge-live]")) return;
      event.preventDefault();
      const buttons = form.querySelectorAll("button");
      buttons.forEach((button) => { button.disabled = true; });
      post(form, event.submitter)
        .then(({ status, body }) => {
          if (status === 200 || status === 202) liveSwap(item, body.html);
          else liveError(item, body.error);
        })
        .catch(() => liveError(item, "The server could not be reached; try again."))
        .finally(() => buttons.forEach((button) => { button.disabled = false; }));
    });
    liveFollow(item);
  }

  panel.querySelectorAll("[data-challenge]").forEach((item) => {
    if (item.querySelector("[data-challenge-live-region]")) liveWire(item);
    const answerForm = item.querySelector("[data-challenge-form]");
    const hintForm = item.querySelector("[data-challenge-hint-form]");

    answerForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const button = answerForm.querySelector("[data-challenge-check]");
      button.disabled = true;
      button.setAttribute("aria-busy", "true");
      post(answerForm)
        .then(({ status, body }) => {
          if (status === 200) {
            fieldsInvalid(item, false);
            showOutcome(item, body);
            showAttempts(item, body.attempts);
            if (body.solved || body.solved_before) showSolved(item, body);
            showCounts(body.progress);
          } else {
            fieldsInvalid(item, status === 400);
            showError(item, body.error);
          }
        })
        .catch(() => showError(item, "The server could not be reached; try again."))
        .finally(() => {
          button.disabled = false;
          button.removeAttribute("aria-busy");
        });
    });

    if (!hintForm) return;
    hintForm.addEventListener("submit", (event) => {
      event.preventDefault();
      const button = hintForm.querySelector("[data-challenge-hint]");
      button.disabled = true;
      post(hintForm)
        .then(({ status, body }) => {
          if (status !== 200 || !Array.isArray(body.hints)) {
            showError(item, body.error);
            return;
          }
          const list = item.querySelector("[data-challenge-hints]");
          list.textContent = "";
          body.hints.forEach((hint) => {
            // The server's HTML: escaped text with <code> spans.
            const entry = el("li");
            entry.innerHTML = hint;
            entry.tabIndex = -1;
            list.appendChild(entry);
          });
          list.hidden = body.hints.length === 0;
          const total = button.dataset.hintTotal || String(body.hints.length + body.left);
          button.textContent = `Show hint ${body.hints.length + 1} of ${total}`;
          hintForm.hidden = body.left <= 0;
          const newest = list.lastElementChild;
          if (newest) newest.focus();
        })
        .catch(() => showError(item, "The server could not be reached; try again."))
        .finally(() => { button.disabled = false; });
    });
  });
})();

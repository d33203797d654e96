/* Lesson page: keep a signed-in learner's progress, and follow the table of contents.
 *
 * 1. The lesson counts as read once the learner has spent a share of its reading time
 *    (READ_SHARE of the minutes the page states) with its text on screen, in a tab in
 *    front: time with the text scrolled away or the tab hidden does not count. A fast
 *    scroll to the bottom counts nothing; the "Mark as read" button counts at once.
 * 2. Opening a question's answer records it (once per question).
 * 3. The "Mark as read" form is sent in the background when scripts run.
 * 4. The table of contents marks the section being read.
 * Progress calls are small form POSTs with the CSRF token; a failure is ignored
 * (the next visit records it again), never shown as an error.
 */
(function () {
  "use strict";

  const configNode = document.getElementById("progress-config");
  const config = configNode ? JSON.parse(configNode.textContent) : null;
  const token = document.querySelector("input[name=csrfmiddlewaretoken]");

  function send(fields) {
    if (!config || !token) return Promise.resolve(false);
    const body = new URLSearchParams(fields);
    return fetch(config.url, {
      method: "POST",
      body,
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRFToken": token.value },
    }).then((response) => response.ok, () => false);
  }

  function markRead() {
    if (!config || config.read) return;
    config.read = true;
    send({ event: "read" }).then((ok) => {
      if (!ok) return;
      const chip = document.querySelector("[data-chip-read]");
      if (chip) { chip.textContent = "Read"; chip.classList.add("is-done"); }
      const form = document.querySelector("[data-mark-read]");
      if (form) form.hidden = true;
    });
  }

  // 1. Time spent with the text on screen.
  const READ_SHARE = 0.5; // the estimate is at 220 words a minute; a quick reader halves it
  const TICK_MS = 1000;
  const text = document.querySelector("[data-lesson-text]");
  if (config && !config.read && text && config.minutes > 0 && "IntersectionObserver" in window) {
    const needed = config.minutes * 60 * 1000 * READ_SHARE;
    let onScreen = false;
    let spent = 0;
    let last = null;
    const watch = new IntersectionObserver((entries) => {
      entries.forEach((entry) => { onScreen = entry.isIntersecting; });
    });
    watch.observe(text);
    const timer = setInterval(() => {
      const now = performance.now();
      const counting = onScreen && document.visibilityState === "visible";
      // A tick that came late (a throttled or sleeping tab) adds one tick, no more.
      if (counting && last !== null) spent += Math.min(now - last, TICK_MS * 2);
      last = counting ? now : null;
      if (spent >= needed || config.read) {
        clearInterval(timer);
        watch.disconnect();
        markRead();
      }
    }, TICK_MS);
  }

  // 2. Answers opened.
  const answersChip = document.querySelector("[data-chip-answers]");
  const questions = document.querySelectorAll("details[data-question]");
  function countAnswered() {
    let opened = 0;
    questions.forEach((q) => { if (q.hasAttribute("data-answered")) opened += 1; });
    if (answersChip) answersChip.textContent = `${opened} of ${questions.length} answer${questions.length === 1 ? "" : "s"} opened`;
  }
  questions.forEach((question) => {
    question.addEventListener("toggle", () => {
      if (!question.open || question.hasAttribute("data-answered")) return;
      question.setAttribute("data-answered", "");
      countAnswered();
      send({ event: "answer", question: question.dataset.question });
    });
  });

  // 3. The fallback form.
  const form = document.querySelector("[data-mark-read]");
  if (form) {
    form.addEventListener("submit", (event) => { event.preventDefault(); markRead(); });
  }

  // 4. Where am I.
  const links = new Map();
  document.querySelectorAll(".lesson-toc a[href^='#']").forEach((a) => links.set(a.getAttribute("href").slice(1), a));
  if (links.size && "IntersectionObserver" in window) {
    const spy = new IntersectionObserver((entries) => {
      entries.forEach((entry) => {
        if (!entry.isIntersecting) return;
        links.forEach((a) => a.removeAttribute("aria-current"));
        const link = links.get(entry.target.id);
        if (link) link.setAttribute("aria-current", "true");
      });
    }, { rootMargin: "0px 0px -70% 0px" });
    links.forEach((_, id) => { const target = document.getElementById(id); if (target) spy.observe(target); });
  }
})();

// Live shelf page: one WebSocket per tab, a versioned snapshot, updates applied in
// version order. Any gap (a dropped broadcast, a reconnect) triggers a new snapshot.
// While the server's Redis is away the socket stays open and says "paused": the
// counts shown may be stale until "resumed" and the fresh snapshot that follows it.
(function () {
  "use strict";
  const root = document.querySelector("[data-live]");
  if (!root) return;
  const staff = root.dataset.staff === "true";
  const $ = (sel) => root.querySelector(sel);
  const statusBadge = document.querySelector("[data-live-status]");
  const state = { version: -1, books: new Map(), total: 0, updates: 0, resyncs: 0,
                  watching: null };
  // Names this tab for the page's life, so a reconnect replaces its own place in the
  // viewer count instead of adding one. getRandomValues works without HTTPS too.
  const tab = Array.from(crypto.getRandomValues(new Uint8Array(16)),
                         (b) => b.toString(16).padStart(2, "0")).join("");
  let socket = null;
  let retries = 0;

  function setStatus(name, text) {
    statusBadge.dataset.state = name;
    statusBadge.textContent = text;
  }

  function showError(text) {
    const box = $("[data-live-error]");
    box.textContent = text;
    box.hidden = !text;
  }

  function setWatching(watching) {
    state.watching = typeof watching === "number" ? watching : null;
    const box = document.querySelector("[data-live-presence]");
    const known = state.watching !== null;
    const text = known ? `${state.watching} watching now` : "Viewers: unknown";
    const label = box.querySelector("[data-live-watching]");
    // Rewriting the same words would make a screen reader announce them again.
    if (label.textContent !== text) label.textContent = text;
    box.dataset.known = String(known);
  }

  function row(book) {
    const tr = document.createElement("tr");
    tr.dataset.book = book.id;
    const cells = [String(book.id), book.title, String(book.on_shelf)];
    cells.forEach((text, i) => {
      const td = document.createElement("td");
      td.textContent = text;
      if (i === 0) td.className = "muted";
      if (i === 2) { td.className = "num"; td.dataset.count = ""; }
      tr.appendChild(td);
    });
    if (staff) tr.appendChild(correctionCell(book));
    return tr;
  }

  function correctionCell(book) {
    const td = document.createElement("td");
    const form = document.createElement("form");
    form.className = "live-correct";
    const input = document.createElement("input");
    Object.assign(input, { type: "number", min: "0", max: "10000", required: true,
                           value: String(book.on_shelf), name: "on_shelf" });
    input.setAttribute("aria-label", "New shelf count for " + book.title);
    const button = document.createElement("button");
    button.className = "btn btn-sm";
    button.textContent = "Set";
    form.append(input, button);
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      send({ action: "correct", book: book.id, on_shelf: Number(input.value) });
    });
    td.appendChild(form);
    return td;
  }

  function renderAll() {
    const body = $("[data-live-rows]");
    body.replaceChildren(...[...state.books.values()].map(row));
    renderStats();
  }

  function renderStats() {
    $("[data-live-total]").textContent = String(state.total);
    $("[data-live-version]").textContent = String(state.version);
    $("[data-live-updates]").textContent = String(state.updates);
    $("[data-live-resyncs]").textContent = String(state.resyncs);
  }

  function applySnapshot(msg) {
    state.version = msg.version;
    state.total = msg.total;
    state.books = new Map(msg.books.map((b) => [b.id, b]));
    if ("watching" in msg) setWatching(msg.watching);
    renderAll();
  }

  function applyUpdate(msg) {
    if (msg.version <= state.version) return; // already reflected by a newer state
    if (msg.version !== state.version + 1) {
      // A broadcast was missed (or several changes landed together): ask for the truth.
      state.resyncs += 1;
      send({ action: "snapshot" });
      renderStats();
      return;
    }
    state.version = msg.version;
    state.total = msg.total;
    state.updates += 1;
    const book = state.books.get(msg.book);
    if (book) {
      book.on_shelf = msg.on_shelf;
      const tr = $(`tr[data-book="${msg.book}"]`);
      if (tr) {
        tr.querySelector("[data-count]").textContent = String(msg.on_shelf);
        const input = tr.querySelector("input[name=on_shelf]");
        if (input && document.activeElement !== input) input.value = String(msg.on_shelf);
        tr.classList.remove("changed");
        void tr.offsetWidth; // restart the flash animation
        tr.classList.add("changed");
      }
    }
    renderStats();
  }

  function send(payload) {
    if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(payload));
  }

  function connect() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    socket = new WebSocket(scheme + location.host + root.dataset.socketPath + "?tab=" + tab);
    setStatus("connecting", "connecting…");
    socket.addEventListener("open", () => {
      retries = 0;
      setStatus("open", "live");
      showError("");
    });
    socket.addEventListener("message", (event) => {
      let msg;
      try { msg = JSON.parse(event.data); } catch (e) { return; }
      if (msg.type === "snapshot") applySnapshot(msg);
      else if (msg.type === "update") applyUpdate(msg);
      else if (msg.type === "presence") setWatching(msg.watching);
      else if (msg.type === "paused") setStatus("paused", "live updates paused");
      else if (msg.type === "resumed") setStatus("open", "live");
      else if (msg.type === "error") showError(msg.error);
      else if (msg.type === "corrected") showError("");
    });
    socket.addEventListener("close", (event) => {
      setStatus("closed", "reconnecting…");
      setWatching(null); // no longer told of changes: the last number may be wrong
      if (event.code === 4404) { showError("This branch does not exist."); return; }
      if (event.code === 4429) {
        // Past this browser's (or address's) share of live pages: trying again at
        // once would be refused again. A minute, jittered, lets other tabs close.
        showError("Too many live pages are open from this browser or address; " +
                  "close one and this page will try again.");
        setTimeout(connect, 30000 + Math.random() * 30000);
        return;
      }
      // Capped exponential backoff with full jitter, so a server restart does not
      // bring every tab back in the same instant.
      const ceiling = Math.min(10000, 250 * 2 ** retries);
      retries += 1;
      setTimeout(connect, Math.random() * ceiling);
    });
  }

  // For tests and the curious: the page's state and a way to drop the socket.
  window.liveShelf = { state, reconnect: () => socket && socket.close() };
  connect();
})();

/* The drill page follows its drill: polls status.json, reloads when it moved.
 *
 * While the sandbox starts or a check runs, the page asks every second; while the
 * drill waits for the learner, every fifteen seconds (each ask also keeps the drill
 * from its idle timeout). A new version of the drill's record (ready, checked,
 * closed) reloads the page, which the server draws as it now stands. A failed ask
 * is simply tried again at the next tick.
 */
(function () {
  "use strict";

  const root = document.querySelector("[data-drill-status-url]");
  if (!root || root.dataset.drillOpen !== "true") return;
  const url = root.dataset.drillStatusUrl;
  const version = Number(root.dataset.drillVersion);
  const busy = root.dataset.drillBusy === "true";
  const every = busy ? 1000 : 15000;

  async function ask() {
    try {
      const response = await fetch(url, { headers: { Accept: "application/json" }, cache: "no-store" });
      if (response.ok) {
        const drill = await response.json();
        if (drill.version !== version || drill.open !== true) {
          window.location.reload();
          return;
        }
      }
    } catch (error) {
      // The network or the server hiccupped: the next tick asks again.
    }
    window.setTimeout(ask, every);
  }

  window.setTimeout(ask, every);
})();

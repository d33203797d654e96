/* followProgress: follow a job over server-sent events, falling back to polling.
 *
 *   const stop = followProgress({ id, version, eventsUrl, onJob, onGone, fallback });
 *
 * 1. An EventSource opens `eventsUrl` (the job's /realtime/jobs/<id>/events) with
 *    ?lastEventId=<version>, so the server sends only what the page has not seen.
 *    Every `job` or `reset` event carries the whole job; `onJob(job)` gets it.
 * 2. When the stream breaks, the browser reconnects by itself after the server's
 *    `retry:` and sends Last-Event-ID. If it breaks again and again without an
 *    event in between, the page takes over: it closes the source and opens a new one
 *    after an exponential wait with full jitter, so many tabs do not come back at
 *    the same instant.
 * 3. After `maxFailures` such breaks (or when EventSource is missing) it gives up on
 *    the stream and calls `fallback(version)`: the caller's short polling resumes
 *    from the last version seen. A finished job closes the stream.
 */
(function (global) {
  "use strict";

  const DEFAULTS = { maxFailures: 4, baseMs: 1000, capMs: 15000, random: Math.random };

  function followProgress(settings) {
    const options = { ...DEFAULTS, ...settings };
    let version = options.version;
    let failures = 0;
    let source = null;
    let timer = null;
    let stopped = false;

    function stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
      if (source) source.close();
      source = null;
    }

    function giveUp() {
      stop();
      options.fallback(version);
    }

    function received(event) {
      let payload;
      try {
        payload = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      const job = event.type === "reset" ? payload.job : payload;
      if (!job) return;
      failures = 0;
      version = job.version;
      options.onJob(job);
      if (job.finished) stop();
    }

    function open() {
      if (stopped) return;
      const url = `${options.eventsUrl}?lastEventId=${encodeURIComponent(version)}`;
      source = new EventSource(url, { withCredentials: true });
      source.addEventListener("job", received);
      source.addEventListener("reset", received);
      source.addEventListener("gone", () => {
        stop();
        if (options.onGone) options.onGone();
      });
      source.addEventListener("error", () => {
        if (stopped) return;
        failures += 1;
        if (failures >= options.maxFailures) return giveUp();
        if (source.readyState === EventSource.CLOSED || failures > 1) {
          // Our own backoff instead of the browser's fixed retry.
          source.close();
          const ceiling = Math.min(options.capMs, options.baseMs * Math.pow(2, failures));
          const delay = options.random() * ceiling;
          timer = setTimeout(open, delay);
        }
      });
    }

    if (typeof global.EventSource !== "function" || !options.eventsUrl) {
      options.fallback(version);
      return () => {};
    }
    open();
    return stop;
  }

  global.followProgress = followProgress;
  // The page names the stream of a job (all zeros stand for the id) on this tag.
  const script = document.currentScript;
  followProgress.jobEventsUrl = (script && script.dataset.jobEvents) || "";
})(window);

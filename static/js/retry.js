/* fetchWithRetry: fetch, retrying a shed answer (503 or 429) with backoff and jitter.
 *
 * A server shedding load answers 503 with Retry-After (seconds). Every client coming
 * back exactly then would shed again together (a retry storm), so each wait is the
 * server's Retry-After (or the base) grown exponentially per attempt, capped, plus a
 * random jitter of up to the same amount; after `attempts` tries the last answer is
 * returned as it is. Only for idempotent requests (GET): a POST is never repeated.
 *
 *   const response = await fetchWithRetry(url, options, { attempts: 4 });
 */
(function (global) {
  "use strict";

  const DEFAULTS = { attempts: 4, baseMs: 500, capMs: 15000, random: Math.random, sleep: null };

  function retryAfterMs(response) {
    const raw = response.headers.get("Retry-After");
    if (!raw) return null;
    const seconds = Number(raw);
    if (Number.isFinite(seconds) && seconds >= 0) return seconds * 1000;
    const date = Date.parse(raw);
    return Number.isNaN(date) ? null : Math.max(0, date - Date.now());
  }

  function retryDelay(attempt, response, options) {
    const floor = Math.max(options.baseMs, retryAfterMs(response) ?? 0);
    const grown = Math.min(options.capMs, floor * Math.pow(2, attempt - 1));
    return grown + options.random() * grown; // full jitter on top of the server's wait
  }

  async function fetchWithRetry(url, init, settings) {
    const options = { ...DEFAULTS, ...(settings || {}) };
    const sleep = options.sleep || ((ms) => new Promise((done) => setTimeout(done, ms)));
    for (let attempt = 1; ; attempt++) {
      const response = await fetch(url, init);
      const shed = response.status === 503 || response.status === 429;
      if (!shed || attempt >= options.attempts) return response;
      const delay = retryDelay(attempt, response, options);
      if (options.onRetry) options.onRetry(attempt, delay, response);
      await sleep(delay);
    }
  }

  global.fetchWithRetry = fetchWithRetry;
  global.fetchWithRetry.delay = retryDelay;
})(window);

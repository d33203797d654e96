/* Predict first, then reveal.
 *
 * 1. The parts of a lesson that give the predicted figure away are rendered closed:
 *    <details data-answer-hold>, whose content is neither shown nor in the
 *    accessibility tree until it opens. Without JavaScript the top form is a GET
 *    (?prediction=12 or ?reveal=1) and the server renders them open; each also opens
 *    by itself with its own summary.
 * 2. With JavaScript the top form reveals in place: a number opens every held part,
 *    goes into the lab form's prediction field (so Run keeps it with the run) and is
 *    remembered for this tab; "Show it all without predicting" opens them without one.
 * 3. A prediction typed into the lab form instead reveals too, when the lab runs.
 * 4. The line above the question follows the lab form's parameters: the defaults, or
 *    the ones the learner changed, named (the question is for their run).
 */
(function () {
  "use strict";

  const box = document.querySelector("[data-predict-first]");
  if (!box) return;
  const slug = box.dataset.slug || "";
  const unit = box.dataset.unit || "";
  const topForm = box.querySelector("[data-predict-first-form]");
  const topInput = topForm.querySelector("input[name=prediction]");
  const errorLine = box.querySelector("[data-predict-error]");
  const status = box.querySelector("[data-predict-status]");
  const labForm = document.getElementById("lab-form");
  const labInput = labForm ? labForm.querySelector("input[name=prediction]") : null;
  const configNode = document.getElementById("lab-config");
  const defaults = configNode ? JSON.parse(configNode.textContent).defaults || {} : {};
  const KEY = `lesson-prediction:${slug}`;

  // The server's rule (course.forms.prediction_parse): "1,200" and "8.5 %" are numbers.
  function parse(text) {
    const cleaned = String(text).replace(/,/g, "").trim().replace(/%$/, "").trim();
    if (!cleaned) return null;
    const number = Number(cleaned);
    return Number.isFinite(number) && Math.abs(number) < 1e15 ? number : NaN;
  }

  function remember(value) {
    try {
      sessionStorage.setItem(KEY, value);
    } catch (error) {
      // Private mode: the page is revealed now; a reload asks again.
    }
  }

  function recalled() {
    try {
      return sessionStorage.getItem(KEY);
    } catch (error) {
      return null;
    }
  }

  function labLink(text) {
    const link = document.createElement("a");
    link.href = "#lab-title";
    link.textContent = text;
    return link;
  }

  function say(value) {
    status.replaceChildren();
    if (value === "") {
      status.append("Shown without a prediction. You can still predict before you ", labLink("run the lab"), ".");
      return;
    }
    const figure = document.createElement("strong");
    figure.textContent = unit ? `${value} ${unit}` : value;
    status.append("Your prediction: ", figure, ". The folded parts are open; ", labLink("run the lab"), " to check it.");
  }

  function reveal() {
    document.querySelectorAll("details[data-answer-hold]").forEach((hold) => {
      hold.open = true;
      hold.classList.add("is-revealed");
    });
    box.classList.add("is-revealed");
  }

  function predicted(text) {
    reveal();
    if (labInput && labInput.value.trim() !== text) labInput.value = text;
    if (topInput.value.trim() !== text) topInput.value = text;
    remember(text);
    say(text);
  }

  function showError(message) {
    errorLine.textContent = message;
    if (message) topInput.setAttribute("aria-invalid", "true");
    else topInput.removeAttribute("aria-invalid");
  }

  topForm.addEventListener("submit", (event) => {
    event.preventDefault();
    showError("");
    if (event.submitter && event.submitter.hasAttribute("data-predict-reveal")) {
      reveal();
      remember("");
      say("");
      return;
    }
    const value = parse(topInput.value);
    if (value === null) {
      showError("Type your guess first, or choose to see it all without predicting.");
      topInput.focus();
    } else if (Number.isNaN(value)) {
      showError("Give a number, like 12 or 8.5.");
      topInput.focus();
    } else {
      predicted(topInput.value.trim());
    }
  });

  // Only on Run, not when the field loses focus: opening the folds above moves the
  // Run button, and a press that starts as the field blurs would miss it.
  if (labInput && labForm) {
    labForm.addEventListener("submit", () => {
      const value = parse(labInput.value);
      if (value !== null && !Number.isNaN(value)) predicted(labInput.value.trim());
    });
  }

  // --- whose parameters the question is about ------------------------------------
  function sameValue(text, fallback) {
    const squeeze = (value) => String(value).replace(/\s+/g, "");
    return text.trim() === "" || squeeze(text) === squeeze(fallback);
  }

  function contextText() {
    const changed = [];
    for (const [name, fallback] of Object.entries(defaults)) {
      const input = labForm && labForm.querySelector(`input[name="${CSS.escape(name)}"]`);
      if (input && !sameValue(input.value, fallback)) changed.push(`${name}=${input.value.trim()}`);
    }
    if (!changed.length) return "With the defaults (the lesson's run):";
    return `With your parameters (${changed.join(", ")}), not the defaults the question describes:`;
  }

  function updateContext() {
    const text = contextText();
    document.querySelectorAll("[data-predict-context]").forEach((line) => {
      if (line.textContent !== text) line.textContent = text;
      line.classList.toggle("is-changed", !text.startsWith("With the defaults"));
    });
  }

  if (labForm) {
    labForm.addEventListener("input", updateContext);
    labForm.addEventListener("change", updateContext);
    labForm.addEventListener("reset", () => setTimeout(updateContext, 0));
    updateContext();
  }

  // --- a prediction made earlier in this tab -------------------------------------
  const earlier = recalled();
  if (earlier !== null && !box.classList.contains("is-revealed")) {
    reveal();
    if (earlier !== "") {
      if (!topInput.value) topInput.value = earlier;
      if (labInput && !labInput.value) labInput.value = earlier;
    }
    say(earlier);
  }
})();

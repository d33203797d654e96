// Loan desk search fields: suggestions while typing, in an accessible listbox.
//
// Progressive enhancement: each [data-desk-search] block already works as a plain
// text field that the server resolves. This script adds the ARIA 1.2 combobox
// pattern (role=combobox, aria-expanded, aria-controls, aria-activedescendant) and
// fills the hidden <name>_id input when a suggestion is picked. Keys: Down/Up move,
// Enter picks (only while a suggestion is active, so Enter still submits the form
// otherwise), Escape closes. Typing clears the picked id: the text no longer names
// that row, and the server would resolve the new text anyway.
(function () {
  "use strict";

  var DEBOUNCE_MS = 150;
  var MIN_CHARS = 2; // as library.selectors.SEARCH_MIN_CHARS
  var NUMBER = /^#?[0-9]{1,9}$/;

  var DAY = new Intl.DateTimeFormat("en-GB", { day: "numeric", month: "short", year: "numeric" });

  function day(iso) {
    // A date without a zone: read it as UTC and print it as UTC, so it never moves.
    var parts = iso.split("-").map(Number);
    return DAY.format(new Date(Date.UTC(parts[0], parts[1] - 1, parts[2])));
  }

  // What each kind shows: its name, then where the copy is, who has it, since when.
  // tone: the badge's colour ("" for a plain count).
  var DETAILS = {
    book: function (hit) {
      return {
        main: hit.title,
        aside: "\u2014 " + hit.author,
        meta: hit.branch + " \u00b7 book #" + hit.id,
        badge: hit.on_shelf ? hit.on_shelf + " on shelf" : "none on shelf",
        tone: hit.on_shelf > 0 ? "success" : "danger",
      };
    },
    member: function (hit) {
      return {
        main: hit.name,
        aside: "",
        meta: "card " + hit.card + (hit.email ? " \u00b7 " + hit.email : ""),
        badge: hit.open_loans + " open loan" + (hit.open_loans === 1 ? "" : "s"),
        tone: "",
      };
    },
    loan: function (hit) {
      return {
        main: hit.book,
        aside: "\u2014 " + hit.member,
        meta: hit.branch + " \u00b7 card " + hit.card,
        badge: "since " + day(hit.since),
        tone: "",
      };
    },
  };

  function enhance(block) {
    var input = block.querySelector("input[type=text]");
    if (!input) return;
    var name = input.name;
    var form = input.form;
    var details = DETAILS[block.getAttribute("data-kind")] || DETAILS.book;
    var source = block.getAttribute("data-source");
    var listId = input.id + "-listbox";

    var list = document.createElement("ul");
    list.id = listId;
    list.className = "desk-listbox";
    list.setAttribute("role", "listbox");
    list.setAttribute("aria-label", "Suggestions for " + block.querySelector("label").textContent);
    list.hidden = true;

    // Announces how many suggestions arrived, for screen readers (polite).
    var status = document.createElement("p");
    status.className = "sr-only";
    status.setAttribute("role", "status");
    status.setAttribute("aria-live", "polite");

    // Says what was picked, in the words of the suggestion, until the text changes.
    var picked = document.createElement("p");
    picked.className = "desk-picked";
    picked.hidden = true;

    var wrap = document.createElement("div");
    wrap.className = "desk-combo";
    input.parentNode.insertBefore(wrap, input);
    wrap.appendChild(input);
    wrap.appendChild(list);
    wrap.after(picked);
    block.appendChild(status);

    input.setAttribute("role", "combobox");
    input.setAttribute("aria-autocomplete", "list");
    input.setAttribute("aria-expanded", "false");
    input.setAttribute("aria-controls", listId);

    var hits = [];
    var active = -1;
    var timer = null;
    var asked = 0; // the number of the latest request: older answers are dropped
    var controller = null;
    var lastQuery = null;

    function hiddenId() {
      var hidden = form.querySelector("input[type=hidden][name='" + name + "_id']");
      if (!hidden) {
        // The server showed a choice list (radios) instead: a pick replaces it.
        hidden = document.createElement("input");
        hidden.type = "hidden";
        hidden.name = name + "_id";
        block.appendChild(hidden);
      }
      return hidden;
    }

    function setActive(index) {
      var options = list.children;
      if (active >= 0 && options[active]) options[active].setAttribute("aria-selected", "false");
      active = index;
      if (active >= 0 && options[active]) {
        options[active].setAttribute("aria-selected", "true");
        input.setAttribute("aria-activedescendant", options[active].id);
        options[active].scrollIntoView({ block: "nearest" });
      } else {
        input.removeAttribute("aria-activedescendant");
      }
    }

    function open() {
      if (!hits.length) return close();
      list.hidden = false;
      input.setAttribute("aria-expanded", "true");
    }

    function close() {
      list.hidden = true;
      input.setAttribute("aria-expanded", "false");
      setActive(-1);
    }

    function option(hit, index) {
      var shown = details(hit);
      var item = document.createElement("li");
      item.id = input.id + "-option-" + index;
      item.className = "desk-option";
      item.setAttribute("role", "option");
      item.setAttribute("aria-selected", "false");
      var main = document.createElement("span");
      main.className = "desk-option-main";
      var name = document.createElement("strong");
      name.textContent = shown.main;
      main.appendChild(name);
      if (shown.aside) {
        var aside = document.createElement("span");
        aside.className = "muted";
        aside.textContent = " " + shown.aside;
        main.appendChild(aside);
      }
      var meta = document.createElement("span");
      meta.className = "desk-option-meta";
      meta.textContent = shown.meta;
      var badge = document.createElement("span");
      badge.className = "badge" + (shown.tone ? " badge-" + shown.tone : "");
      badge.textContent = shown.badge;
      item.append(main, meta, badge);
      // mousedown, not click: it comes before the input's blur closes the list.
      item.addEventListener("mousedown", function (event) {
        event.preventDefault();
        pick(index);
      });
      return item;
    }

    function show(answer) {
      hits = answer.results;
      list.replaceChildren.apply(list, hits.map(option));
      if (answer.more) {
        var more = document.createElement("li");
        more.className = "desk-more";
        more.setAttribute("role", "presentation");
        more.textContent = "More match: type another word to narrow.";
        list.appendChild(more);
      }
      status.textContent = hits.length
        ? hits.length + (answer.more ? "+" : "") + " suggestions; use the arrow keys."
        : "No match.";
      setActive(-1);
      if (document.activeElement === input) open();
      else close();
    }

    function ask(text) {
      asked += 1;
      var mine = asked;
      if (controller) controller.abort();
      controller = new AbortController();
      fetch(source + "?q=" + encodeURIComponent(text), {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
        signal: controller.signal,
      })
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.json();
        })
        .then(function (answer) {
          if (mine !== asked) return;
          lastQuery = text;
          show(answer);
        })
        .catch(function (error) {
          if (error.name === "AbortError" || mine !== asked) return;
          // The form still works: the server resolves the text on submit.
          hits = [];
          list.replaceChildren();
          close();
          status.textContent = "Suggestions are unavailable; the form still searches when sent.";
        });
    }

    function pick(index) {
      var hit = hits[index];
      if (!hit) return;
      input.value = hit.label;
      hiddenId().value = String(hit.id);
      var choices = block.nextElementSibling;
      if (choices && choices.classList.contains("desk-choices")) choices.remove();
      lastQuery = hit.label;
      close();
      var shown = details(hit);
      var badge = document.createElement("span");
      badge.className = "badge" + (shown.tone ? " badge-" + shown.tone : "");
      badge.textContent = shown.badge;
      picked.replaceChildren("\u2713 " + shown.meta + " ", badge);
      picked.hidden = false;
      status.textContent = "Picked " + hit.label + ".";
    }

    input.addEventListener("input", function () {
      hiddenId().value = "";
      picked.hidden = true;
      var text = input.value.trim();
      clearTimeout(timer);
      if (text.length < MIN_CHARS && !NUMBER.test(text)) {
        asked += 1; // an answer still on its way is for older text
        hits = [];
        list.replaceChildren();
        close();
        return;
      }
      timer = setTimeout(function () {
        ask(text);
      }, DEBOUNCE_MS);
    });

    input.addEventListener("keydown", function (event) {
      var count = hits.length;
      if (event.key === "ArrowDown" || event.key === "ArrowUp") {
        if (!count) return;
        event.preventDefault();
        if (list.hidden) {
          open();
          setActive(event.key === "ArrowDown" ? 0 : count - 1);
          return;
        }
        var step = event.key === "ArrowDown" ? 1 : -1;
        setActive((active + step + count) % count);
      } else if (event.key === "Enter") {
        if (!list.hidden && active >= 0) {
          event.preventDefault(); // pick, do not submit
          pick(active);
        }
      } else if (event.key === "Escape") {
        if (!list.hidden) {
          event.preventDefault();
          close();
        }
      }
    });

    input.addEventListener("blur", close);
    input.addEventListener("focus", function () {
      // Back in a field whose suggestions are still those of its text: show them.
      if (hits.length && lastQuery === input.value.trim() && !hiddenId().value) open();
    });
  }

  document.querySelectorAll("[data-desk-search]").forEach(enhance);
})();

// Small progressive enhancements; every page works without this script.
(function () {
  "use strict";
  var root = document.documentElement;
  root.classList.add("js");

  // Phone menu: the links stay visible without JavaScript; with it they fold away.
  var header = document.querySelector("[data-nav]");
  var toggle = header && header.querySelector(".nav-toggle");
  if (toggle) {
    toggle.hidden = false;
    toggle.addEventListener("click", function () {
      var open = header.classList.toggle("is-open");
      toggle.setAttribute("aria-expanded", open ? "true" : "false");
    });
    // Escape closes an open menu and gives focus back to its button.
    document.addEventListener("keydown", function (event) {
      if (event.key !== "Escape" || !header.classList.contains("is-open")) return;
      header.classList.remove("is-open");
      toggle.setAttribute("aria-expanded", "false");
      if (header.contains(document.activeElement)) toggle.focus();
    });
  }

  // A table or code block wider than its box scrolls sideways (a phone): it becomes a
  // named region that the keyboard can reach and scroll. One that fits stays out of
  // the tab order. Checked again when the window resizes or content arrives.
  function regionName(box) {
    var figure = box.closest("figure, section");
    var caption = figure && figure.querySelector("figcaption, h2, h3, caption");
    var what = box.matches("pre") ? "Code" : "Table";
    var text = caption ? caption.textContent.replace(/\s+/g, " ").trim() : "";
    return text ? what + ": " + text + " (scrolls sideways)" : what + " (scrolls sideways)";
  }
  function scrollRegions() {
    document.querySelectorAll(".table-wrap, pre").forEach(function (box) {
      var wide = box.scrollWidth > box.clientWidth + 1;
      if (wide && !box.hasAttribute("tabindex")) {
        box.setAttribute("tabindex", "0");
        box.setAttribute("role", "region");
        if (!box.hasAttribute("aria-label")) box.setAttribute("aria-label", regionName(box));
        box.setAttribute("data-scroll-region", "");
      } else if (!wide && box.hasAttribute("data-scroll-region")) {
        ["tabindex", "role", "aria-label", "data-scroll-region"].forEach(function (name) {
          box.removeAttribute(name);
        });
      }
    });
  }
  var pending = null;
  function scrollRegionsSoon() {
    if (pending) return;
    pending = window.requestAnimationFrame(function () {
      pending = null;
      scrollRegions();
    });
  }
  scrollRegions();
  window.addEventListener("resize", scrollRegionsSoon);
  window.addEventListener("load", scrollRegionsSoon);
  if ("MutationObserver" in window) {
    new MutationObserver(scrollRegionsSoon).observe(document.body, { childList: true, subtree: true });
  }

  // Messages can be dismissed.
  document.querySelectorAll(".messages > li").forEach(function (item) {
    var close = document.createElement("button");
    close.type = "button";
    close.className = "message-close";
    close.setAttribute("aria-label", "Dismiss");
    close.textContent = "\u00d7";
    close.addEventListener("click", function () {
      item.remove();
    });
    item.appendChild(close);
  });

  // A return form asks once before putting a copy back (data-confirm="...").
  document.querySelectorAll("form[data-confirm]").forEach(function (form) {
    form.addEventListener("submit", function (event) {
      if (!window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
    });
  });
})();

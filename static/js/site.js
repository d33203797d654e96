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

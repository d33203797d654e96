/* Diagrams full size: a tap (click, or Enter on the focused link) opens a diagram in a
 * full-screen dialog at its drawn width, where it scrolls and zooms; Escape or Close
 * returns to the page. The diagrams are drawn 720 wide, so on a 390 px phone the
 * page shows them at about half size: the dialog is where their labels are legible.
 * Without JavaScript (or <dialog>) the link opens the SVG itself, which the browser
 * zooms as any image.
 */
(function () {
  "use strict";

  const links = document.querySelectorAll("a.diagram-zoom");
  if (!links.length || typeof HTMLDialogElement !== "function") return;

  const DRAWN_WIDTH = 720; // every diagram's viewBox width (course/AUTHORING.md)
  const STEPS = [0.5, 0.75, 1, 1.5, 2, 3];

  function button(label, text) {
    const element = document.createElement("button");
    element.type = "button";
    element.className = "btn btn-sm";
    element.setAttribute("aria-label", label);
    element.textContent = text;
    return element;
  }

  const dialog = document.createElement("dialog");
  dialog.className = "diagram-dialog";
  const bar = document.createElement("div");
  bar.className = "diagram-dialog-bar";
  const title = document.createElement("p");
  title.className = "diagram-dialog-title";
  title.id = "diagram-dialog-title";
  dialog.setAttribute("aria-labelledby", title.id);
  const smaller = button("Zoom out", "−");
  const larger = button("Zoom in", "+");
  const close = button("Close the diagram", "Close");
  bar.append(title, smaller, larger, close);
  const view = document.createElement("div");
  view.className = "diagram-dialog-view";
  const image = document.createElement("img");
  image.decoding = "async";
  view.appendChild(image);
  dialog.append(bar, view);
  document.body.appendChild(dialog);

  let step = 2;

  function draw() {
    image.style.width = `${Math.round(DRAWN_WIDTH * STEPS[step])}px`;
    smaller.disabled = step === 0;
    larger.disabled = step === STEPS.length - 1;
  }

  smaller.addEventListener("click", () => { step = Math.max(0, step - 1); draw(); });
  larger.addEventListener("click", () => { step = Math.min(STEPS.length - 1, step + 1); draw(); });
  close.addEventListener("click", () => dialog.close());
  // A tap on the dark margin around the picture closes it too.
  dialog.addEventListener("click", (event) => { if (event.target === dialog) dialog.close(); });

  links.forEach((link) => {
    link.addEventListener("click", (event) => {
      if (event.metaKey || event.ctrlKey || event.shiftKey) return; // a new tab: let it
      event.preventDefault();
      const original = link.querySelector("img");
      const caption = link.closest("figure").querySelector("figcaption");
      image.src = link.href;
      image.alt = original ? original.alt : "";
      title.textContent = caption ? caption.textContent : "Diagram";
      step = 2; // drawn size: 13 px labels stay 13 px
      draw();
      dialog.showModal();
      view.scrollTo(0, 0);
      close.focus();
    });
  });
})();

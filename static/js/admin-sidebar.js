/* Apply the admin sidebar's open/closed state while the page is parsed.
 *
 * Django's nav_sidebar.js does this too, but deferred: a page painted before it ran
 * moved its whole content sideways when the sidebar opened (a layout shift on every
 * admin page). Loaded without defer, right where #main already exists.
 */
document.getElementById("main").classList.toggle(
  "shifted",
  localStorage.getItem("django.admin.navSidebarIsOpen") !== "false"
);
